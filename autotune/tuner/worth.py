"""What each setting of the winner is worth: the winner beside itself with one setting
changed (``variants``), measured interleaved in the same rounds, within a share of the
search's time that is planned and then enforced.

Importances say which settings moved samples/s across the search; this says what each
setting of *the pick* buys on this machine, in comparisons that differ in one setting only.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.pipeline.config import PipelineConfig
from autotune.runtime.trial import run_trial
from autotune.session import Session
from autotune.session.session import Run
from autotune.tuner import store, study_trials
from autotune.tuner.confirm import confirm
from autotune.tuner.metrics import Confirmed, overlaps
from autotune.tuner.polish import Step, enqueue_step
from autotune.tuner.store import TrialKey
from autotune.tuner.variants import Variant, decoders_ranked, variants

log = logging.getLogger(__name__)

WINNER = "winner"
NO_EFFECT = "no measurable effect here"


def verdict(row: Confirmed, winner: Confirmed, run_to_run: float = 0.0) -> str:
    """ "none" where the IQRs overlap, or, measured in one round, where the two differ by
    no more than two runs of one config do (``metrics.run_to_run``): no measurable effect;
    "worth" where the winner is faster, "faster" where this variant is."""
    apart = max(row.median, winner.median) / min(row.median, winner.median) - 1
    one_round = min(row.rounds, winner.rounds) < 2
    if overlaps(row.iqr, winner.iqr) or (one_round and apart <= run_to_run):
        return "none"
    return "worth" if row.median < winner.median else "faster"


def effect(row: dict[str, Any]) -> str:
    """A row's verdict in words, its ratio as the table shows it (rounded the same way)."""
    if row["verdict"] == "none":
        return NO_EFFECT
    rate, winner = row["samples_per_s"], row["winner_samples_per_s"]
    if row["verdict"] == "worth":
        return f"the winner's {row['knob']} is worth {winner / rate:.2f}x"
    return f"{row['label']} is {rate / winner:.2f}x the winner"


@dataclass(frozen=True)
class WorthTable:
    """The winner and its variants, measured in the same interleaved rounds."""

    winner: dict[str, Any]  # the winner's row in these rounds (Confirmed.to_dict())
    rows: tuple[dict[str, Any], ...]  # one per variant (``_row``)
    left_out: tuple[str, ...]  # variants the budget did not allow
    seconds: float  # what the worth took
    search_seconds: float  # what the search took, all its trials
    budget: float  # study.worth_budget
    failed: tuple[str, ...] = ()  # variants that failed in every round
    # the variant that beat the winner by most: {"label", "n_trials"} where it is queued in
    # the study, {"label", "searched_as"} where the search measured it (``_queue_the_fastest``)
    queued: dict[str, Any] | None = None
    run_to_run: float = 0.0  # how far two runs of one config differed in the confirmation

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def search_seconds(study: optuna.Study) -> float:
    """The search's time: every finished trial's wall time (resumed runs included)."""
    trials = study.get_trials(deepcopy=False, states=store.FINISHED)
    return sum(store.trial_attr(t, TrialKey.WALL_S, 0.0) for t in trials)


def _seconds_per_run(study: optuna.Study) -> float | None:
    """What one run of the worth table costs: its runs are as long as the search's, so the
    complete trials' median wall time (None: unknown)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    walls = [w for t in complete if (w := store.trial_attr(t, TrialKey.WALL_S)) is not None]
    return (statistics.median(walls) or None) if walls else None


def _within_budget(
    session: Session, study: optuna.Study, planned: list[Variant]
) -> tuple[list[Variant], list[Variant], float] | None:
    """The planned variants that ``study.worth_budget`` of the search's time allows (at
    ``_seconds_per_run`` a run, the winner in every round too), the rest, and the seconds
    allowed; None where nothing says what a run costs, or the budget is 0.

    The winner without its prepared copy is measured whatever the budget: what the copy
    buys, and after how many epochs it pays for itself, is the report's to say."""
    study_conf = session.conf.study
    per_run = _seconds_per_run(study)
    if per_run is None or study_conf.worth_budget <= 0:
        return None
    spent_on_search, rounds = search_seconds(study), study_conf.worth_rounds
    allowed = study_conf.worth_budget * spent_on_search
    fits = max(0, int(allowed // (rounds * per_run)) - 1)
    if fits == 0 and planned and planned[0].knob == "cache":
        fits, allowed = 1, max(allowed, 1.5 * 2 * rounds * per_run)  # with some slack
    if fits < len(planned):
        log.info(
            "what each setting is worth: %d of %d variants fit in study.worth_budget "
            "(%.0f%% of the search's %.0f s at ~%.0f s a run, %d round(s) with the winner)",
            fits,
            len(planned),
            100 * study_conf.worth_budget,
            spent_on_search,
            per_run,
            rounds,
        )
    return planned[:fits], planned[fits:], allowed


def _row(
    variant: Variant,
    winner: PipelineConfig,
    row: Confirmed,
    again: Confirmed,
    run_to_run: float,
    *,
    reused: bool = False,
) -> dict:
    """A variant's row of the table: its figures beside the winner's of the same rounds
    (``reused``: the confirmation's, where the variant was a finalist)."""
    out = {
        "label": variant.label,
        "knob": variant.knob,
        "winner_value": getattr(winner, variant.knob),
        "value": variant.value,
        "also_changed": list(variant.also_changed),
        "config": variant.config.short(),
        "samples_per_s": round(row.median, 1),
        "iqr": [round(x, 1) for x in row.iqr],
        "winner_samples_per_s": round(again.median, 1),
        "ratio": round(round(row.median, 1) / round(again.median, 1), 3),
        "verdict": verdict(row, again, run_to_run),
        "rounds": row.rounds,
        "from_confirmation": reused,
    }
    out["effect"] = effect(out)
    return out


def measure_worth(
    session: Session,
    study: optuna.Study,
    winner: Confirmed,
    baseline: PipelineConfig,
    *,
    run: Run = run_trial,
    run_to_run: float = 0.0,
    confirmed: tuple[Confirmed, ...] = (),
) -> WorthTable | None:
    """Measures the winner's variants that fit in ``study.worth_budget`` of the search's
    time, interleaved with the winner for ``study.worth_rounds``, and queues the one that
    beat it by most (``_queue_the_fastest``); ``run_to_run``: how far two runs of one config
    differ here, which a difference measured in one round must pass to count. A variant that
    is one of the ``confirmed`` finalists is not run again: its confirmation rounds, beside
    the winner's there, are its row, and cost the budget nothing. None where the winner has
    none, the budget is 0, or the rounds were stopped."""
    study_conf = session.conf.study
    tuned = [k.name for k in session.space.knobs if k.type != "fixed"]
    ranked = decoders_ranked(study, winner.config, session.space.choices("decoder"))
    planned = variants(winner.config, baseline, tuned=tuned, decoders_ranked=ranked)
    finalist = {c.config: c for c in confirmed if c.rounds}  # re-measured, not the search's
    every, planned = planned, [v for v in planned if v.config not in finalist]
    split = _within_budget(session, study, planned) if every else None
    if split is None:
        return None
    measured, left_out, allowed_s = split
    spent_on_search = round(search_seconds(study), 1)
    labels = tuple(v.label for v in left_out)
    if not measured and len(planned) == len(every):  # nothing to run, nothing to reuse
        return WorthTable({}, (), labels, 0.0, spent_on_search, study_conf.worth_budget)
    started = time.monotonic()
    rounds, ran = _measure(session, winner, measured, started + allowed_s, run)
    again = rounds.get(WINNER) if measured else winner
    if again is None:  # stopped, or the winner failed in these rounds
        return None
    rows = []
    for v in every:  # in the planned order
        if v.config in finalist:  # beside the winner in the confirmation
            row = _row(v, winner.config, finalist[v.config], winner, run_to_run, reused=True)
            rows.append((v, row))
        elif v.label in rounds:
            rows.append((v, _row(v, winner.config, rounds[v.label], again, run_to_run)))
    return WorthTable(
        again.to_dict(),
        tuple(row for _, row in rows),
        (*(v.label for v in measured if v.config not in ran), *labels),
        round(time.monotonic() - started, 1),
        spent_on_search,
        study_conf.worth_budget,
        failed=tuple(v.label for v in measured if v.config in ran and v.label not in rounds),
        queued=_queue_the_fastest(session, study, winner, tuple(rows)),
        run_to_run=round(run_to_run, 3),
    )


def _measure(
    session: Session, winner: Confirmed, measured: list[Variant], deadline: float, run: Run
) -> tuple[dict[str, Confirmed], set[PipelineConfig]]:
    """The winner and ``measured`` in ``study.worth_rounds`` interleaved rounds, none
    started that would end past ``deadline``: their figures by label, and the configs run."""
    picked = [(WINNER, winner.trial_number, winner.config)]
    picked += [(v.label, None, v.config) for v in measured]
    ran: set[PipelineConfig] = set()

    def run_and_note(job: Any, **kwargs: Any) -> Any:
        ran.add(job.pipeline)
        return run(job, **kwargs)

    # runs as long as a search trial, not the confirmation's: a quarter of the search then
    # covers several settings, and a shorter run's wider IQR only makes "no measurable
    # effect" likelier (the rows are read against each other's spread, never ranked)
    if not measured:  # every variant was a finalist: nothing to run
        return {}, ran
    log.info(
        "what each setting is worth: %d variants of the winner, %d interleaved round(s)",
        len(measured),
        session.conf.study.worth_rounds,
    )
    rounds = {"rounds": session.conf.study.worth_rounds, "stage": "worth"}
    rows = confirm(session, picked, run=run_and_note, ranking=False, deadline=deadline, **rounds)
    return {c.label: c for c in rows}, ran


def _queue_the_fastest(
    session: Session,
    study: optuna.Study,
    winner: Confirmed,
    rows: tuple[tuple[Variant, dict[str, Any]], ...],
) -> dict[str, Any] | None:
    """The variant that beat the winner by most, beyond the spread, queued in the study as a
    polish step from the winner: the search never measured it, and a run with one trial more
    measures it as a search trial and confirms it beside the winner (one round here does not
    overturn a confirmed pick); once, however often the table runs before it is measured.
    Where the search did measure it, it is named instead: a step the search did not miss.
    None where no variant beat the winner."""
    faster = [(v, row) for v, row in rows if row["verdict"] == "faster"]
    if not faster or winner.trial_number is None:
        return None
    variant, row = max(faster, key=lambda pair: pair[1]["ratio"])
    # the objective would take a queued config the search ran as a repeat of that trial
    searched = study_trials.earlier_run(study, variant.config)
    if searched is not None:
        return {"label": variant.label, "searched_as": searched.number}
    params = session.space.params_of(variant.config)
    if params is None:
        return None
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    if not any(store.enqueued_params(t) == params for t in waiting):
        step = Step(params, variant.knob, winner.trial_number)
        enqueue_step(study, step, store.POLISH, as_is=variant.config.as_is)
    n_trials = study_trials.spent(study, free=session.conf.study.n_trials) + 1
    return {"label": variant.label, "n_trials": n_trials}

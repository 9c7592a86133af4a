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

from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.runtime.trial import run_trial
from autotune.session import Session
from autotune.session.session import Run
from autotune.tuner import store
from autotune.tuner.confirm import confirm
from autotune.tuner.metrics import Confirmed, overlaps
from autotune.tuner.store import TrialKey
from autotune.tuner.variants import Variant, decoders_ranked, reduces, variants

log = logging.getLogger(__name__)

WINNER = "winner"
NO_EFFECT = "no measurable effect here"


def verdict(row: Confirmed, winner: Confirmed) -> str:
    """ "none" where the IQRs overlap (no measurable effect), "worth" where the winner is
    faster, "faster" where this variant is."""
    if overlaps(row.iqr, winner.iqr):
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
class Ablation:
    """The winner and its variants, measured in the same interleaved rounds."""

    winner: dict[str, Any]  # the winner's row in these rounds (Confirmed.to_dict())
    rows: tuple[dict[str, Any], ...]  # one per variant (``_row``)
    left_out: tuple[str, ...]  # variants the budget did not allow
    seconds: float  # what the ablation took
    search_seconds: float  # what the search took, all its trials
    budget: float  # study.ablation_budget
    failed: tuple[str, ...] = ()  # variants that failed in every round

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def search_seconds(study: optuna.Study) -> float:
    """The search's time: every finished trial's wall time (resumed runs included)."""
    trials = study.get_trials(deepcopy=False, states=store.FINISHED)
    return sum(t.user_attrs.get(TrialKey.WALL_S, 0.0) for t in trials)


def _seconds_per_run(study: optuna.Study) -> float | None:
    """What one run of the worth table costs: its runs are as long as the search's, so the
    complete trials' median wall time (None: unknown)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    walls = [t.user_attrs[TrialKey.WALL_S] for t in complete if TrialKey.WALL_S in t.user_attrs]
    return (statistics.median(walls) or None) if walls else None


def _within_budget(
    session: Session, study: optuna.Study, planned: list[Variant]
) -> tuple[list[Variant], list[Variant], float] | None:
    """The planned variants that ``study.ablation_budget`` of the search's time allows (at
    ``_seconds_per_run`` a run, the winner in every round too), the rest, and the seconds
    allowed; None where nothing says what a run costs, or the budget is 0.

    The winner without its prepared copy is measured whatever the budget: what the copy
    buys, and after how many epochs it pays for itself, is the report's to say."""
    cfg = session.config.study
    per_run = _seconds_per_run(study)
    if per_run is None or cfg.ablation_budget <= 0:
        return None
    spent_on_search, rounds = search_seconds(study), cfg.ablation_rounds
    allowed = cfg.ablation_budget * spent_on_search
    fits = max(0, int(allowed // (rounds * per_run)) - 1)
    if fits == 0 and planned and planned[0].knob == "cache":
        fits, allowed = 1, max(allowed, 1.5 * 2 * rounds * per_run)  # with some slack
    if fits < len(planned):
        log.info(
            "what each setting is worth: %d of %d variants fit in study.ablation_budget "
            "(%.0f%% of the search's %.0f s at ~%.0f s a run, %d round(s) with the winner)",
            fits,
            len(planned),
            100 * cfg.ablation_budget,
            spent_on_search,
            per_run,
            rounds,
        )
    return planned[:fits], planned[fits:], allowed


def _row(variant: Variant, winner: PipelineConfig, row: Confirmed, again: Confirmed) -> dict:
    """A variant's row of the table: its figures beside the winner's of the same rounds."""
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
        "verdict": verdict(row, again),
    }
    out["effect"] = effect(out)
    return out


def ablate(
    session: Session,
    study: optuna.Study,
    winner: Confirmed,
    baseline: PipelineConfig,
    *,
    run: Run = run_trial,
) -> Ablation | None:
    """Measures the winner's variants that fit in ``study.ablation_budget`` of the search's
    time, interleaved with the winner for ``study.ablation_rounds``; None where the winner
    has none, the budget is 0, or the rounds were stopped."""
    cfg = session.config.study
    tuned = [k.name for k in session.space.knobs if k.type != "fixed"]
    ranked = decoders_ranked(study, winner.config, session.space.choices("decoder"))
    planned = variants(winner.config, baseline, tuned=tuned, decoders_ranked=ranked)
    split = _within_budget(session, study, planned) if planned else None
    if split is None:
        return None
    measured, left_out, allowed_s = split
    spent_on_search = round(search_seconds(study), 1)
    labels = tuple(v.label for v in left_out)
    if not measured:
        return Ablation({}, (), labels, 0.0, spent_on_search, cfg.ablation_budget)
    log.info(
        "what each setting is worth: %d variants of the winner, %d interleaved round(s)",
        len(measured),
        cfg.ablation_rounds,
    )
    started = time.monotonic()
    picked = [(WINNER, winner.trial_number, winner.config)]
    picked += [(v.label, None, v.config) for v in measured]
    ran: set[PipelineConfig] = set()

    def run_and_note(job: Any, **kwargs: Any) -> Any:
        ran.add(job.pipeline)
        return run(job, **kwargs)

    deadline = started + allowed_s  # the estimate, enforced
    # runs as long as a search trial, not the confirmation's: a quarter of the search then
    # covers several settings, and a shorter run's wider IQR only makes "no measurable
    # effect" likelier (the rows are read against each other's spread, never ranked)
    rounds = {"rounds": cfg.ablation_rounds, "stage": "worth", "deadline": deadline}
    rows = confirm(session, picked, run=run_and_note, ranking=False, **rounds)
    confirmed = {c.label: c for c in rows}
    again = confirmed.get(WINNER)
    if again is None:  # stopped, or the winner failed in these rounds
        return None
    return Ablation(
        again.to_dict(),
        tuple(
            _row(v, winner.config, confirmed[v.label], again)
            for v in measured
            if v.label in confirmed
        ),
        (*(v.label for v in measured if v.config not in ran), *labels),
        round(time.monotonic() - started, 1),
        spent_on_search,
        cfg.ablation_budget,
        failed=tuple(v.label for v in measured if v.config in ran and v.label not in confirmed),
    )


def reduced_decode_note(ablation: Ablation, winner: PipelineConfig) -> str | None:
    """What decoding at reduced size bought: the winner against itself at the fastest full
    decode, nothing else changed."""
    if not (reduces(winner.decoder) and winner.augment_on == "cpu"):
        return None
    full = [
        r
        for r in ablation.rows
        if r["knob"] == "decoder"
        and r["value"] != AS_IS
        and not reduces(r["value"])
        and not r["also_changed"]
    ]
    if not full:
        return None
    best = max(full, key=lambda r: r["samples_per_s"])
    if best["verdict"] == "none":
        return (
            f"reduced decode ({winner.decoder}) has no measurable effect against full decode "
            f"({best['value']}) at the winner's other settings"
        )
    ratio = best["winner_samples_per_s"] / best["samples_per_s"]
    return (
        f"reduced decode ({winner.decoder}) is {ratio:.2f}x the winner at full decode "
        f"({best['value']}, nothing else changed)"
    )


def faster_note(ablation: Ablation) -> str | None:
    """The variants that beat the winner beyond the spread, measured in the same rounds: the
    search missed them, and the pick is not changed on one ablation's word."""
    faster = [r for r in ablation.rows if r["verdict"] == "faster"]
    if not faster:
        return None
    named = ", ".join(
        f"{r['label']} ({r['samples_per_s'] / r['winner_samples_per_s']:.2f}x)" for r in faster
    )
    return (
        f"the winner with {named} measured faster than the winner in the same rounds, beyond "
        "the spread: the search did not find it; raise study.n_trials and run again to "
        "search and confirm it"
    )


def prepared_copy_note(
    ablation: Ablation | None, winner: Confirmed, seconds: float, epochs: int
) -> str | None:
    """What the winner's prepared copy costs and buys over ``study.epochs``: its preparation
    time, and against the winner without it (nothing else changed, the same rounds) where
    that was measured, the epochs after which it pays for itself."""
    cache = winner.config.cache
    if cache == "none":
        return None
    said = (
        f"the {cache} copy took {seconds:.1f} s to prepare, once: {seconds / epochs:.2f} s "
        f"charged to each of the study.epochs={epochs} planned"
    )
    rows = [r for r in ablation.rows if r["knob"] == "cache"] if ablation else []
    row = next((r for r in rows if r["value"] == "none" and not r["also_changed"]), None)
    if row is None or not winner.epoch_samples:
        return said
    samples = winner.epoch_samples
    epoch_cached = samples / row["winner_samples_per_s"] - seconds / epochs  # uncharged
    epoch_plain = samples / row["samples_per_s"]
    if row["verdict"] == "none" or epoch_plain <= epoch_cached:
        return f"{said}; without it (cache=none, nothing else changed) no slower: it never pays"
    ratio = row["winner_samples_per_s"] / row["samples_per_s"]
    return (
        f"{said}; charged so, the winner is {ratio:.2f}x itself without it (cache=none, "
        f"nothing else changed), and the copy pays for itself after "
        f"{seconds / (epoch_plain - epoch_cached):.1f} epochs"
    )

"""``tune``: the whole study for one session: resume, the reference points, the search, the
confirmation, and the result."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna

from autotune.pipeline import recipes, tutorial
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source
from autotune.runtime.stop import stoppable
from autotune.runtime.trial import run_trial
from autotune.session import Session
from autotune.session.session import Run
from autotune.tuner import hosts, online_start, racing, rate_model, storage, store, warm_start
from autotune.tuner.confirm import Finalist, confirm, finalists, from_search
from autotune.tuner.lease import Leases
from autotune.tuner.metrics import Confirmed, feasible_complete, pick_each_way, run_to_run
from autotune.tuner.objective import Objective
from autotune.tuner.references import reference_points
from autotune.tuner.result import StudyResult, failure_counts, trial_counts
from autotune.tuner.search import NEXT_TRIAL, search
from autotune.tuner.store import StudyKey
from autotune.tuner.worth import WorthTable, measure_worth
from autotune.tuner.worth_notes import faster_note, prepared_copy_note, reduced_decode_note

log = logging.getLogger(__name__)


Export = Callable[[StudyResult], "Path | None"]  # writes best.yaml and the report


def tune(
    session: Session, export: Export = lambda result: None
) -> tuple[StudyResult, Path | None]:
    """Runs the search (resuming a stored study), then confirms the finalists and exports
    the result: the result and ``export``'s best.yaml path. Of the hosts sharing a study, one
    confirms and the others export its best.yaml.

    Ctrl-C stops after cleaning up the current trial; the result is then the best so far.
    """
    study_conf = session.conf.study
    study = storage.open_study(study_conf, session.fingerprint, session.facts)
    leases = Leases(
        study_conf.storage, study.study_name, expire_s=storage.lost_after_s(study_conf)
    )
    try:
        result, best = _search_and_confirm(session, study, leases, export)
    finally:
        leases.dispose()  # its engine's connections, however the run ended
    if result.interrupted:
        log.warning("interrupted: the study is saved; run the same command again to resume")
    return result, best


class Stopwatch:
    """Seconds spent in each named phase: ``with spent("search"): ...``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds: dict[str, float] = {}
        self.clock = clock

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        started = self.clock()
        try:
            yield
        finally:
            elapsed = self.clock() - started
            self.seconds[phase] = round(self.seconds.get(phase, 0.0) + elapsed, 1)


def _search_and_confirm(
    session: Session, study: optuna.Study, leases: Leases, export: Export
) -> tuple[StudyResult, Path | None]:
    """The search, then the confirmation here (or another host's result, published)."""
    baseline_params = session.space.baseline_params(default_threads=session.default_threads)
    with leases.one_at_a_time(NEXT_TRIAL):
        if not study.get_trials(deepcopy=False):
            store.enqueue(study, baseline_params, {store.TrialKey.ROLE: store.BASELINE})
            if session.conf.study.warm_start:
                warm_start.enqueue_earlier_picks(study, session, baseline_params)
            store.set_study_attr(study, StudyKey.JOB, session.job_fingerprint)
    spent = Stopwatch()
    with stoppable(run_trial) as (stop, run):
        with spent("references"):
            reference_points(session, study, run, leases)
        with spent("search"):
            ended_early = search(study, Objective(session, run=run), stop, leases)
        baseline = session.space.suggest(optuna.trial.FixedTrial(baseline_params))
        hosts.wait_for_trials_elsewhere(study, stop)
        outcome: list[tuple[StudyResult, Path | None]] = []

        def confirm_here() -> Path | None:
            said = (ended_early,) if ended_early else ()
            result = _result(session, study, baseline, stop, run, spent, said)
            outcome.append((result, export(result)))
            return outcome[-1][1]

        where = "stopped"
        if not stop.is_set():
            where = hosts.confirm_once(study, leases, stop, confirm_here)
        if where == "elsewhere":
            published = _published_result(session, study)
            outcome.append((published, export(published)))
        elif where == "stopped":  # Ctrl-C: this host's figures from the search
            confirm_here()
    return outcome[0]


def _confirmed(
    session: Session,
    study: optuna.Study,
    baseline: PipelineConfig,
    stop: threading.Event,
    run: Run,
) -> tuple[list[Confirmed], list[str]]:
    """The finalists re-measured interleaved (unless stopped), else the search's figures."""
    study_conf = session.conf.study
    picked = finalists(study, study_conf.confirm_top_k, baseline)
    picked, left_out = racing.within_reach(picked, _searched(study, picked))
    if left_out:
        log.info("confirm: %s", left_out)
    confirmed: list[Confirmed] = []
    if not stop.is_set() and study_conf.confirm_top_k > 0 and len(picked) > 1:
        rounds = study_conf.confirm_rounds
        log.info(
            "confirming %d finalists against the baseline, %d interleaved rounds%s",
            len(picked) - 1,
            rounds,
            ", racing" if rounds > 1 else "",
        )
        confirmed = confirm(
            session, picked, rounds=rounds, run=run, searched=_searched(study, picked)
        )
    if stop.is_set() or not any(c.label != store.BASELINE for c in confirmed):
        confirmed = from_search(study, picked, epoch_samples=session.epoch_samples)
        if confirmed:
            return confirmed, ["finalists were not re-measured: figures are from the search"]
    notes = (left_out, _race_note(confirmed, study_conf.confirm_rounds))
    return confirmed, [n for n in notes if n]


def _race_note(confirmed: list[Confirmed], rounds: int) -> str | None:
    """Which finalists left the race, and the runs that saved."""
    out = [c for c in confirmed if c.raced_out is not None]
    if not out:
        return None
    runs = sum(c.rounds for c in confirmed)
    left = ", ".join(f"{c.label} after round {c.raced_out}" for c in out)
    return (
        f"the finalists raced: {left} left, clearly slower than the leader beyond how far "
        f"runs of one config differ here; {runs} runs of {len(confirmed) * rounds}"
    )


def _baseline_text(session: Session, baseline: PipelineConfig) -> str:
    """What the baseline runs, in one line: the tutorial's pipeline, or the user's Dataset."""
    threads = baseline.main_threads or session.default_threads
    if isinstance(session.source, Source):
        recipe = recipes.from_config(session.conf.recipe)
        return tutorial.describe(recipe, baseline.batch_size, threads)
    order = "" if session.source.iterable else ", shuffle=True"  # a stream orders itself
    return (
        f"{session.source.describe()} as it is; DataLoader(dataset, "
        f"batch_size={baseline.batch_size}{order}); torch's {threads} threads"
    )


def _searched(study: optuna.Study, picked: list[Finalist]) -> dict[str, float]:
    """Each finalist's rate in its search trial (the baseline's: its first), which the race
    reads run-to-run noise from."""
    rates = {}
    complete = feasible_complete(study)
    for label, number, config in picked:
        trial = next((t for t in complete if store.pipeline_of(t) == config), None)
        if number is not None:
            trial = next((t for t in complete if t.number == number), trial)
        if trial is not None and trial.value:
            rates[label] = trial.value
    return rates


def _prepared_copy_notes(
    session: Session, study: optuna.Study, winner: Confirmed, worth: WorthTable | None
) -> list[str]:
    """What the winner's prepared copy costs and buys; where copies were tried and none won,
    what decided it."""
    epochs = session.conf.study.epochs
    copy = session.prepared_copy(winner.config)
    if copy is not None:
        return [n for n in (prepared_copy_note(worth, winner, copy.seconds, epochs),) if n]
    tried = {store.pipeline_of(t).cache for t in feasible_complete(study)} - {"none"}
    if not tried:
        return []
    return [
        f"cache={', '.join(sorted(tried))} tried, not picked: with its preparation charged over "
        f"study.epochs={epochs}, no copy was the fastest"
    ]


def _winners(
    session: Session, confirmed: list[Confirmed]
) -> tuple[Confirmed, Confirmed | None, list[str]]:
    """The pick for each way of applying the result, and the notes that explain them."""
    winner, as_is_winner, notes = pick_each_way(confirmed)
    if session.epoch_samples:
        notes.append(
            f"samples/s over an epoch of {session.epoch_samples} samples: real epochs, timed "
            "whole where they fit a window (else each epoch's start charged once per epoch)"
        )
    return winner, as_is_winner, notes


def _result(
    session: Session,
    study: optuna.Study,
    baseline: PipelineConfig,
    stop: threading.Event,
    run: Run,
    spent: Stopwatch,
    search_notes: tuple[str, ...] = (),
) -> StudyResult:
    """Confirms the finalists (unless stopped), names the winner and stores it, with where
    the run's time went and what the search said (``search_notes``)."""
    trials = study.get_trials(deepcopy=False)
    with spent("confirmation"):
        confirmed, notes = _confirmed(session, study, baseline, stop, run)
    interrupted = stop.is_set()
    model_note = rate_model.record_error(study)
    notes = [*search_notes, *session.space.notes, *notes, *([model_note] if model_note else [])]
    winner = as_is_winner = worth = None
    baseline_text = _baseline_text(session, baseline)
    if confirmed:
        winner, as_is_winner, winner_notes = _winners(session, confirmed)
        notes += winner_notes
        if not stop.is_set() and winner.label != store.BASELINE:
            noise = run_to_run(confirmed)  # a one-round row must differ by more
            measuring = session.conf.study.worth_budget > 0  # 0: no table, no phase
            with spent("worth") if measuring else contextlib.nullcontext():
                worth = measure_worth(
                    session, study, winner, baseline, run=run, run_to_run=noise,
                    confirmed=tuple(confirmed),
                )  # fmt: skip
            interrupted = stop.is_set()
        if worth is not None:
            said = (reduced_decode_note(worth, winner.config), faster_note(worth))
            notes += [n for n in said if n]
        notes += _prepared_copy_notes(session, study, winner, worth)
    result = StudyResult(
        study_name=study.study_name,
        storage=session.conf.study.storage,
        confirmed=tuple(c.to_dict() for c in confirmed),
        winner_label=winner.label if winner else None,
        as_is_label=as_is_winner.label if as_is_winner else None,
        best=winner.config if winner else None,
        baseline_text=baseline_text,
        ceiling=store.study_attr(study, StudyKey.CEILING),
        cpu_work_bound=store.study_attr(study, StudyKey.CPU_WORK_BOUND),
        notes=tuple(notes),
        worth=worth.to_dict() if worth else None,
        counts=trial_counts(trials),
        failures=failure_counts(trials),
        device=session.device,
        time_split=spent.seconds,
        interrupted=interrupted,
    )
    if confirmed:  # what report.md is rebuilt from (mode=report): the storage alone
        result.save(study)
    if as_is_winner is not None:  # where autotune.DataLoader over the same loader starts
        online_start.offer(session, study, as_is_winner.config)
    return result


def _published_result(session: Session, study: optuna.Study) -> StudyResult:
    """The result another host confirmed, read from the storage, with its best.yaml."""
    stored = StudyResult.load(study, storage=session.conf.study.storage)
    return dataclasses.replace(
        stored, confirmed=(), device=session.device, published=hosts.published(study)
    )

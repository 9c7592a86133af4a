"""Naming a winner: the finalists and the baseline re-measured interleaved (A B C A B C ...),
so that drift on a shared machine hits all of them alike."""

from __future__ import annotations

import logging
import statistics
import time

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import FailureKind
from autotune.runtime.trial import TrialOutcome, run_trial
from autotune.session import Session
from autotune.session.session import Run
from autotune.tuner import racing, store, study_trials
from autotune.tuner.metrics import Confirmed, epoch_rate, feasible_complete, startup_per_epoch
from autotune.tuner.store import TrialKey

log = logging.getLogger(__name__)

Finalist = tuple[str, int | None, PipelineConfig]  # label, trial number, config


def finalists(study: optuna.Study, k: int, baseline: PipelineConfig) -> list[Finalist]:
    """The baseline and, for each way of applying a result, the ``k`` best distinct feasible
    configs of the search: any pipeline (for ``build_loader``), and the user's pipeline as it
    is (for ``loader_kwargs``; the baseline is one of these). What the winner's decoder is
    worth against the others is the worth's (``worth``), at the winner's settings.
    """
    # over the memory budget: never exported
    complete = sorted(feasible_complete(study), key=lambda t: t.value or 0.0, reverse=True)
    picked: list[Finalist] = [(store.BASELINE, None, baseline)]
    seen = {baseline}

    def take(trials: list[FrozenTrial], wanted: int) -> None:
        for t in trials:
            config = store.pipeline_of(t)
            if wanted <= 0:
                return
            if config not in seen:
                seen.add(config)
                picked.append((f"trial {t.number}", t.number, config))
                wanted -= 1

    take(complete, k)
    as_is_picked = sum(1 for _, _, c in picked[1:] if c.as_is)
    take([t for t in complete if store.pipeline_of(t).as_is], k - as_is_picked)
    return picked


def confirm(
    session: Session,
    picked: list[Finalist],
    *,
    rounds: int,
    run: Run = run_trial,
    stage: str = "confirm",
    deadline: float | None = None,
    ranking: bool = True,
    searched: dict[str, float] | None = None,
) -> list[Confirmed]:
    """Re-measures ``picked`` for ``rounds`` interleaved rounds (A B C A B C ...); ``stage``
    names them in the log. Given a ``deadline`` (``time.monotonic()``), no run starts that
    would end past it at the longest run's length so far: the rest are not measured.
    ``ranking``: runs as long as the ones that name a winner (else a search trial's).
    Given ``searched`` (label -> its search trial's rate), the finalists race: after each
    round but the last, the ones clearly beaten (``racing``) are measured no more; the first
    round, which every finalist runs, is then as long as a search trial, and only the rounds
    of those still close may run to ``window.confirm_max_timed_s``."""
    timeout = session.conf.study.trial_timeout
    runs: dict[str, list[TrialOutcome]] = {label: [] for label, _, _ in picked}
    out: dict[str, int] = {}  # label -> the round after which it left the race
    longest = 0.0
    for round_index in range(rounds):
        if searched is not None and round_index > 0:
            out |= _race(session, picked, runs, searched, round_index, stage)
        sorting = searched is not None and rounds > 1 and round_index == 0
        for label, _, config in picked:
            if label in out:
                continue
            if deadline is not None and time.monotonic() + longest > deadline:
                log.info("%s: the time allowed is spent, the rest is not measured", stage)
                return _confirmed(session, picked, runs, out)
            started = time.monotonic()
            job = session.job(config, ranking=ranking and not sorting)
            outcome = run(job, timeout_s=timeout)
            longest = max(longest, time.monotonic() - started)
            if outcome.failure is not None and outcome.failure.kind is FailureKind.INTERRUPTED:
                return []
            runs[label].append(outcome)
            rate = f"{outcome.measurement.samples_per_s:.1f}" if outcome.measurement else "failed"
            log.info(
                "%s round %d/%d  %-10s %-38s steady %s",
                stage,
                round_index + 1,
                rounds,
                label,
                config.short(),
                rate,
            )
    return _confirmed(session, picked, runs, out)


def _race(
    session: Session,
    picked: list[Finalist],
    runs: dict[str, list[TrialOutcome]],
    searched: dict[str, float],
    done: int,
    stage: str,
) -> dict[str, int]:
    """The finalists that leave the race after ``done`` rounds, logged with why."""
    so_far = [c for c in _confirmed(session, picked, runs, {}) if c.rounds == done]
    allowance = racing.noise(so_far, searched)
    if allowance is None:
        return {}
    out = {}
    for loser, leader in racing.clearly_beaten(so_far, allowance):
        log.info(
            "%s: %s leaves the race after round %d: %.1f samples/s, clearly below %s's %.1f "
            "(runs of one config differ by %.0f%% here)",
            stage,
            loser.label,
            done,
            loser.median,
            leader.label,
            leader.median,
            100 * allowance,
        )
        out[loser.label] = done
    return out


def _confirmed(
    session: Session,
    picked: list[Finalist],
    runs: dict[str, list[TrialOutcome]],
    out: dict[str, int],
) -> list[Confirmed]:
    """Each of ``picked`` with a measurement in ``runs``, its figures over them; ``out``:
    the round after which each one that left the race did."""
    confirmed = []
    for label, number, config in picked:
        measured = [o.measurement for o in runs[label] if o.measurement is not None]
        if not measured:
            continue
        peaks = [o.peak_memory_bytes for o in runs[label] if o.peak_memory_bytes]
        startups = [
            startup_per_epoch(
                config,
                steady=m.samples_per_s,
                epoch_start_s=m.epoch_start_s,
                time_to_first_batch_s=m.time_to_first_batch_s,
                preparation_s=session.preparation_per_epoch(config),
                epoch_overhead_s=m.epoch_overhead_s,
            )
            for m in measured
        ]
        epoch = session.epoch_samples
        confirmed.append(
            Confirmed(
                label=label,
                trial_number=number,
                config=config,
                sub_windows=tuple(v for m in measured for v in m.settled_sub_windows),
                startup_s=statistics.median(startups),
                epoch_samples=epoch,
                peak_memory_bytes=max(peaks) if peaks else None,
                rounds=len(measured),
                spread=statistics.median(m.spread for m in measured),
                round_rates=tuple(
                    epoch_rate(m.samples_per_s, s, epoch_samples=epoch)
                    for m, s in zip(measured, startups, strict=True)
                ),
                raced_out=out.get(label),
            )
        )
    return confirmed


def from_search(
    study: optuna.Study, picked: list[Finalist], *, epoch_samples: int | None
) -> list[Confirmed]:
    """The search's own figures for ``picked``, where there was no confirmation round."""
    out = []
    for label, number, config in picked:
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        # a repeat holds its earlier trial's value and no measurement of its own
        trials = [t for t in study_trials.measured(complete) if store.pipeline_of(t) == config]
        values = [v for t in trials for v in store.trial_attr(t, TrialKey.SUB_WINDOWS, [])]
        if not values:
            continue
        startup = statistics.median(
            startup_per_epoch(
                config,
                steady=store.trial_attr(t, TrialKey.STEADY),
                epoch_start_s=store.trial_attr(t, TrialKey.EPOCH_START),
                time_to_first_batch_s=store.trial_attr(t, TrialKey.TIME_TO_FIRST_BATCH),
                preparation_s=store.trial_attr(t, TrialKey.PREPARATION, 0.0),
                epoch_overhead_s=store.trial_attr(t, TrialKey.EPOCH_OVERHEAD),
            )
            for t in trials
        )
        peaks = [store.trial_attr(t, TrialKey.PEAK_MEMORY_MB, 0) * 2**20 for t in trials]
        spreads = [s for t in trials if (s := store.trial_attr(t, TrialKey.SPREAD)) is not None]
        out.append(
            Confirmed(
                label,
                number,
                config,
                tuple(values),
                startup,
                epoch_samples,
                int(max(peaks)) or None,
                spread=statistics.median(spreads) if spreads else None,
            )
        )
    return out

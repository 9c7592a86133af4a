"""The arms run interleaved (A B C A B C ...), each run in a fresh child process, so that drift
on a shared machine hits every arm alike. A stop (Ctrl-C) takes the current run down and keeps
the rounds finished before it."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from autotune.runtime.epochs import EpochTimes
from autotune.runtime.failures import Failure, FailureKind
from autotune.session.session import Run
from autotune.verify.plan import Arm, Plan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArmRun:
    """One run of one arm: its epochs, or why it has none."""

    arm: str
    round: int  # 0-based
    times: EpochTimes | None
    failure: Failure | None = None
    wall_s: float = 0.0


@dataclass(frozen=True)
class Rounds:
    runs: tuple[ArmRun, ...]  # of the finished rounds only
    finished: int
    interrupted: bool


def run_rounds(plan: Plan, run: Run, stop: threading.Event) -> Rounds:
    """Runs ``plan.rounds`` rounds of every arm through ``run`` (``run_trial`` with ``stop``);
    a stopped round is dropped whole: the rounds kept have every arm."""
    kept: list[ArmRun] = []
    for round_index in range(plan.rounds):
        this_round = []
        for arm in plan.arms:
            result = _run_once(arm, round_index, plan, run, stop)
            if result is None:
                return Rounds(tuple(kept), round_index, interrupted=True)
            this_round.append(result)
        kept += this_round
    return Rounds(tuple(kept), plan.rounds, interrupted=False)


def _run_once(
    arm: Arm, round_index: int, plan: Plan, run: Run, stop: threading.Event
) -> ArmRun | None:
    """One run, with its progress line; None when it was stopped."""
    if stop.is_set():
        return None
    outcome = run(arm.job, timeout_s=plan.timeout_s)
    if outcome.failure is not None and outcome.failure.kind is FailureKind.INTERRUPTED:
        return None
    times = outcome.measurement if isinstance(outcome.measurement, EpochTimes) else None
    failure = outcome.failure
    if times is None and failure is None:
        failure = Failure(
            FailureKind.ERROR, f"the run returned no epochs: {outcome.measurement!r}"
        )
    result = ArmRun(arm.name, round_index, times, failure, outcome.wall_s)
    log.info(
        "verify round %d/%d  %-13s %-36s %s",
        round_index + 1,
        plan.rounds,
        arm.name,
        loader_label(arm),
        progress_figures(result),
    )
    return result


def loader_label(arm: Arm) -> str:
    """The settings the arm's loader runs with, short."""
    return arm.config.short()


def progress_figures(result: ArmRun) -> str:
    if result.times is None:
        assert result.failure is not None
        return f"FAILED {result.failure.kind}: {result.failure.message}"
    times = result.times
    rates = " ".join(f"{e.samples_per_s:.1f}" for e in times.epochs)
    first = f"first epoch {times.first.samples_per_s:.1f}, then " if times.first else ""
    start = (times.first or times.epochs[0]).first_batch_s
    return (
        f"{first}{rates} samples/s per epoch (first batch {start:.2f} s, "
        f"wall {result.wall_s:.1f} s)"
    )

"""One arm's figures over its timed epochs (each run's after its first): the median and
interquartile range of samples/s, what a run's first epoch adds (its one-off start), and the
shapes that explain a gap (start-up in every epoch, a slow tail, a slow first round)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.runtime.epochs import EpochTime
from autotune.verify.rounds import ArmRun


@dataclass(frozen=True)
class ArmFigures:
    arm: str
    rates: tuple[float, ...]  # samples/s of every epoch, in run order
    median: float
    iqr: tuple[float, float]
    runs: int
    # the timed epochs' rate over the run's first epoch's, median over runs (None: no first)
    first_epoch_slowdown: float | None
    # the seconds a run's first epoch takes beyond a timed one: its one-off start, median
    first_epoch_extra_s: float | None
    # later rounds' first timed epochs (median rate) over the first round's (None: one round)
    first_round_slowdown: float | None
    startup_share: float  # median share of an epoch spent before its first batch
    tail_share: float | None  # median share of an epoch its tail took beyond the steady rate


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    """The first and third quartiles (both the value itself for one value)."""
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def first_epochs(runs: Sequence[ArmRun]) -> tuple[float | None, float | None]:
    """The timed epochs' rate over the run's first epoch's, and the seconds the first took
    beyond a timed epoch: medians over the runs (None where no run timed its first)."""
    ratios, extras = [], []
    for run in runs:
        assert run.times is not None
        first, epochs = run.times.first, run.times.epochs
        if first is None or not epochs or first.samples_per_s <= 0:
            continue
        ratios.append(statistics.median(e.samples_per_s for e in epochs) / first.samples_per_s)
        extras.append(first.seconds - statistics.median(e.seconds for e in epochs))
    if not ratios:
        return None, None
    return statistics.median(ratios), statistics.median(extras)


def first_round_slowdown(runs: Sequence[ArmRun]) -> float | None:
    first = [_epochs(r)[0].samples_per_s for r in runs if r.round == 0 and _epochs(r)]
    later = [_epochs(r)[0].samples_per_s for r in runs if r.round > 0 and _epochs(r)]
    if not first or not later or statistics.median(first) <= 0:
        return None
    return statistics.median(later) / statistics.median(first)


def tail_share(epoch: EpochTime, last_round: int) -> float | None:
    """The share of the epoch its last ``last_round`` batches took beyond what they would at
    the rate of the batches before them (from the second batch on); None when too short."""
    done = epoch.step_done_s
    body_end = len(done) - last_round - 1  # the last batch before the tail
    if body_end < 2 or epoch.seconds <= 0 or done[body_end] <= done[0]:
        return None
    seconds_per_batch = (done[body_end] - done[0]) / body_end
    tail = epoch.seconds - done[body_end]
    return max(0.0, tail - last_round * seconds_per_batch) / epoch.seconds


def arm_figures(arm: str, runs: Sequence[ArmRun], *, last_round: int = 1) -> ArmFigures | None:
    """The figures of ``arm`` over its runs that finished (None: none did). ``last_round``:
    the batches of the epoch's tail (the workers' last round)."""
    measured = [r for r in runs if r.arm == arm and r.times is not None]
    epochs = [e for r in measured for e in _epochs(r)]
    if not epochs:
        return None
    rates = tuple(e.samples_per_s for e in epochs)
    tails = [t for t in (tail_share(e, last_round) for e in epochs) if t is not None]
    slowdown, extra_s = first_epochs(measured)
    return ArmFigures(
        arm=arm,
        rates=rates,
        median=statistics.median(rates),
        iqr=quartiles(rates),
        runs=len(measured),
        first_epoch_slowdown=slowdown,
        first_epoch_extra_s=extra_s,
        first_round_slowdown=first_round_slowdown(measured),
        startup_share=statistics.median(
            e.first_batch_s / e.seconds if e.seconds > 0 else 0.0 for e in epochs
        ),
        tail_share=statistics.median(tails) if tails else None,
    )


def _epochs(run: ArmRun) -> tuple[EpochTime, ...]:
    return run.times.epochs if run.times is not None else ()

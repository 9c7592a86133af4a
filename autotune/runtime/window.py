"""The timed training window: start-up apart, a warm-up, then timed sub-windows.

Pure timing logic over an iterator of batches and a step: no processes, no Optuna, an
injectable clock, so tests drive it with a fake clock and a fake loader.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from autotune.pipeline.batches import samples_in
from autotune.runtime import window_length
from autotune.runtime.gpu_monitor import UtilizationSampler
from autotune.runtime.measurement import Measurement, relative_spread

Batch = Any  # what the loader yields: (images, labels), or the user's own batch
Step = Callable[[Batch], None]
Count = Callable[[Batch], int]  # samples in a batch


class WindowStopped(Exception):
    """Raised by an ``on_sub_window`` callback to stop a window early (a pruned trial)."""


def run_window(
    batches: Iterable[Batch],
    step: Step,
    *,
    warmup: int,
    sub_windows: int,
    batches_per_window: int,
    min_sub_window_s: float = 0.0,
    align: int = 1,
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.process_time,
    on_sub_window: Callable[[int, float], None] | None = None,
    gpu: UtilizationSampler | None = None,
    end_epoch: Callable[[], None] | None = None,
    count: Count = samples_in,
    target_spread: float = 0.0,
    max_timed_s: float = math.inf,
    pass_batches: int | None = None,
) -> Measurement:
    """Times ``step`` over ``batches``: start-up, warm-up, then ``sub_windows`` timed spans
    (at least ``batches_per_window`` batches and ``min_sub_window_s``, whole rounds of
    ``align`` workers, whole passes of ``pass_batches`` where they fit: ``window_length``),
    more until ``sub_windows`` equal spans of them agree within ``target_spread`` (0: never)
    or the next would pass ``max_timed_s`` (``_time_sets``); then, given ``end_epoch``, an
    epoch boundary: the batches in flight drained, a new ``iter(batches)`` timed.
    ``on_sub_window(index, rate_so_far)`` sees each sub-window end (a pruner may raise
    ``WindowStopped``); ``gpu`` samples the GPU in the timed spans; ``count(batch)``:
    samples in a batch. Rate: all timed samples over all timed seconds."""
    it = iter(batches)
    time_to_first_batch, first_step_s = _start_up(it, step, sync=sync, clock=clock)
    batch_rate = _warm_up(it, step, warmup, sync=sync, clock=clock)
    lengths = {"at_least": batches_per_window, "min_sub_window_s": min_sub_window_s}
    lengths.update(align=align, pass_batches=pass_batches, max_timed_s=max_timed_s)
    shape = window_length.sub_windows(
        batch_rate=batch_rate, consumed=1 + warmup, count=sub_windows, **lengths
    )
    for _ in range(shape.skip):  # to where a pass starts, untimed
        step(next(it))
    tally = _Tally()
    timing = {"sync": sync, "clock": clock, "cpu_clock": cpu_clock, "gpu": gpu}
    sets = {"sub_windows": sub_windows, "target_spread": target_spread}
    sets.update(batches_per_window=shape.batches, max_timed_s=max_timed_s)
    grouped = _time_sets(it, step, tally, count, timing, on_sub_window=on_sub_window, **sets)
    epoch_start_s = _next_epoch_start(it, batches, end_epoch, sync=sync, clock=clock)
    return Measurement(
        samples_per_s=tally.rate,
        sub_window_samples_per_s=tuple(tally.rates),
        data_wait_fraction=tally.waited / tally.elapsed if tally.elapsed > 0 else 0.0,
        time_to_first_batch_s=time_to_first_batch,
        warmup_batches=warmup,
        timed_batches=tally.batches,
        gpu_utilization_pct=gpu.mean_pct if gpu is not None else None,
        process_cpu_s_per_sample=tally.cpu / tally.samples if tally.samples else None,
        epoch_start_s=epoch_start_s,
        first_step_s=first_step_s,
        settled_samples_per_s=tuple(tally.spans_of(grouped, sub_windows)),
        grouped=grouped,
        whole_passes=shape.whole_passes,
    )


def _time_sets(
    it: Iterator[Batch],
    step: Step,
    tally: _Tally,
    count: Count,
    timing: dict[str, Any],
    *,
    sub_windows: int,
    batches_per_window: int,
    target_spread: float,
    max_timed_s: float,
    on_sub_window: Callable[[int, float], None] | None,
) -> int:
    """Times sub-windows of ``batches_per_window`` until the last ``sub_windows`` spans of
    equal length agree within ``target_spread``, or the next sub-window would pass
    ``max_timed_s``. A span is ``grouped`` consecutive sub-windows, one more each time another
    set of ``sub_windows`` is timed: every sub-window counts again in the longer spans, where
    timing sets twice as long from scratch would throw the shorter ones away. Returns
    ``grouped``."""
    grouped = 1
    while True:
        for _ in range(sub_windows):
            _time_sub_window(it, step, batches_per_window, tally, count, **timing)
            if on_sub_window is not None:
                on_sub_window(len(tally.rates) - 1, tally.rate)
        if target_spread <= 0 or sub_windows == 1:
            return grouped
        if relative_spread(tally.spans_of(grouped, sub_windows)) <= target_spread:
            return grouped
        per_sub_window = tally.elapsed / len(tally.rates)
        if tally.elapsed + sub_windows * per_sub_window > max_timed_s:
            return grouped
        grouped += 1


def _next_epoch_start(
    it: Iterator[Batch],
    batches: Iterable[Batch],
    end_epoch: Callable[[], None] | None,
    *,
    sync: Callable[[], None],
    clock: Callable[[], float],
) -> float | None:
    """Ends ``it``'s epoch, drains the batches in flight (untimed), and times what a user's
    epoch pays at the boundary: the end itself (workers that do not persist are shut down
    then) and a new epoch of ``batches`` to its first batch in hand. None without
    ``end_epoch``."""
    if end_epoch is None:
        return None
    end_epoch()
    while True:
        before = clock()
        try:
            next(it)
        except StopIteration:
            ending = clock() - before
            break
    return ending + _first_batch_in_hand(iter(batches), sync=sync, clock=clock)


def _first_batch_in_hand(
    it: Iterator[Batch], *, sync: Callable[[], None], clock: Callable[[], float]
) -> float:
    """Seconds from here to the next batch of ``it`` in hand (an iterator starting: worker
    spawn or refill, and the first fill)."""
    sync()
    start = clock()
    next(it)
    return clock() - start


def _start_up(
    it: Iterator[Batch],
    step: Step,
    *,
    sync: Callable[[], None],
    clock: Callable[[], float],
) -> tuple[float, float]:
    """Seconds to the first batch in hand: worker spawn and first fill, timed apart; and the
    seconds of the first step, which runs after that clock stops: its one-off warm-up
    (allocations, kernel choice, compiling) is paid once per run, not at each epoch's start."""
    start = clock()
    batch = next(it)
    in_hand = clock() - start
    step(batch)
    sync()
    return in_hand, clock() - start - in_hand


def _warm_up(
    it: Iterator[Batch],
    step: Step,
    warmup: int,
    *,
    sync: Callable[[], None],
    clock: Callable[[], float],
) -> float | None:
    """Runs ``warmup`` batches, timing the last few (they come at the sustained rate).

    Returns that rate in batches/s; None with no warm-up or a tail of no measurable time
    (it says nothing about the rate).
    """
    tail = max(1, min(warmup, 4))
    for index in range(warmup):
        if index == warmup - tail:
            sync()
            tail_start = clock()
        step(next(it))
    sync()
    if not warmup:
        return None
    tail_span = clock() - tail_start
    return tail / tail_span if tail_span > 0 else None


@dataclass
class _Tally:
    """What the timed sub-windows saw so far."""

    rates: list[float] = field(default_factory=list)  # samples/s of each sub-window
    spans: list[tuple[int, float]] = field(default_factory=list)  # its samples and seconds
    waited: float = 0.0  # seconds spent waiting for the next batch
    elapsed: float = 0.0  # seconds timed
    cpu: float = 0.0  # CPU seconds of this process
    samples: int = 0
    batches: int = 0

    @property
    def rate(self) -> float:
        """Samples/s over everything timed so far."""
        return self.samples / self.elapsed if self.elapsed > 0 else float("inf")

    def spans_of(self, grouped: int, count: int) -> list[float]:
        """Samples/s of the last ``count`` spans of ``grouped`` consecutive sub-windows."""
        last = self.spans[-grouped * count :]
        rates = []
        for start in range(0, len(last), grouped):
            samples = sum(n for n, _ in last[start : start + grouped])
            seconds = sum(s for _, s in last[start : start + grouped])
            rates.append(samples / seconds if seconds > 0 else float("inf"))
        return rates


def _time_sub_window(
    it: Iterator[Batch],
    step: Step,
    n_batches: int,
    tally: _Tally,
    count: Count,
    *,
    sync: Callable[[], None],
    clock: Callable[[], float],
    cpu_clock: Callable[[], float],
    gpu: UtilizationSampler | None,
) -> None:
    """Times one sub-window of ``n_batches`` and adds it to ``tally``."""
    samples = 0
    waited = tally.waited  # a local in the timed loop, summed in the same order as ever
    sync()
    if gpu is not None:
        gpu.start()
    cpu_start = cpu_clock()
    window_start = clock()
    for _ in range(n_batches):
        before = clock()
        batch = next(it)
        waited += clock() - before
        step(batch)
        samples += count(batch)
    sync()
    span = clock() - window_start
    tally.cpu += cpu_clock() - cpu_start
    if gpu is not None:
        gpu.stop()
    tally.waited = waited
    tally.elapsed += span
    tally.samples += samples
    tally.batches += n_batches
    tally.rates.append(samples / span if span > 0 else float("inf"))
    tally.spans.append((samples, span))


def run_ceiling(
    batch: Batch,
    step: Step,
    **window: Any,
) -> Measurement:
    """The compute limit: the same step fed one batch already on the device.

    ``window`` takes ``run_window``'s keyword arguments.
    """

    def same_batch() -> Iterable[Batch]:
        while True:
            yield batch

    return run_window(same_batch(), step, **window)

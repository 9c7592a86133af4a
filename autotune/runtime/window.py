"""The timed training window: start-up apart, a warm-up, then timed sub-windows.

Pure timing logic over an iterator of batches and a step: no processes, no Optuna, an
injectable clock, so tests drive it with a fake clock and a fake loader.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from autotune.pipeline.batches import samples_in
from autotune.runtime import window_epochs, window_length
from autotune.runtime.gpu_monitor import UtilizationSampler
from autotune.runtime.measurement import Measurement
from autotune.runtime.peers import ALONE, Peers
from autotune.runtime.timed_spans import Batch, Count, Step, Tally


class WindowStopped(Exception):
    """Raised by ``run_window``'s ``on_sub_window(index, rate so far)`` to stop the window
    early (a pruned trial). It is called where that rate is evidence and more is left to time
    (``timed_spans.time_sets``, ``window_epochs.time_epochs``)."""


def run_window(
    batches: Iterable[Batch],
    step: Step,
    *,
    warmup: int,
    buffered: int = 0,
    sub_windows: int,
    epoch_sub_windows: int | None = None,
    batches_per_window: int,
    min_sub_window_s: float = 0.0,
    align: int = 1,
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.process_time,
    on_sub_window: Callable[[int, float], None] | None = None,  # see WindowStopped
    gpu: UtilizationSampler | None = None,
    end_epoch: Callable[[], None] | None = None,
    one_pass: Callable[[], None] | None = None,
    count: Count = samples_in,
    target_spread: float = 0.0,
    max_timed_s: float = math.inf,
    pass_batches: int | None = None,
    peers: Peers = ALONE,
    compiles: Callable[[], int] = lambda: 0,
) -> Measurement:
    """Times ``step`` over ``batches``: start-up, warm-up, then sub-windows (``window_length``:
    worker rounds, whole passes, or real epochs where ``end_epoch`` and ``one_pass`` make them,
    the warm-up's last ``buffered`` batches then left out) and the epochs' boundary."""
    it, sync = iter(batches), _with_peers(sync, peers)
    time_to_first_batch, first_step_s = _start_up(it, step, sync=sync, clock=clock)
    makes_epochs = None not in (end_epoch, one_pass)  # an epoch starts with an empty buffer
    warm = warmup - buffered if makes_epochs and pass_batches else warmup
    batch_rate = _slowest(peers, _warm_up(it, step, warm, sync=sync, clock=clock))
    lengths = {"at_least": batches_per_window, "min_sub_window_s": min_sub_window_s}
    lengths |= {"align": align, "pass_batches": pass_batches, "max_timed_s": max_timed_s}
    lengths |= {"batch_rate": batch_rate, "consumed": 1 + warm, "count": sub_windows}
    lengths |= {"epoch_count": epoch_sub_windows, "drain": warmup - warm}
    shape = window_length.sub_windows(**lengths, makes_epochs=makes_epochs)
    tally, timing = Tally(), {"sync": sync, "clock": clock, "cpu_clock": cpu_clock, "gpu": gpu}
    compiled, loop = compiles(), (it, batches, step, tally, count, timing)
    sets = {"target_spread": target_spread, "peers": peers, "max_timed_s": max_timed_s}
    ends = {"end_epoch": end_epoch, "one_pass": one_pass, "on_sub_window": on_sub_window}
    grouped, boundary = window_epochs.time_sub_windows(*loop, shape, sets, pass_batches, **ends)
    return Measurement(
        samples_per_s=tally.rate,
        sub_window_samples_per_s=tuple(tally.rates),
        data_wait_fraction=tally.waited / tally.elapsed if tally.elapsed > 0 else 0.0,
        time_to_first_batch_s=time_to_first_batch,
        warmup_batches=warm if shape.epochs else warmup,
        timed_batches=tally.batches,
        gpu_utilization_pct=gpu.mean_pct if gpu is not None else None,
        process_cpu_s_per_sample=tally.cpu / tally.samples if tally.samples else None,
        **boundary,
        first_step_s=first_step_s,
        settled_samples_per_s=tuple(tally.spans_of(grouped, shape.count)),
        grouped=grouped,
        whole_passes=shape.whole_passes,
        timed_s=tally.elapsed,
        timed_compiles=compiles() - compiled,  # in the sub-windows and the epoch boundary
    )


def _with_peers(sync: Callable[[], None], peers: Peers) -> Callable[[], None]:
    """``sync``, then a barrier: a timed span starts and ends when every rank's does."""
    if peers is ALONE:
        return sync

    def sync_all() -> None:
        sync()
        peers.wait()

    return sync_all


def _slowest(peers: Peers, batch_rate: float | None) -> float | None:
    """The slowest rank's warm-up rate (None where any rank has none): every rank shapes
    its sub-windows alike."""
    agreed = peers.least(-1.0 if batch_rate is None else batch_rate)
    return None if agreed < 0 else agreed


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

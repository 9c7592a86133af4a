"""What one timed window saw: the rate, its sub-windows and spread, start-up, waits."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Measurement:
    """What one timed window saw. Rates are samples per second."""

    # all timed samples over all timed seconds: the objective. Not the sub-windows' median:
    # a loader that stalls lets its workers fill the prefetch buffer, and the sub-window
    # after drains it in a burst; the median keeps the burst and drops the stall, the
    # epoch the user runs pays both
    samples_per_s: float
    sub_window_samples_per_s: tuple[float, ...]
    data_wait_fraction: float  # share of timed wall time spent waiting for the next batch
    time_to_first_batch_s: float  # start-up (worker spawn, first fill), kept apart
    warmup_batches: int
    timed_batches: int
    gpu_peak_memory_bytes: int | None = None  # None without a GPU (absent, not zero)
    gpu_utilization_pct: float | None = None  # mean over the timed sub-windows; None: no GPU
    # CPU seconds of the measuring process (all its threads, not its DataLoader workers) per
    # timed sample: with num_workers=0, the loader's own CPU cost, whatever else ran
    process_cpu_s_per_sample: float | None = None
    # to the first batch of a next epoch in hand, after an epoch ended (workers idle, buffer
    # empty): what every epoch's start costs, workers respawned or (persistent) refilled;
    # None where the window made no epoch boundary
    epoch_start_s: float | None = None
    # a whole epoch timed after the window (one pass, from iter() to its last step done)
    # beyond its samples at the steady rate: its start and end, and its batches as an epoch
    # makes them (workers racing ahead into their buffer, then idle while it drains); None
    # where no whole epoch fits the window's time
    epoch_overhead_s: float | None = None
    # the run's first step, after the first batch: its one-off warm-up (allocations; with
    # compile=true, compiling the model), never inside the start-up or the timed windows
    first_step_s: float | None = None
    # graphs torch.compile built inside the timed sub-windows (a batch of a shape it had not
    # seen, past the warm-up): their compile time is in the rate; 0 without compile=true
    timed_compiles: int = 0
    # the last set: ``sub_windows`` spans (``epoch_sub_windows`` of real epochs) of equal
    # length, each ``grouped`` consecutive sub-windows (uneven data groups them until they
    # agree); empty: all the sub-windows
    settled_samples_per_s: tuple[float, ...] = ()
    grouped: int = 1
    whole_passes: bool = False  # each sub-window read whole passes over the data
    timed_s: float = 0.0  # seconds timed in all
    # a trial of several ranks: each rank's own rate and data wait (the figures above are
    # the node's: all ranks' samples over the same seconds, the slowest rank's wait)
    rank_samples_per_s: tuple[float, ...] = ()
    rank_data_wait_fraction: tuple[float, ...] = ()

    @property
    def settled_sub_windows(self) -> tuple[float, ...]:
        """The rates of the last set: spans of the length the window settled on (uneven data
        lengthens them), without the shorter, noisier ones."""
        return self.settled_samples_per_s or self.sub_window_samples_per_s

    @property
    def spread(self) -> float:
        """(max - min) / median of the last set: how far apart equal spans of this run were."""
        return relative_spread(self.settled_sub_windows)


def relative_spread(values: Sequence[float]) -> float:
    """(max - min) / median: 0 for one value."""
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else 0.0

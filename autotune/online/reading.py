"""What ``autotune.DataLoader`` read of one setting on the run (``meter.Meter`` measures it):
the result every part of the online tuning passes on, combines (several ranks), charges
(``budget``), compares (``drift``), pools (``pooled``: two looks at one setting) and
records (``record``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from autotune.pipeline.config import PipelineConfig


@dataclass(frozen=True)
class Reading:
    """One setting measured on the run."""

    settings: PipelineConfig
    samples_per_s: float
    spread: float  # (max - min) / median of the spans it settled on
    data_wait: float  # share of the timed seconds spent inside __next__
    first_batch_s: float  # the wait for the first batch after the switch: its cost
    batches: int  # batches timed
    seconds: float  # seconds timed
    # a sample's wall and CPU seconds in the loader: a worker's (each worker's share of the
    # timed spans), or without workers the training process's inside __next__; 0: unread
    sample_wall_s: float = 0.0
    sample_cpu_s: float = 0.0
    # and what of its wall it was runnable, queued for a CPU (another process's, a neighbour
    # job's or more workers than cores): not a read's (``runtime.sched``; 0 where uncounted)
    sample_queued_s: float = 0.0
    cpu_s: float = 0.0  # this process's and its workers' CPU seconds over the timed spans
    between_epochs_s: float = 0.0  # the loop's own time between epochs while it was read
    # sub-windows timed where it read clearly below the best so far and stopped (0: in full)
    beaten_after: int = 0
    # the longest wait at an epoch's boundary while it was read (0: no epoch began): the last
    # epoch's end (workers that do not persist shut down in it) and the next one's first
    # batch (its workers started, where they do not persist; an empty buffer to fill)
    epoch_start_s: float = 0.0


def pooled(first: Reading, second: Reading) -> Reading:
    """Two readings of one setting, taken apart, as one: their rate over both (samples over
    seconds), and as spread the closer-agreeing reading's, or how far the two rates are
    apart where that is more. A neighbour's burst only slows a reading: the two looks tell
    it from the setting's own noise."""
    seconds = first.seconds + second.seconds
    if not seconds:
        return second
    rate = (first.samples_per_s * first.seconds + second.samples_per_s * second.seconds) / seconds
    apart = abs(first.samples_per_s - second.samples_per_s) / rate if rate else 0.0
    return dataclasses.replace(
        second,
        samples_per_s=rate,
        spread=max(min(first.spread, second.spread), apart),
        data_wait=(first.data_wait * first.seconds + second.data_wait * second.seconds) / seconds,
        batches=first.batches + second.batches,
        seconds=seconds,
        epoch_start_s=max(first.epoch_start_s, second.epoch_start_s),
    )

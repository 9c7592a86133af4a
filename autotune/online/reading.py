"""What ``autotune.DataLoader`` read of one setting on the run (``meter.Meter`` measures it):
the result every part of the online tuning passes on, combines (several ranks), charges
(``budget``), compares (``drift``) and records (``record``).
"""

from __future__ import annotations

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
    cpu_s: float = 0.0  # this process's and its workers' CPU seconds over the timed spans
    between_epochs_s: float = 0.0  # the loop's own time between epochs while it was read
    # sub-windows timed where it read clearly below the best so far and stopped (0: in full)
    beaten_after: int = 0
    # the longest wait at an epoch's boundary while it was read (0: no epoch began): the last
    # epoch's end (workers that do not persist shut down in it) and the next one's first
    # batch (its workers started, where they do not persist; an empty buffer to fill)
    epoch_start_s: float = 0.0

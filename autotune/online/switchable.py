"""What the run's tuning (``tuning.Tuning``) asks of the loader it tunes: the settings it
reads with, how long its epochs and passes are, and a switch between two batches."""

from __future__ import annotations

from typing import Protocol

from autotune.online.passes import Passes
from autotune.pipeline.config import PipelineConfig


class Switchable(Protocol):
    """What the tuning asks of its loader (``autotune.DataLoader``)."""

    batch_size: int | None
    own: PipelineConfig  # your arguments' settings, as the first epoch read them

    @property
    def settings(self) -> PipelineConfig: ...  # read with now

    @property
    def epoch_length(self) -> int | None: ...  # batches an epoch, where known

    @property
    def switches_mid_epoch(self) -> bool: ...  # else at the next epoch's start

    @property
    def passes(self) -> Passes: ...  # how much of each epoch the loop reads

    @property
    def pass_length(self) -> int | None: ...  # an epoch's batches, or a pass's it leaves

    def switch(self, settings: PipelineConfig) -> None: ...  # from the next batch on

    def asked(self) -> PipelineConfig | None: ...  # the switch asked for, not made yet

    def start_at(self, settings: PipelineConfig, *, made_anew: bool) -> None: ...  # first batch

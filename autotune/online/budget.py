"""The time ``autotune.DataLoader`` may spend exploring, and what it spent.

The budget is ``share`` epochs' time at the best rate measured so far (at first the run's
own), or, with ``run_share`` (``tune=True``), the larger of that and this share of the run so
far: exploring grows with the run and never takes more of it than that share. An epoch is
what exploring can still win on, and once a faster setting is found, an epoch of it is what
the run will spend: an epoch at a slow first rate (reads that wait, no workers) would let
exploring spend several epochs of the setting it keeps. Each proposal is charged from its
ask to its reading, less the loop's own time between epochs (its validation); where a switch
waits for the next epoch (a stream, ``in_order=False``) it runs a whole epoch, and is charged
one, and its workers' start where that is slow (``admission``). A stream's epoch is known once
its first has ended. Settings are compared over whole
epochs: one with workers pays each epoch's start (``charged``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from autotune.online.passes import Passes
from autotune.online.reading import Reading
from autotune.pipeline.config import PipelineConfig
from autotune.schema import WindowConfig

DEFAULT_SHARE = 1.0  # tune=True: exploring for up to an epoch's time at the best rate,
RUN_SHARE = 0.1  # or this share of the run so far, where that is more
SETTINGS_IN_BUDGET = 8  # while exploring, each setting timed for at most this share of it


def shares(tune: bool | float) -> tuple[float, float]:
    """What ``tune=`` gives the budget: (``share``, ``run_share``); nothing (0.0, 0.0) where
    it is False or the environment says ``AUTOTUNE=off``."""
    if not isinstance(tune, (bool, int, float)) or not tune >= 0:  # nan too
        raise ValueError(f"tune must be True, False or a share >= 0, got {tune!r}")
    if os.environ.get("AUTOTUNE", "").strip().lower() in ("off", "0", "false"):
        return 0.0, 0.0
    return (DEFAULT_SHARE, RUN_SHARE) if tune is True else (float(tune), 0.0)


def min_setting_s(window: WindowConfig) -> float:
    """The least a setting is timed: a trial's sub-windows at their shortest."""
    return window.min_sub_window_s * window.sub_windows


def setting_cap(
    share: float, batches_per_epoch: int, window: WindowConfig, best_rate: float | None = None
) -> Callable[[float], float]:
    """Seconds to time one setting while exploring, at a batch rate: the budget (``share``
    of an epoch at the best batch rate so far, ``best_rate``; at that rate, before any is
    known) over the settings it should leave room for, and never less than a trial's
    shortest timing."""

    def cap_s(batch_rate: float) -> float:
        budget_s = share * batches_per_epoch / (best_rate or batch_rate)
        return max(budget_s / SETTINGS_IN_BUDGET, min_setting_s(window))

    return cap_s


def charged(
    reading: Reading,
    restarts: dict[PipelineConfig, float],
    batches_per_epoch: int | None,
    made_anew: bool = False,
) -> Reading:
    """``reading`` over whole epochs, by the tuner's rule (``tuner.metrics.startup_per_epoch``):
    each epoch starts with an empty buffer, and pays, once an epoch, what its boundary (the
    last epoch's end, its first batch: ``epoch_start_s``) waited beyond a batch's time (kept
    in ``restarts``). Workers that do not persist shut down and start again: the most seen
    of a start, the switch's or an epoch's. Workers that persist refill
    their buffer: an epoch's start where one was read; till then the switch's, but no more
    than a worker's batch where the workers keep pace with the loop (as many of the loop's
    batches as there are workers): their own start, a ``worker_init_fn`` that loads a
    tokenizer, is paid once a run, and charging it would read the setting slower until an
    epoch's start was read, and then faster, a drift of a steady machine. Spans timed within
    epochs never see any of it, and short epochs of many workers would read as their bursts
    of ready batches. Where the loop makes its loader anew (``made_anew``), its workers start
    again each epoch whether they persist or not: each setting is charged as if they did not."""
    settings, per_batch = reading.settings, reading.seconds / max(1, reading.batches)
    if not settings.num_workers or not batches_per_epoch:
        return reading
    if made_anew or not settings.persistent_workers:
        seen = max(reading.first_batch_s, reading.epoch_start_s) - per_batch
        restarts[settings] = max(restarts.get(settings, 0.0), seen)
    elif reading.epoch_start_s:
        restarts[settings] = reading.epoch_start_s - per_batch
    elif settings not in restarts and reading.first_batch_s:
        refill = min(reading.first_batch_s, settings.num_workers * per_batch)
        restarts[settings] = refill - per_batch
    restart = restarts.get(settings, 0.0)
    epoch_s = batches_per_epoch * per_batch
    rate = reading.samples_per_s * epoch_s / (epoch_s + max(0.0, restart))
    return dataclasses.replace(reading, samples_per_s=rate)


@dataclass
class Budget:
    """What is left for proposals, from the run's readings and epochs."""

    share: float  # epochs' time
    run_share: float = 0.0  # of the run so far, where more
    whole_epochs: bool = False  # a proposal runs an epoch: a switch waits for the next
    min_setting_s: float = 0.0  # the least a setting is timed: one shorter is not tried
    batches_per_epoch: int | None = None  # None: a stream's, until its first epoch ends
    clock: Callable[[], float] = time.monotonic
    started: float | None = None  # the run's first timed batch
    spent_s: float = 0.0
    # how much of each epoch the loop reads (the loader's): a pass it leaves early is an epoch
    passes: Passes = field(default_factory=Passes)
    made_anew: bool = False  # the loop makes its loader anew: every worker starts each epoch
    _batch_rate: float = 0.0  # the best rate measured so far, in batches/s

    def first_reading(self, reading: Reading) -> None:
        """The run's first reading: where the run started, and the budget's unit."""
        self.started = self.clock() - reading.seconds
        self.unit_at(reading)

    def unit_at(self, best: Reading) -> None:
        """The best reading so far: the budget's unit is an epoch at its rate."""
        self._batch_rate = best.batches / best.seconds if best.seconds else 0.0

    def epoch_ended(self, batches: int) -> None:
        """An epoch of ``batches`` ended: a stream's first gives the budget its unit."""
        if self.batches_per_epoch is None:
            self.batches_per_epoch = batches

    @property
    def epoch_batches(self) -> int | None:
        """The batches of the budget's epoch: an epoch's, or a pass's the loop leaves early."""
        return self.passes.length(self.batches_per_epoch)

    @property
    def timeable_batches(self) -> int | None:
        """The batches of a pass a setting can be timed in (``passes.Passes.timeable``)."""
        return self.passes.timeable(self.batches_per_epoch)

    @property
    def best_rate(self) -> float | None:
        """The best rate measured so far, in batches/s (the unit's); None before any."""
        return self._batch_rate or None

    @property
    def _epoch_s(self) -> float:  # an epoch at the best rate: the unit of ``share``
        batches = self.epoch_batches
        return batches / self._batch_rate if batches and self._batch_rate else 0.0

    def charge(self, asked_at: float, between_epochs_s: float = 0.0, start_s: float = 0.0) -> None:
        """A proposal asked at ``asked_at`` was read (``between_epochs_s`` of the time since,
        the loop's own between two epochs, not charged); one that ran a whole epoch is
        charged that epoch and its workers' start (``start_s``: where it is slow)."""
        whole = self.whole_epochs and self._epoch_s
        spent = self._epoch_s + start_s if whole else self.clock() - asked_at - between_epochs_s
        self.spent_s += spent

    def afresh(self, reading: Reading) -> None:
        """After a drift, read in ``reading``: a fresh start's budget (``share`` of an epoch
        at its rate) from here, not the run's share of all of it over again."""
        self.unit_at(reading)
        self.spent_s = 0.0
        self.spent_s = self.left_s() - self.share * self._epoch_s

    def left_s(self) -> float:
        now = self.clock()
        run_s = now - (now if self.started is None else self.started)
        return max(self.share * self._epoch_s, self.run_share * run_s) - self.spent_s

    @property
    def setting_s(self) -> float:
        """The least a proposal costs: its shortest timing, or an epoch where it runs one."""
        return max(self.min_setting_s, self._epoch_s * self.whole_epochs)

    @property
    def short(self) -> bool:
        """Whether what is left cannot pay for one more proposal."""
        left = self.left_s()
        return left <= 0 or left < self.setting_s

    @property
    def grows(self) -> bool:
        """Whether the budget may still grow: with the run, or once a stream's first epoch
        gives its unit."""
        return bool(self.run_share) or not self._epoch_s

"""Which settings the explorer may measure on this run, and which not yet.

Refused for good (failed as they are asked, costing nothing): a setting no epoch, or pass the
loop reads, can time (``record.untimeable``), and one whose workers persist where the loop
changes its Dataset (``record.RENEWED``).

Not yet: a setting whose workers' start the budget left cannot pay. Under ``fork`` a worker
starts in milliseconds. Under ``spawn`` or ``forkserver`` (Python's default on Linux from
3.14) each starts an interpreter, imports torch and unpickles the Dataset: seconds of CPU, the
CPUs taking them a round at a time. Measured here, 16 such workers on 2 CPUs stalled the loop
for 51 s, where exploring had an epoch of 0.3 s left. So a start is predicted from those seen
on this run, as its rounds of workers times the slowest round seen (``WorkerStarts``), and a
setting whose start and shortest timing are more than what is left waits until the budget
has grown (``record.over_budget``). Before any start is seen none is predicted.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable
from typing import Any

from autotune.online import record
from autotune.online.budget import Budget
from autotune.online.proposals import Proposals
from autotune.online.reading import Reading
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import Failure


def starts_slowly(loader: Any) -> bool:
    """Whether ``loader``'s workers (a torch DataLoader's) each start an interpreter
    (``spawn``, ``forkserver``) rather than fork."""
    context = loader.multiprocessing_context
    if context is not None:
        return context.get_start_method() != "fork"
    # asked without fixing it: the user may still set it before a worker starts
    method = multiprocessing.get_start_method(allow_none=True)
    return (method or multiprocessing.get_all_start_methods()[0]) != "fork"


class WorkerStarts:
    """What starting a setting's workers costs the run, from the starts seen on it."""

    def __init__(self, cpus: int, *, slow: bool) -> None:
        """``cpus``: this process's share of the machine's; ``slow``: its workers start an
        interpreter each (``spawn``, ``forkserver``), not a fork."""
        self._cpus, self._slow = max(1, cpus), slow
        self._round_s: float | None = None  # the slowest round of starts seen

    def _rounds(self, settings: PipelineConfig) -> int:
        return math.ceil(settings.num_workers / self._cpus)

    def seen(self, reading: Reading) -> None:
        """``reading``'s first batch after its switch (or, where its workers start each
        epoch, an epoch's), less a batch's time: its workers' start."""
        settings = reading.settings
        if not self._slow or not settings.num_workers or not reading.batches:
            return
        waited = reading.first_batch_s
        if not settings.workers_persist:
            waited = max(waited, reading.epoch_start_s)
        start_s = waited - reading.seconds / reading.batches
        if start_s > 0:
            round_s = start_s / self._rounds(settings)
            self._round_s = max(self._round_s or 0.0, round_s)

    def predicted_s(self, settings: PipelineConfig) -> float | None:
        """Seconds ``settings``' workers would take to start; None where unknown."""
        if not self._slow or not settings.num_workers:
            return 0.0
        return None if self._round_s is None else self._round_s * self._rounds(settings)


class Admission:
    """Whether a setting may be measured on this run, now or ever."""

    def __init__(
        self,
        budget: Budget,
        fewest_batches: Callable[[PipelineConfig], int],
        starts: WorkerStarts,
        *,
        persist_refused: bool = False,
    ) -> None:
        """``fewest_batches``: the fewest batches of an epoch that can time a setting;
        ``persist_refused``: the loop changes its Dataset (workers that persist go stale)."""
        self._budget, self._fewest_batches, self.starts = budget, fewest_batches, starts
        self.persist_refused = persist_refused
        self.waiting_s: float | None = None  # the least a setting not paid for yet needs

    def timeable(self, config: PipelineConfig) -> bool:
        """Whether an epoch (or a pass the loop reads) can time ``config`` (unknown: yes)."""
        batches = self._budget.timeable_batches
        return batches is None or self._fewest_batches(config) <= batches

    def refused(self, config: PipelineConfig) -> Failure | None:
        """Why ``config`` can never run here, where it cannot."""
        if self.persist_refused and config.workers_persist:
            return record.RENEWED
        if self.timeable(config):
            return None
        budget = self._budget
        return record.untimeable(budget.batches_per_epoch or 0, budget.passes.left_after)

    def unpaid(self, config: PipelineConfig) -> Failure | None:
        """Why ``config`` cannot run yet, where the budget left cannot pay its workers'
        start and the least its timing costs (``Budget.setting_s``); ``waiting_s`` keeps
        the least such need."""
        start_s = self.starts.predicted_s(config)
        if not start_s:
            return None
        need_s, left_s = start_s + self._budget.setting_s, self._budget.left_s()
        if need_s <= left_s:
            return None
        self.waiting_s = min(self.waiting_s or need_s, need_s)
        return record.over_budget(start_s, left_s)

    def ask(self, proposals: Proposals) -> PipelineConfig | None:
        """``proposals``' next setting that may be measured now; where none may, what waits
        for the budget is kept (``waiting_s``: the least it needs), till the next ask."""
        self.waiting_s = None
        config = proposals.ask(self.refused, self.unpaid)
        if config is not None:  # paid for: what waits is found again at the next ask
            self.waiting_s = None
        return config

    @property
    def short(self) -> bool:
        """Whether the budget left pays for nothing new: not one more setting's timing, or
        not the least of those found waiting at the last ask (one that found nothing)."""
        waiting = self.waiting_s is not None and self._budget.left_s() < self.waiting_s
        return self._budget.short or waiting

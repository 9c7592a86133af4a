"""``autotune.DataLoader``: torch's DataLoader, taking the same arguments and giving the loop
the same batches, whose loader settings can change between two batches of an epoch.

The epoch's batches of indices are drawn from the user's own sampler in the training process
(``EpochBatches``), as torch's loader draws them, and read by an inner torch DataLoader built
with the current settings. A switch shuts the inner loader's workers down, hands the batches
they had prefetched to the next inner loader first, and builds that one with the new settings:
each index is delivered once per epoch, in the sampler's batches and order. Where that order
cannot be followed across loaders (an ``IterableDataset``'s stream, ``in_order=False``), a
switch waits for the next epoch.

Example:
    >>> loader = autotune.DataLoader(dataset, batch_size=32, shuffle=True, num_workers=2)
    >>> loader.switch(dataclasses.replace(loader.settings, num_workers=4))  # at the next batch
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from multiprocessing.util import Finalize
from typing import Any

import torch
import torch.utils.data

from autotune.machine import MachineFacts, detect
from autotune.online import record
from autotune.online.budget import charged, setting_cap, shares
from autotune.online.drift import DriftWatch
from autotune.online.epoch_batches import EpochBatches, InnerLoaders, sized
from autotune.online.explorer import Explorer, sampler
from autotune.online.meter import Meter, Reading, counter
from autotune.online.ranks import Decision, Ranks
from autotune.online.space import own_settings
from autotune.online.switching import EpochPass, Switch
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import Failure
from autotune.schema import WindowConfig

log = logging.getLogger(__name__)


class DataLoader(torch.utils.data.DataLoader):
    """A drop-in for ``torch.utils.data.DataLoader``: the same arguments, refused the same
    way, and the same batches of indices in the same order for the same ``generator``; its
    loader settings (``num_workers``, ``prefetch_factor``, ``persistent_workers``,
    ``pin_memory``, the training process's torch threads) may change between two batches
    (``switch``) without losing or repeating a sample."""

    def __init__(
        self,
        *args: Any,
        tune: bool | float = True,
        window: WindowConfig | None = None,
        storage: str = record.DEFAULT_STORAGE,
        study: str | None = None,
        **kwargs: Any,
    ) -> None:
        """torch's arguments, and: ``tune``: explore settings while the run trains (True:
        for one epoch's time at the rate first measured, or a tenth of the run so far where
        that is more; a number: that many epochs' time, 0.25 a quarter of one; False, or the
        environment's ``AUTOTUNE=off``: never);
        ``window``: the timing rules of each setting's measurement (a trial's,
        ``conf/window/default.yaml``, by default); ``storage``, ``study``: where each
        setting tried and the one kept are recorded (``online-<dataset>-<fingerprint>`` in
        ``studies/autotune.db`` by default), and where a later run of the job starts."""
        super().__init__(*args, **kwargs)
        self._is_stream = isinstance(self.dataset, torch.utils.data.IterableDataset)
        # 0: nothing explored (off, or the study's storage failed while exploring)
        self._share, self._run_share = shares(tune)
        # tune=False: torch's loader with these arguments, nothing read or recorded
        self._record_at: tuple[str, str | None] | None = (storage, study) if tune else None
        self._job: record.JobRecord | None = None
        self._facts: MachineFacts | None = None
        self._explorer: Explorer | None = None
        self._ranks: Ranks | None = None  # several ranks deciding together: rank 0 for all
        self._watch: DriftWatch | None = None  # started at a kept setting: its rate watched
        self._threads = torch.get_num_threads()  # what main_threads=None puts back
        self._settings = own_settings(self)
        self._requested: PipelineConfig | None = None
        self._base_seed = 0
        self.epochs = 0  # begun (passes drawn)
        self._inner = InnerLoaders()  # torch's loaders, reading with one setting each
        self.switches: list[Switch] = []
        self._window = window or WindowConfig()
        # batches an epoch; a stream's (or a sampler's with no len) once an epoch has ended
        self._epoch_length = None if self._is_stream else sized(self)
        self._unsized, self._in_epoch = self._epoch_length is None, False
        self.meter = self._new_meter(self._settings, after_switch=True)  # workers start
        self.readings: list[Reading] = []  # each setting's rate on this run, as measured

    @property
    def settings(self) -> PipelineConfig:
        """The settings the batches are read with now (a requested switch not yet made)."""
        return self._settings

    def switch(self, settings: PipelineConfig) -> None:
        """Reads with ``settings``'s switchable settings from the next batch on (from the
        next epoch where ``switches_mid_epoch`` is False)."""
        self._requested = self._settings.switched_to(settings)

    def take_request(self) -> PipelineConfig | None:
        """The switch asked for, handed to the pass that makes it (ranks': the one agreed)."""
        if self._ranks is not None:
            return self._ranks.take_agreed()
        requested, self._requested = self._requested, None
        return requested

    @property
    def switches_mid_epoch(self) -> bool:
        """Whether a switch may come between two batches of an epoch: the batches are drawn
        here and delivered in the order they are drawn (not a stream, nor ``in_order=False``,
        whose workers deliver as they finish)."""
        return not self._is_stream and self.in_order

    def __iter__(self) -> EpochPass:  # type: ignore[override]
        if self._in_epoch:  # the loop left the last epoch early: its time since is not timed
            self.meter.epoch_left()
        self._in_epoch = True
        if self._record_at is not None:
            self._start(*self._record_at)
        elif self._ranks is not None and self._ranks.syncing:  # an epoch's start: agreed
            self._ranks.sync(self)
        if self._ranks is not None:
            self._ranks.epoch_started()
        return EpochPass(self, self._draw_epoch())

    def _start(self, storage: str, name: str | None) -> None:
        """Where the run starts: the setting an earlier run kept (rank 0 reads it for all)."""
        self._record_at = None
        self._ranks = ranks = Ranks.joined(self)
        if ranks is None or ranks.leader:
            self._resume(storage, name, ranks.world if ranks else 1)
        if ranks is not None:
            start = ranks.start(self._epoch_length, lambda: Decision(self._settings, self._share))
            if not ranks.leader:
                self._start_at(start.settings or self._settings, start.share)

    def _resume(self, storage: str, name: str | None, ranks: int) -> None:
        """The setting an earlier run of the job kept, from its record (``record.JobRecord``)."""
        self._facts = detect(want_cuda=torch.cuda.is_available())
        self._job = record.JobRecord.of(self, self._facts, storage, name, sampler(), ranks)
        earlier = self._job.start()
        if earlier is not None:  # explored again only where its rate moves (``DriftWatch``)
            self._start_at(earlier.settings, self._share)
            self._watch = DriftWatch(kept_rate=earlier.samples_per_s) if self._share else None
            log.info("autotune.DataLoader: %s, as %s", self._settings.short(), self._job.origin)
        if self._job.deferred:  # the note's: checked against the storage when the run ends
            self._check_at_end = Finalize(self, self._job.check_deferred, exitpriority=0)

    def _start_at(self, settings: PipelineConfig, share: float) -> None:
        self._settings, self._share = self._settings.switched_to(settings), share
        self.meter = self._new_meter(self._settings, after_switch=True)

    def before_batch(self, delivered: int) -> None:
        """Several ranks: where a sync is due before batch ``delivered``, they agree there."""
        if self._ranks is not None and self._ranks.due(delivered):
            self._ranks.sync(self)

    def decision(self) -> Decision:
        """Rank 0, at a sync: its explorer's switch, for every rank, and the budget (0: off;
        else the syncs go on, the kept setting's rate watched for a drift)."""
        requested, self._requested = self._requested, None
        return Decision(requested, self._share)

    def _draw_epoch(self) -> EpochBatches | None:
        """As torch's iterator does: the sampler's iterator, then its workers' base seed
        from ``generator`` (once in the loader's life where the user's workers persist)."""
        batches = None if self._is_stream else EpochBatches(self._index_sampler)
        if not (self.persistent_workers and self.num_workers > 0 and self.epochs):
            draw = torch.empty((), dtype=torch.int64).random_(generator=self.generator)
            self._base_seed = int(draw.item())
        self.epochs += 1
        return batches

    def switched(self, switch: Switch) -> None:
        """A pass switched: read with ``switch.settings`` from here, timed afresh."""
        self.switches.append(switch)
        self._settings = switch.settings
        self._measure(switch.settings, after_switch=True)

    def measured(self) -> None:
        """The meter settled: its reading kept, the same settings timed on."""
        self._measure(self._settings, after_switch=False)

    def inner(self, settings: PipelineConfig, batches: EpochBatches | None) -> Any:
        """An iterator over the rest of the epoch with ``settings``: the kept loader when its
        workers persist with these settings, else a new torch DataLoader."""
        if torch.get_num_threads() != (settings.main_threads or self._threads):
            torch.set_num_threads(settings.main_threads or self._threads)
        return self._inner.open(self, settings, batches, seed=self._base_seed + self.epochs)

    @property
    def explorer(self) -> Explorer | None:
        """What was explored (None before the first setting is measured; ``tune=False``)."""
        return self._explorer

    def _measure(self, settings: PipelineConfig, *, after_switch: bool) -> None:
        """Keeps the last meter's reading (to the explorer where settled); times ``settings``."""
        meter = self.meter
        if meter.tally.spans:
            self.readings.append(meter.reading())
            if meter.done and self._ranks is not None:  # rank 0 explores, at the next sync
                self._ranks.measured(self.readings[-1])
            elif meter.done:
                self.explore(self.readings[-1])
        self.meter = self._new_meter(settings, after_switch=after_switch)

    def _new_meter(self, settings: PipelineConfig, *, after_switch: bool) -> Meter:
        """A meter for ``settings``; while exploring, capped at its share of the budget."""
        epoch = self._epoch_length
        exploring = self._share and epoch and (self._explorer is None or not self._explorer.done)
        cap_s = setting_cap(self._share, epoch, self._window) if exploring else None
        return Meter(
            settings, self._window, after_switch=after_switch, cap_s=cap_s,
            epoch_batches=epoch, whole_epoch=not self.switches_mid_epoch,
            count=counter(self._auto_collation, self.batch_size),
            workers_cpu=self._inner.workers_cpu,
        )  # fmt: skip

    def explore(self, reading: Reading) -> None:
        """Tells the explorer a settled reading; switches to the setting it proposes next."""
        if not self._share:  # off
            return
        if (watch := self._watch) is not None and self._job is not None:  # started at a kept
            whole = charged(reading, watch.restarts, self._epoch_length)  # as it was kept
            if watch.kept is None:  # the run's first reading of it: its rate, where none was kept
                self._job.started_at(whole)
            if not watch.drifted(whole):
                return
            log.info("autotune.DataLoader: %s: %s; exploring", reading.settings.short(), watch.why)
            self._watch = None
            self._job.check_deferred()  # the study a note put off, opened to record in
        if self._explorer is None:
            try:
                self._explorer = Explorer.on_run(
                    self._facts or detect(want_cuda=torch.cuda.is_available()), reading,
                    batch_size=self.batch_size or 1, ranks=self._ranks.local if self._ranks else 1,
                    window=self._window, share=self._share, run_share=self._run_share,
                    batches_per_epoch=self._epoch_length, whole_epochs=not self.switches_mid_epoch,
                    study=self._job.study if self._job else None,
                )  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - the storage failed: the run goes on
                record.not_recorded("the study's storage", exc)
                self._share = 0.0
                return
            # the loop left, the loader collected, the process ending (Ctrl-C; a rank process
            # too, which skips atexit): the setting measured is recorded as interrupted
            Finalize(self, self._explorer.close, exitpriority=0)
        if reading.settings == self._explorer.current:
            self._follow(lambda explorer: explorer.measured(reading))

    def _follow(self, propose: Callable[[Explorer], PipelineConfig]) -> None:
        """Switches to what the explorer ``propose``s; where the study's storage fails, to
        the best so far, exploring no more (the run goes on)."""
        explorer: Explorer = self._explorer  # type: ignore[assignment]
        try:
            self.switch(propose(explorer))
        except Exception as exc:  # noqa: BLE001 - the storage failed: the run goes on
            record.not_recorded("the study's storage", exc)
            explorer.done, self._share = True, 0.0
            best = explorer.best
            self.switch(best.settings if best is not None else self._settings)

    def failed(self, failure: Failure | None = None) -> None:
        """The current setting failed (its workers, and the loader fell back; or no epoch
        could time it): the explorer records it and proposes the next (with several ranks,
        at the next sync)."""
        if self._ranks is not None:
            self._ranks.failed(self.meter.settings, failure)
        else:
            self.fail(self.meter.settings, failure)

    def fail(self, settings: PipelineConfig, failure: Failure | None) -> None:
        """``settings`` failed: where they are the explorer's, it proposes the next."""
        explorer = self._explorer
        if explorer is not None and settings == explorer.current:  # kept too: the next best
            self._follow(lambda explorer: explorer.failed(failure))

    def epoch_ended(self, delivered: int) -> None:
        """Between epochs (``delivered`` batches): the setting kept noted; a setting no whole
        epoch could time is failed; where the budget has grown, the next setting proposed."""
        self._in_epoch = False
        if self._unsized:
            self._epoch_length = delivered
        if self.meter.cut():  # settled, or its epoch was its one chance: read it now
            self.measured()
        job, explorer = self._job, self._explorer
        if explorer is not None and explorer.settled and job is not None:
            job.note_kept(explorer.current, explorer.best)
        self.meter.epoch_ended()
        if self.meter.untimeable:
            self.failed(record.untimeable(delivered))
        elif explorer is not None and self._share and not explorer.done:
            self._follow(lambda explorer: explorer.epoch_ended(delivered))

    def release(self) -> None:
        """Shuts the kept loader's persistent workers down."""
        self._inner.release()

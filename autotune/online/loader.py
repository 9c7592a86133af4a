"""``autotune.DataLoader``: torch's DataLoader, taking the same arguments and giving the loop
the same batches, whose loader settings can change between two batches of an epoch.

The epoch's batches of indices are drawn from the user's own sampler in the training process
(``EpochBatches``), as torch's loader draws them, and read by an inner torch DataLoader built
with the current settings. A switch shuts the inner loader's workers down, hands the batches
they had prefetched to the next inner loader first, and builds that one with the new settings:
each index is delivered once per epoch, in the sampler's batches and order. Where that order
cannot be followed across loaders (an ``IterableDataset``'s stream, ``in_order=False``), a
switch waits for the next epoch. What asks for a switch, and where a run starts, is the run's
tuning (``tuning``).

Example:
    >>> loader = autotune.DataLoader(dataset, batch_size=32, shuffle=True, num_workers=2)
    >>> loader.switch(dataclasses.replace(loader.settings, num_workers=4))  # at the next batch
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.utils.data

from autotune.online import record, threads
from autotune.online.budget import setting_cap, shares
from autotune.online.dataset_state import BetweenEpochs
from autotune.online.epoch_batches import EpochBatches, InnerLoaders, sized
from autotune.online.explorer import Explorer
from autotune.online.meter import Meter
from autotune.online.passes import Passes
from autotune.online.reading import Reading
from autotune.online.run_state import RunState
from autotune.online.space import own_settings
from autotune.online.switching import EpochPass, Switch
from autotune.online.torch_arguments import arguments_of
from autotune.online.tuning import Tuning
from autotune.pipeline.batches import counter
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import Failure
from autotune.schema import WindowConfig


class DataLoader(RunState):
    """A drop-in for ``torch.utils.data.DataLoader``: the same arguments, refused the same
    way, and the same batches in the same order for the same ``generator``; its loader
    settings change between two batches (``switch``), losing and repeating no sample."""

    switches: list[Switch]
    readings: list[Reading]
    passes: Passes  # how much of each epoch the loop reads
    epochs: int
    _settings: PipelineConfig
    own: PipelineConfig  # your arguments' settings, as the first epoch read them
    _requested: PipelineConfig | None
    _epoch_length: int | None
    _window: WindowConfig  # the timing rules: ``window``'s, else a trial's

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
        for one epoch's time at the best rate measured so far, or a tenth of the run so far
        where that is more; a number: that many epochs' time, 0.25 a quarter of one; False,
        or the environment's ``AUTOTUNE=off``: never);
        ``window``: the timing rules of each setting's measurement (a trial's,
        ``conf/window/default.yaml``, by default); ``storage``, ``study``: where each
        setting tried and the one kept are recorded (``online-<dataset>-<fingerprint>`` in
        ``studies/autotune.db`` by default), and where a later run of the job starts."""
        super().__init__(*args, **kwargs)
        shares(tune)  # refused here, as torch refuses its own arguments
        # attributes, as torch keeps its own (``run_state``), read as the first epoch starts
        self.tune, self.window, self.storage, self.study = tune, window, storage, study
        self._set(**self._fresh())

    @classmethod
    def from_loader(cls, loader: torch.utils.data.DataLoader, **tuning: Any) -> DataLoader:
        """Reads what torch's ``loader`` (a library's: Accelerate's) reads, the same way."""
        return cls(**arguments_of(loader), **tuning)

    def _fresh(self) -> dict[str, Any]:
        """The loader's own state before its first epoch."""
        is_stream = isinstance(self.dataset, torch.utils.data.IterableDataset)
        # batches an epoch; a stream's (or a sampler's with no len) once an epoch has ended
        epoch_length = None if is_stream else sized(self)
        return dict(
            _is_stream=is_stream,
            tuning=None,
            meter=None,
            _threads=threads.yours(),  # what main_threads=None puts back
            # the main_threads last put in place (``threads``): the run's own till a switch
            _threads_applied=torch.get_num_threads(),
            _settings=own_settings(self),
            _requested=None,  # a switch asked for, not made yet
            _base_seed=0,
            epochs=0,  # begun (passes drawn)
            _inner=InnerLoaders(self),  # torch's loaders, reading with one setting each
            switches=[],
            _epoch_length=epoch_length,
            _unsized=epoch_length is None,
            _in_epoch=False,
            passes=Passes(),
            _between=BetweenEpochs(),  # what the loop sets on the Dataset between epochs
            _pass=None,  # the pass begun last (weakly, but where your workers persist)
            readings=[],  # each setting's rate on this run, as measured
        )

    def _begin(self) -> Tuning:
        """As the first epoch starts: the run's tuning, from the arguments (loader settings
        set since it was made too, as torch's loader reads them), and the first meter."""
        own = self._settings.switched_to(own_settings(self))
        self._set(_settings=own, own=own, _threads_applied=own.main_threads)
        window = self.window or WindowConfig()
        self._set(_window=window, tuning=Tuning(self, self.tune, self.storage, self.study, window))
        self._set(meter=self._new_meter(self._settings, after_switch=True, drain=True))
        return self._tuning

    @property
    def settings(self) -> PipelineConfig:
        """The settings the batches are read with now (a requested switch not yet made)."""
        return self._settings

    @property
    def epoch_length(self) -> int | None:
        """Batches an epoch (None: a stream's, or a sampler's with no len, until one ended)."""
        return self._epoch_length

    @property
    def explorer(self) -> Explorer | None:
        """What was explored (None before the first setting is measured; ``tune=False``)."""
        return self.tuning.explorer if self.tuning is not None else None

    def switch(self, settings: PipelineConfig) -> None:
        """Reads with ``settings``' switchable ones from the next batch (or epoch: a stream)."""
        self._set(_requested=self._settings.switched_to(settings))

    def asked(self) -> PipelineConfig | None:
        """The switch asked for (``switch``) and not made yet, once."""
        requested = self._requested
        self._set(_requested=None)
        return requested

    def take_request(self, *, epoch_done: bool = False) -> PipelineConfig | None:
        """The switch to make, handed to the pass that makes it (ranks': the one agreed)."""
        return self._tuning.take_request(epoch_done=epoch_done)

    @property
    def switches_mid_epoch(self) -> bool:
        """Whether a switch may come between two batches of an epoch: they are drawn here and
        delivered in that order (not a stream's, nor ``in_order=False``'s, as workers finish)."""
        return not self._is_stream and self.in_order

    def __iter__(self) -> EpochPass:  # type: ignore[override]
        if self._in_epoch:  # the loop left the last epoch early: its time since is not timed
            self._left()
        self._set(_in_epoch=True)
        tuning = self.tuning or self._begin()
        self._check_dataset()  # before the epoch's start: several ranks agree on it there
        tuning.epoch_started(self)
        epoch = EpochPass(self, self._draw_epoch())
        held = self.persistent_workers and self.num_workers  # as torch's holds its iterator
        self._set(_pass=epoch if held else weakref.ref(epoch))
        return epoch

    @property
    def current_pass(self) -> EpochPass | None:  # the pass begun last, while it lives
        return self._pass() if isinstance(self._pass, weakref.ref) else self._pass

    def _check_dataset(self) -> None:  # its workers start afresh, none kept alive from here
        """Where the loop changed the Dataset between epochs, with workers that do not persist."""
        names = self._between.changed(self.dataset)
        if names and not (self.persistent_workers and self.num_workers):  # torch's: a copy kept
            self._inner.release()
            self._tuning.dataset_changed(names)

    def start_at(self, settings: PipelineConfig, *, made_anew: bool = False) -> None:
        """Before the first batch: the run starts at ``settings`` (kept, or a dropped loader's)."""
        self._set(_settings=self._settings.switched_to(settings), made_anew=made_anew)
        self._set(meter=self._new_meter(self._settings, after_switch=True, drain=not made_anew))

    def before_batch(self, delivered: int) -> None:
        """Before the epoch's batch ``delivered`` (counted); the ranks agree there, if due."""
        self.passes.asked_for(delivered)
        if self.switches_mid_epoch:
            self._tuning.before_batch(delivered)

    @property
    def pass_length(self) -> int | None:  # an epoch's batches, or a pass's the loop leaves
        return self.passes.length(self._epoch_length)

    def _left(self) -> None:
        """The loop left its epoch early (``passes``: a pass so long is its epoch now): a
        setting longer passes timed is read as it stands; one no pass could time has failed."""
        passes, epoch, meter = self.passes, self._epoch_length, self._meter
        passes.left()
        untimeable = meter.epoch_left(passes.timeable(epoch))
        if meter.done:
            self.measured()
        elif untimeable:
            self.failed(record.untimeable(epoch or 0, passes.left_after))

    def _draw_epoch(self) -> EpochBatches | None:
        """As torch's iterator does: the sampler's iterator, then its workers' base seed
        from ``generator`` (once in the loader's life where the user's workers persist)."""
        batches = None if self._is_stream else EpochBatches(self._index_sampler)
        if not (self.persistent_workers and self.num_workers > 0 and self.epochs):
            draw = torch.empty((), dtype=torch.int64).random_(generator=self.generator)
            self._set(_base_seed=int(draw.item()))
        self._set(epochs=self.epochs + 1)
        return batches

    def switched(self, switch: Switch) -> None:
        """A pass switched: read with ``switch.settings`` from here, timed afresh."""
        self.switches.append(switch)
        self._set(_settings=switch.settings)
        self._measure(switch.settings, after_switch=True)

    def measured(self) -> None:
        """The meter settled: its reading kept, the same settings timed on."""
        self._measure(self._settings, after_switch=False)

    def inner(
        self, settings: PipelineConfig, batches: EpochBatches | None, *, apart: bool = False
    ) -> Any:
        """The rest of the epoch with ``settings``: the kept workers', else a new loader's."""
        changed = settings.main_threads != self._threads_applied
        threads.apply(self, settings.main_threads or self._threads, changed=changed)
        self._set(_threads_applied=settings.main_threads)
        read = self._inner.apart if apart else self._inner.open
        return read(self, settings, batches, seed=self._base_seed)

    def _measure(self, settings: PipelineConfig, *, after_switch: bool) -> None:
        """Keeps the last meter's reading (to the tuning where settled); times ``settings``."""
        meter = self._meter
        if meter.tally.spans:
            self.readings.append(meter.reading())
            if meter.done:
                self._tuning.settled(self.readings[-1])
        self._set(meter=self._new_meter(settings, after_switch=after_switch).follows(meter))

    def _new_meter(
        self, settings: PipelineConfig, *, after_switch: bool, drain: bool = False
    ) -> Meter:
        """A meter for ``settings`` (``drain``: the run's first, its prefetch buffer drained);
        while exploring, capped at its share of the budget, and a proposal raced against the
        best so far."""
        epoch, tuning, window = self.pass_length, self._tuning, self._window
        exploring = epoch and tuning.exploring
        cap = setting_cap(tuning.share, epoch, window, tuning.best_rate) if exploring else None
        mid = self.switches_mid_epoch  # else a proposal runs its epoch whole: nothing to save
        rival = tuning.rival(settings) if exploring and mid else None
        return Meter(
            settings, window, after_switch=after_switch, drain=drain, cap_s=cap, rival=rival,
            epoch_batches=self.passes.timeable(epoch), whole_epoch=not mid or self.made_anew,
            count=counter(self._auto_collation, self.batch_size),
            workers_cpu=self._inner.workers_cpu,
            timed_before=any(r.settings == settings for r in self.readings),
        )  # fmt: skip

    def failed(self, failure: Failure | None = None) -> None:
        """The current setting failed (its workers; or no epoch could time it): to the tuning."""
        self._tuning.failed(self._meter.settings, failure)

    def epoch_ended(self, delivered: int) -> None:
        """Between epochs (``delivered`` batches): a settled reading kept; the tuning told."""
        epoch = delivered if self._unsized else self.epoch_length
        self._set(_in_epoch=False, _epoch_length=epoch)
        self.passes.ended(delivered)  # read whole: none left early
        end_s = self._meter.waiting_s()  # the setting's: its workers shut down where not kept
        if self._meter.cut():  # settled, or its epoch was its one chance: read it now
            self.measured()
        self._between.ended(self.dataset)  # what the loop may set on it before the next
        meter = self._meter
        meter.sized(self.passes.timeable(epoch))  # a stream's, learned as its first ends
        meter.epoch_ended(end_s, shorter=delivered < self.passes.longest)
        self._tuning.epoch_ended(delivered, meter)

    def last_batch(self, delivered: int) -> None:
        """The last batch of the epoch, or of a pass the loop leaves, is delivered; a loop may
        ask for none after it (Lightning knows the length) or drop a loader made anew: the
        Dataset is compared from an epoch's, and a loader made anew is read now."""
        if delivered == self._epoch_length:  # what it set on itself as it read is set by now
            self._between.ended(self.dataset)
        if self.made_anew and self._meter.cut():  # its epoch was the setting's one chance
            self.measured()
        elif self.made_anew and not self.switches and self._meter.first_batch_s is not None:
            self.failed(record.untimeable(self._epoch_length or delivered, self.passes.left_after))
        if self.made_anew and (ranks := self._tuning.ranks) is not None:
            ranks.pass_ended(self._tuning)  # each rank's reading, to rank 0 before it is dropped

    def release(self) -> None:
        """Shuts the kept loader's persistent workers down."""
        self._inner.release()

"""One pass over an ``autotune.DataLoader``: the epoch's batches read by the inner loader of
the current settings, switched between two batches where asked, and back to the settings
that worked where a switch failed (a worker killed, out of memory, or unable to start); the
user's own Dataset raising is raised as torch raises it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from autotune.online.epoch_batches import EpochBatches, HandedSampler, shut_down
from autotune.online.meter import Meter
from autotune.online.passes import Passes
from autotune.online.torch_raised import loader_failure, moved_past
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import Failure, classify, first_line

log = logging.getLogger("autotune.online.loader")


@dataclass(frozen=True)
class Switch:
    """One change of settings, as the loop saw it."""

    epoch: int
    at_batch: int  # the epoch's batches delivered before it
    settings: PipelineConfig
    shutdown_s: float  # the old loader's workers taken down
    fell_back: bool = False  # the new settings failed: back to the last that worked
    first_batch_s: float | None = None  # the wait for the first batch after it (workers start)


class Owner(Protocol):
    """What a pass asks of the loader it passes over (``autotune.DataLoader``)."""

    switches: list[Switch]  # each switch made, in order
    passes: Passes  # how much of each epoch the loop reads

    @property
    def settings(self) -> PipelineConfig: ...  # what the batches are read with now

    @property
    def switches_mid_epoch(self) -> bool: ...

    @property
    def epochs(self) -> int: ...  # epochs begun

    @property
    def meter(self) -> Meter: ...  # timing the current settings on the loop

    def take_request(self, *, epoch_done: bool = False) -> PipelineConfig | None: ...  # once

    @property
    def epoch_length(self) -> int | None: ...  # batches an epoch, where known

    def before_batch(self, delivered: int) -> None: ...  # several ranks: a sync, where due

    def switched(self, switch: Switch) -> None: ...  # reads with its settings from now

    def measured(self) -> None: ...  # the meter settled: its reading kept

    def last_batch(self, delivered: int) -> None: ...  # an epoch's (or pass's) last delivered

    def inner(
        self, settings: PipelineConfig, batches: EpochBatches | None, *, apart: bool = False
    ) -> Iterator[Any]: ...

    def release(self) -> None: ...  # a kept loader's persistent workers shut down

    def failed(self, failure: Failure) -> None: ...  # the current settings' workers failed

    @property
    def current_pass(self) -> EpochPass | None: ...  # the pass begun last

    @property
    def own(self) -> PipelineConfig: ...  # your arguments' settings: torch's loader's

    @property
    def _iterator(self) -> Any: ...  # the iterator of the workers kept alive, if any

    @property
    def persistent_workers(self) -> bool: ...  # the user's

    @property
    def num_workers(self) -> int: ...  # the user's

    def epoch_ended(self, delivered: int) -> None: ...  # between epochs: its batches

    def __len__(self) -> int: ...


class EpochPass:
    """One pass over the loader: the batches of one epoch, read by an inner loader of the
    current settings, switching where asked, falling back where a switch failed."""

    def __init__(self, loader: Owner, batches: EpochBatches | None) -> None:
        self._loader = loader
        self._batches = batches
        self._index = loader.epochs
        self._it: Any = None  # opened at the first batch, where its failure can fall back
        self._next: PipelineConfig | None = None  # the switch to make at the next batch
        self._begun = False  # asked for a batch: a pass made and never read takes no switch
        # what worked before the last switch; till one, your own settings, where the run
        # reads with others (an earlier run's kept setting, or what it explores)
        own = loader.own
        self._fallback = own if own != loader.settings else None
        self._falling_back = False
        self._switched = False  # a switch whose first batch is still to come
        self._delivered = 0  # batches the loop received this epoch
        self._ended = False  # StopIteration raised: the epoch's end is not ended again
        self._on_kept = False  # read by the workers kept alive (another pass may take them)
        self._apart: PipelineConfig | None = None  # read apart from them, with these settings

    def __iter__(self) -> EpochPass:
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self) -> Any:
        loader = self._loader
        if self._ended:
            raise StopIteration
        if not self._begun:  # an epoch's start: any switch
            self._begun, self._next = True, loader.take_request()
        if self._apart:
            return self._read_apart()
        if self._taken():
            return self._left_for_another()  # another pass reset what it read
        loader.before_batch(self._delivered)
        if loader.switches_mid_epoch:  # past the epoch's last batch: some wait for the next
            done = loader.epoch_length is not None and self._delivered >= loader.epoch_length
            requested = loader.take_request(epoch_done=done)
            if requested is not None and requested != loader.settings:
                self._next = requested
        while True:
            opens = self._it is None or self._next is not None
            try:
                if opens:
                    self._open()  # asks for the batch as it builds the iterator
            except Exception as exc:
                self._recover(exc)
                continue
            try:
                if not opens:
                    loader.meter.requested()
                batch = next(self._it)
                break
            except StopIteration:
                self._ended = True
                loader.epoch_ended(self._delivered)
                self._end()
                raise
            except Exception as exc:
                self._recover(exc, read=True)
        if self._batches is not None:
            self._batches.delivered()
        self._delivered += 1
        loader.meter.received(batch)
        if self._switched:  # the first batch after a switch: its cost, on the switch
            self._switched = False
            last = loader.switches[-1]
            first = loader.meter.first_batch_s
            loader.switches[-1] = dataclasses.replace(last, first_batch_s=first)
        if loader.meter.done:  # settled: the reading kept
            loader.measured()
        if self._delivered in (loader.epoch_length, loader.passes.length(loader.epoch_length)):
            loader.last_batch(self._delivered)  # a loop may ask for none after it
        return batch

    def _taken(self) -> bool:
        """Whether this pass lost what it read: where your workers persist, to a pass begun since
        (torch's one iterator), whatever the settings; else the workers kept alive it read, shut
        down or serving another pass (torch's iterator keeps its loader's sampler; a stream's)."""
        loader, kept = self._loader, self._loader._iterator
        on_kept_lost = self._on_kept and kept is not self._it
        if loader.persistent_workers and loader.num_workers:
            return loader.current_pass is not self or on_kept_lost
        handed = getattr(kept, "_index_sampler", None)
        if not self._on_kept or on_kept_lost:
            return on_kept_lost
        if isinstance(handed, HandedSampler):
            return handed.batches is not self._batches
        return loader.current_pass is not self

    def _left_for_another(self) -> Any:
        """A pass begun while this one was live took the workers kept alive that it read.
        torch's loader hands both passes one iterator where you asked for workers that persist:
        so does this one; else two apart: this one reads on with its own (``_read_apart``)."""
        loader, current = self._loader, self._loader.current_pass
        resumes = loader.switches_mid_epoch and self._batches is not None
        if current is self and (resumes or not self._delivered):  # shut down from outside
            self._it, self._on_kept = None, False  # (Lightning's teardown): opened again
            return next(self)
        if loader.persistent_workers and loader.num_workers and current is not None:
            try:
                return next(current)
            except StopIteration:
                self._ended = True
                raise
        if self._batches is None or not loader.switches_mid_epoch:
            raise RuntimeError(  # a stream, or batches delivered as they finish: not resumed
                "autotune.DataLoader cannot resume a pass of a stream (or in_order=False) "
                "where the workers it kept alive stood: they were shut down, or another pass "
                "began; for two passes at once (zip(loader, loader)), make a second loader"
            )
        self._batches.take_back()  # what the kept workers held of this pass, read again
        self._apart, self._on_kept = loader.settings, False  # its twin that does not persist
        self._it = loader.inner(self._apart, self._batches, apart=True)
        return self._read_apart()

    def _read_apart(self) -> Any:
        """The next batch of a pass read apart: untimed (the loop's rate is timed on the pass
        the tuning follows) and never switched, raising what torch's raises."""
        assert self._batches is not None and self._apart is not None
        try:
            batch = next(self._it)
        except StopIteration:
            self._ended = True
            self._end()
            raise
        except Exception as exc:
            workers = self._apart.num_workers > 0
            self._past_failed(exc, own=loader_failure(exc, workers=workers), workers=workers)
            self._loader.passes.raised()
            raise
        self._batches.delivered()
        self._delivered += 1
        return batch

    def _open(self) -> None:
        """Opens the epoch's inner iterator, or replaces it with one of the next settings:
        the old workers down first (timed), what they had prefetched handed on."""
        loader, settings = self._loader, self._next or self._loader.settings
        self._next = None
        start = time.perf_counter()
        if self._batches is not None:  # also what a loader that failed as it opened was handed
            self._batches.take_back()
        if self._it is not None:
            shut_down(self._it)
            self._it = None
            loader.release()  # where they were a kept loader's persistent workers
        if settings != loader.settings:
            took = time.perf_counter() - start
            self._fallback = None if self._falling_back else loader.settings
            loader.switched(
                Switch(self._index, self._delivered, settings, took, self._falling_back)
            )
            self._falling_back = False
            self._switched = True
        # the batch is asked for before its iterator starts its workers (forked, or spawned
        # with the Dataset pickled to each): an epoch's start and a switch's pay for them
        loader.meter.requested()
        self._it = loader.inner(settings, self._batches)
        self._on_kept = self._it is loader._iterator

    def _past_failed(self, exc: Exception, *, own: bool, workers: bool) -> None:
        """torch's iterator raised ``exc`` reading a batch: where it moved past that batch
        (``torch_raised.moved_past``), so does the epoch's record of what was delivered."""
        if self._batches is not None and moved_past(exc, own=own, workers=workers):
            self._batches.delivered()

    def _recover(self, exc: Exception, *, read: bool = False) -> None:
        """After a failure (``read``: reading a batch, not opening the loader): back to the
        settings that worked before the last switch, where the failure is the loader's own
        and the epoch can go on from where it stands; else the failure is raised, as torch's
        loader raises it, and, as torch's, the loader moves past the batch that raised
        (a loop that catches it reads on from the next)."""
        loader, fallback = self._loader, self._fallback
        restartable = loader.switches_mid_epoch or self._delivered == 0
        # opening, the loader's own: its workers could not start (nothing of the Dataset read)
        workers = loader.settings.num_workers > 0
        own = not read or loader_failure(exc, workers=workers)
        if fallback is None or not restartable or not own:
            if read:
                self._past_failed(exc, own=own, workers=workers)
            loader.passes.raised()
            raise exc
        why = first_line(exc)
        log.warning(
            "autotune.DataLoader: %s failed (%s); back to %s",
            loader.settings.short(),
            why,
            fallback.short(),
        )
        self._next, self._fallback, self._falling_back = fallback, None, True
        loader.failed(Failure(classify(exc), why))

    def _end(self) -> None:
        if self._batches is not None and self._batches.outstanding:
            raise RuntimeError(  # a fault of this loader's, never the user's: say so loudly
                f"autotune.DataLoader: {self._batches.outstanding} batches of the epoch were "
                "handed out and never delivered"
            )

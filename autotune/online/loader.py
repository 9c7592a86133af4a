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

import contextlib
import dataclasses
import logging
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils.data

from autotune.online.epoch_batches import EpochBatches
from autotune.online.meter import Meter, Reading
from autotune.pipeline.batches import samples_in
from autotune.pipeline.config import AS_IS, LOADER_KEYS, SWITCHABLE, PipelineConfig
from autotune.schema import WindowConfig

log = logging.getLogger(__name__)

# the inner loader's arguments a switch may change; the rest are the user's, as passed
SWITCHED_LOADER_KEYS = tuple(k for k in SWITCHABLE if k in LOADER_KEYS)


@dataclass(frozen=True)
class Switch:
    """One change of settings, as the loop saw it."""

    epoch: int
    at_batch: int  # the epoch's batches delivered before it
    settings: PipelineConfig
    shutdown_s: float  # the old loader's workers taken down
    fell_back: bool = False  # the new settings failed: back to the last that worked


class DataLoader(torch.utils.data.DataLoader):
    """A drop-in for ``torch.utils.data.DataLoader``: the same arguments, refused the same
    way, and the same batches of indices in the same order for the same ``generator``; its
    loader settings (``num_workers``, ``prefetch_factor``, ``persistent_workers``,
    ``pin_memory``, the training process's torch threads) may change between two batches
    (``switch``) without losing or repeating a sample."""

    def __init__(self, *args: Any, window: WindowConfig | None = None, **kwargs: Any) -> None:
        """torch's arguments; ``window``: the timing rules of each setting's measurement (a
        trial's, ``conf/window/default.yaml``, by default)."""
        super().__init__(*args, **kwargs)
        self._settings = PipelineConfig(
            decoder=AS_IS,
            num_workers=self.num_workers,
            prefetch_factor=self.prefetch_factor if self.num_workers else None,
            persistent_workers=self.persistent_workers,
            pin_memory=self.pin_memory,
            batch_size=self.batch_size or 1,
        )
        self._requested: PipelineConfig | None = None
        self._threads = torch.get_num_threads()  # what main_threads=None puts back
        self._base_seed = 0
        self._epochs = 0
        self._kept: _Inner | None = None  # a loader whose workers persist, between epochs
        self.switches: list[Switch] = []
        self._window = window or WindowConfig()
        self._meter = Meter(self._settings, self._window, after_switch=False, count=self._count)
        self.readings: list[Reading] = []  # each setting's rate on this run, as measured

    @property
    def settings(self) -> PipelineConfig:
        """The settings the batches are read with now (a requested switch not yet made)."""
        return self._settings

    def switch(self, settings: PipelineConfig) -> None:
        """Reads with ``settings``'s switchable settings from the next batch on (from the
        next epoch where ``switches_mid_epoch`` is False)."""
        self._requested = _merged(self._settings, settings)

    @property
    def switches_mid_epoch(self) -> bool:
        """Whether a switch may come between two batches of an epoch: the batches are drawn
        here and delivered in the order they are drawn (not a stream, nor out of order)."""
        return not self._is_stream and (self.in_order or not self.num_workers)

    @property
    def _is_stream(self) -> bool:
        return isinstance(self.dataset, torch.utils.data.IterableDataset)

    def __iter__(self) -> _Epoch:  # type: ignore[override]
        return _Epoch(self, self._draw_epoch())

    def _draw_epoch(self) -> EpochBatches | None:
        """As torch's iterator does: its workers' base seed from ``generator`` (once in the
        loader's life where the user's workers persist), then the sampler's order."""
        persistent = self.persistent_workers and self.num_workers > 0
        if not (persistent and self._epochs):
            draw = torch.empty((), dtype=torch.int64).random_(generator=self.generator)
            self._base_seed = int(draw.item())
        self._epochs += 1
        return None if self._is_stream else EpochBatches(self._index_sampler)

    def _open(self, settings: PipelineConfig, batches: EpochBatches | None) -> Any:
        """An iterator over the rest of the epoch with ``settings``: the kept loader when its
        workers persist with these settings, else a new torch DataLoader."""
        if torch.get_num_threads() != (settings.main_threads or self._threads):
            torch.set_num_threads(settings.main_threads or self._threads)
        kept = self._kept
        with warnings.catch_warnings():
            # more workers than CPUs is a setting being measured, not a mistake to warn of
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            if kept is not None and kept.settings == settings:
                kept.handed.batches = batches
                return iter(kept.loader)
            self._release()
            inner = self._build(settings, batches)
            if settings.persistent_workers and settings.num_workers:
                self._kept = inner
            return iter(inner.loader)

    def _build(self, settings: PipelineConfig, batches: EpochBatches | None) -> _Inner:
        handed = _Handed(batches, self._index_sampler)
        kwargs: dict[str, Any] = dict(
            collate_fn=self.collate_fn,
            timeout=self.timeout,
            worker_init_fn=self.worker_init_fn,
            multiprocessing_context=self.multiprocessing_context if settings.num_workers else None,
            # its own generator: the user's is drawn as torch's loader draws it, and no more
            generator=torch.Generator().manual_seed(self._base_seed + self._epochs),
            in_order=self.in_order,
            **{k: getattr(settings, k) for k in SWITCHED_LOADER_KEYS},
        )
        if self._is_stream:
            kwargs.update(batch_size=self.batch_size, drop_last=self.drop_last)
        elif self._auto_collation:
            kwargs.update(batch_sampler=handed)
        else:
            kwargs.update(sampler=handed, batch_size=None)
        return _Inner(torch.utils.data.DataLoader(self.dataset, **kwargs), settings, handed)

    def _measure(self, settings: PipelineConfig, *, after_switch: bool) -> None:
        """Keeps what the last meter timed; a new one measures ``settings`` from here."""
        if self._meter.tally.spans:
            self.readings.append(self._meter.reading())
        self._meter = Meter(settings, self._window, after_switch=after_switch, count=self._count)

    def _count(self, batch: Any) -> int:
        """Samples in a batch the loop receives: one without automatic batching; the batch
        size where the batch is of a shape the count cannot read (the training goes on)."""
        if not self._auto_collation:
            return 1
        try:
            return samples_in(batch)
        except ValueError:
            return self.batch_size or 1

    def _release(self) -> None:
        """Shuts the kept loader's persistent workers down."""
        kept, self._kept = self._kept, None
        if kept is not None and kept.loader._iterator is not None:
            _shut_down(kept.loader._iterator)
            kept.loader._iterator = None


class _Handed(torch.utils.data.Sampler):
    """An inner loader's sampler: the running epoch's batches, handed on (``EpochBatches``).
    A loader whose workers persist iterates it again at each epoch's start."""

    def __init__(self, batches: EpochBatches | None, index_sampler: Any) -> None:
        self.batches = batches
        self._index_sampler = index_sampler

    def __iter__(self) -> Any:
        assert self.batches is not None
        return self.batches.handed()

    def __len__(self) -> int:
        return len(self._index_sampler)


@dataclass
class _Inner:
    """A torch DataLoader built with one set of settings, and the sampler it reads from."""

    loader: torch.utils.data.DataLoader
    settings: PipelineConfig
    handed: _Handed


class _Epoch:
    """One pass over the loader: the batches of one epoch, read by an inner loader of the
    current settings, switching where asked, falling back where a switch failed."""

    def __init__(self, loader: DataLoader, batches: EpochBatches | None) -> None:
        self._loader = loader
        self._batches = batches
        self._index = loader._epochs
        self._it: Any = None  # opened at the first batch, where its failure can fall back
        self._next: PipelineConfig | None = loader._requested  # an epoch's start: any switch
        loader._requested = None
        self._fallback: PipelineConfig | None = None  # what worked before the last switch
        self._falling_back = False

    def __iter__(self) -> _Epoch:
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self) -> Any:
        loader = self._loader
        if loader._requested is not None and loader.switches_mid_epoch:
            if loader._requested != loader._settings:
                self._next = loader._requested
            loader._requested = None
        while True:
            try:
                if self._it is None or self._next is not None:
                    self._open()
                loader._meter.requested()
                batch = next(self._it)
                break
            except StopIteration:
                loader._meter.epoch_ended()
                self._end()
                raise
            except Exception as exc:
                self._recover(exc)
        if self._batches is not None:
            self._batches.delivered()
        loader._meter.received(batch)
        if loader._meter.done:  # settled: keep the reading, go on measuring the same
            loader._measure(loader._settings, after_switch=False)
        return batch

    def _open(self) -> None:
        """Opens the epoch's inner iterator, or replaces it with one of the next settings:
        the old workers down first (timed), what they had prefetched handed on."""
        loader, settings = self._loader, self._next or self._loader._settings
        self._next = None
        start = time.perf_counter()
        if self._it is not None:
            if self._batches is not None:
                self._batches.take_back()
            _shut_down(self._it)
            self._it = None
            loader._release()  # where they were a kept loader's persistent workers
        if settings != loader._settings:
            at = self._batches.count if self._batches is not None else 0
            took = time.perf_counter() - start
            loader.switches.append(Switch(self._index, at, settings, took, self._falling_back))
            self._fallback = None if self._falling_back else loader._settings
            self._falling_back = False
            loader._settings = settings
            loader._measure(settings, after_switch=True)
        self._it = loader._open(settings, self._batches)

    def _recover(self, exc: Exception) -> None:
        """After a failure: back to the settings that worked before the last switch, where
        the failure is the loader's own and the epoch can go on from where it stands; else
        the failure is raised, as torch's loader raises it."""
        loader, fallback = self._loader, self._fallback
        delivered = self._batches.count if self._batches is not None else 0
        restartable = loader.switches_mid_epoch or delivered == 0
        if fallback is None or not restartable or not _loader_failure(exc):
            raise exc
        log.warning(
            "autotune.DataLoader: %s failed (%s); back to %s",
            loader._settings.short(),
            str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
            fallback.short(),
        )
        self._next, self._fallback, self._falling_back = fallback, None, True

    def _end(self) -> None:
        if self._batches is not None and self._batches.outstanding:
            raise RuntimeError(  # a fault of this loader's, never the user's: say so loudly
                f"autotune.DataLoader: {self._batches.outstanding} batches of the epoch were "
                "handed out and never delivered"
            )


def _merged(current: PipelineConfig, requested: PipelineConfig) -> PipelineConfig:
    """``current`` with the switchable settings of ``requested``."""
    return dataclasses.replace(current, **{k: getattr(requested, k) for k in SWITCHABLE})


def _shut_down(iterator: Any) -> None:
    """Takes an inner iterator's workers down now, rather than when it is collected."""
    with contextlib.suppress(AttributeError):
        iterator._shutdown_workers()


def _loader_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the loader's own failure (a worker killed, out of memory, or
    unable to start), not the user's Dataset raising, which torch re-raises with its own type
    as caught in a worker."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc)
    if "in DataLoader worker process" in text:
        return False
    return isinstance(exc, OSError) or (
        isinstance(exc, RuntimeError) and "DataLoader worker" in text
    )

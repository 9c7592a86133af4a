"""One epoch's batches of indices, drawn from the user's sampler in the training process as
torch's DataLoader draws them, and handed on from one loader to the next.

torch's loader sends each batch of indices its sampler yields to a worker, and the loop
receives the batches in that order (``in_order``). So while one loader runs, the batches it was
handed but has not delivered are exactly the oldest handed ones; when it is shut down they are
handed again, first, to the loader that takes over, and the sampler is drawn on from where it
stood. Nothing is drawn twice, and what the loop receives is the sampler's sequence.

Example:
    >>> from torch.utils.data import BatchSampler, SequentialSampler
    >>> epoch = EpochBatches(BatchSampler(SequentialSampler(range(6)), 2, False))
    >>> handed = iter(epoch.handed())
    >>> next(handed), next(handed)  # prefetched by a loader's workers
    ([0, 1], [2, 3])
    >>> epoch.delivered()  # the loop got [0, 1]; then the loader is replaced
    >>> epoch.take_back()
    >>> list(epoch.handed())  # the next loader's
    [[2, 3], [4, 5]]
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
import weakref
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch.utils.data

from autotune.online.loader_cpu import WorkersCpu
from autotune.online.worker_watch import WatchedDataLoader
from autotune.pipeline.config import LOADER_KEYS, SWITCHABLE, PipelineConfig

# the inner loader's arguments a switch may change; the rest are the user's, as passed
SWITCHED_LOADER_KEYS = tuple(k for k in SWITCHABLE if k in LOADER_KEYS)


def sized(loader: torch.utils.data.DataLoader) -> int | None:
    """``len(loader)``; None where its sampler has no length, or says so (torch's loader
    raises only where ``len()`` is asked)."""
    try:
        return len(loader)
    except (TypeError, NotImplementedError):
        return None


class EpochBatches:
    """The batches (or, without automatic batching, the indices) of one epoch, in the order
    the user's sampler yields them, drawn as loaders ask for them."""

    def __init__(self, index_sampler: Iterable[Any]) -> None:
        self._draws = iter(index_sampler)
        self._pending: deque[Any] = deque()  # handed to the running loader, not delivered
        self._again: deque[Any] = deque()  # handed to a loader since shut down: next first

    def handed(self) -> Iterator[Any]:
        """What a loader's sampler yields: the batches taken back first, then new draws."""
        while self._again:
            batch = self._again.popleft()
            self._pending.append(batch)
            yield batch
        for batch in self._draws:
            self._pending.append(batch)
            yield batch

    def delivered(self) -> None:
        """The loop received the oldest batch handed out."""
        self._pending.popleft()

    def take_back(self) -> None:
        """The running loader is shut down: what it was handed and did not deliver goes to
        the next loader first, in the order it was drawn."""
        self._again = self._pending + self._again
        self._pending = deque()

    @property
    def outstanding(self) -> int:
        """Batches handed out (or taken back) and not yet delivered."""
        return len(self._pending) + len(self._again)


class HandedSampler(torch.utils.data.Sampler):
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
class InnerLoader:
    """A torch DataLoader built with one set of settings, and the sampler it reads from."""

    loader: torch.utils.data.DataLoader
    settings: PipelineConfig
    handed: HandedSampler

    @classmethod
    def build(
        cls,
        outer: torch.utils.data.DataLoader,
        settings: PipelineConfig,
        batches: EpochBatches | None,
        seed: int,
    ) -> InnerLoader:
        """A torch DataLoader reading ``outer``'s Dataset with ``outer``'s own arguments and
        ``settings``' switchable ones, from ``batches`` (a stream: as it flows), its workers
        seeded from ``seed`` (worker ``i``: ``seed + i``, as torch seeds them)."""
        handed = HandedSampler(batches, outer._index_sampler)
        workers = settings.num_workers
        kwargs: dict[str, Any] = dict(
            collate_fn=outer.collate_fn,
            timeout=outer.timeout if workers else 0,  # torch refuses one without workers
            worker_init_fn=outer.worker_init_fn,
            multiprocessing_context=outer.multiprocessing_context if workers else None,
            # its own generator: the user's is drawn as torch's loader draws it, and no more
            generator=torch.Generator().manual_seed(seed),
            in_order=outer.in_order,
            **{k: getattr(settings, k) for k in SWITCHED_LOADER_KEYS},
        )
        if isinstance(outer.dataset, torch.utils.data.IterableDataset):
            kwargs.update(batch_size=outer.batch_size, drop_last=outer.drop_last)
        elif outer._auto_collation:
            kwargs.update(batch_sampler=handed)
        else:
            kwargs.update(sampler=handed, batch_size=None)
        loader = WatchedDataLoader(outer.dataset, **kwargs)
        loader.base_seed = seed
        return cls(loader, settings, handed)


class InnerLoaders:
    """The torch loaders an ``autotune.DataLoader`` reads with, one per setting: a new one
    at each switch or epoch, except one whose workers persist, kept between epochs and read
    again while its settings stand."""

    def __init__(self, owner: object) -> None:
        self._kept: InnerLoader | None = None
        self.workers_cpu = WorkersCpu()  # of the iterator opened last: the one being read
        self._seeded, self._built = None, 0  # the base seed built on last, loaders since
        # the kept workers shut down as ``owner`` is collected, their queues alive: left to
        # gc's sweep of a cycle, torch's shutdown put a worker's first index after gc had
        # closed that queue's pipe, and its thread closed the descriptor again
        weakref.finalize(owner, self.release).atexit = False

    def open(
        self,
        outer: torch.utils.data.DataLoader,
        settings: PipelineConfig,
        batches: EpochBatches | None,
        seed: int,
    ) -> Any:
        """An iterator over ``batches`` of ``outer``'s Dataset with ``settings``; a loader
        built for it seeds its workers from ``seed``, the base seed ``outer`` drew as torch's
        loader does (``_seed``)."""
        kept = self._kept
        with _measured_worker_counts():
            if kept is not None and kept.settings == settings:
                kept.handed.batches = batches
                inner = kept
            else:
                self.release()
                inner = InnerLoader.build(outer, settings, batches, self._seed(seed))
                if settings.workers_persist:
                    self._kept = inner
            self.workers_cpu.iterator = iterator = iter(inner.loader)
            return iterator

    def apart(
        self,
        outer: torch.utils.data.DataLoader,
        settings: PipelineConfig,
        batches: EpochBatches,
        seed: int,
    ) -> Any:
        """An iterator of its own over ``batches``, with ``settings``' workers not kept alive:
        for a pass read beside the one the kept workers serve (``zip(loader, loader)``)."""
        settings = dataclasses.replace(settings, persistent_workers=False)
        with _measured_worker_counts():
            return iter(InnerLoader.build(outer, settings, batches, self._seed(seed)).loader)

    @property
    def kept_iterator(self) -> Any:
        """The kept loader's iterator, its workers alive between epochs; None where none is."""
        return self._kept.loader._iterator if self._kept is not None else None

    def _seed(self, drawn: int) -> int:
        """The first loader built on a base seed drawn is seeded with it, as torch's loader
        seeds its workers; each built after it on the same draw (a switch) with one of its
        own: workers seeded alike would replay the same random draws (augmentation)."""
        if drawn != self._seeded:
            self._seeded, self._built = drawn, 0
            return drawn
        self._built += 1
        return (drawn + self._built * 0x9E3779B97F4A7C15) % 2**63

    def release(self) -> None:
        """Shuts the kept loader's persistent workers down."""
        kept, self._kept = self._kept, None
        if kept is not None and kept.loader._iterator is not None:
            shut_down(kept.loader._iterator)
            kept.loader._iterator = None


def shut_down(iterator: Any) -> None:
    """Takes an inner iterator's workers down now, rather than when it is collected."""
    with contextlib.suppress(AttributeError):
        iterator._shutdown_workers()


@contextlib.contextmanager
def _measured_worker_counts() -> Iterator[None]:
    """More workers than CPUs is a setting being measured, not a mistake torch should warn of."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        yield

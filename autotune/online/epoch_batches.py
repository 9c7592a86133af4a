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

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch.utils.data

from autotune.pipeline.config import PipelineConfig


class EpochBatches:
    """The batches (or, without automatic batching, the indices) of one epoch, in the order
    the user's sampler yields them, drawn as loaders ask for them."""

    def __init__(self, index_sampler: Iterable[Any]) -> None:
        self._draws = iter(index_sampler)
        self._pending: deque[Any] = deque()  # handed to the running loader, not delivered
        self._again: deque[Any] = deque()  # handed to a loader since shut down: next first
        self.count = 0  # delivered to the loop this epoch

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
        self.count += 1

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

"""torch's DataLoader with its workers' deaths seen where it reads, never anywhere else.

torch watches a loader's workers with a SIGCHLD handler: when one dies, the handler raises
``RuntimeError`` in whatever the main thread runs at that moment, the training step or this
package's own bookkeeping of the epoch's batches, where no fallback can catch it and a batch
can be lost between two lines. ``autotune.DataLoader`` switches to settings that may fail (too
many workers for the memory), and must fall back without losing a batch. So the workers of
its inner loaders are left out of that handler's watch, and the iterator checks them itself
each ``CHECK_S`` that a read waits, which torch also does (every 5 s): a death is raised by
``next()``, where the switch that caused it falls back.

Example:
    >>> loader = WatchedDataLoader(dataset, num_workers=2)
    >>> next(iter(loader))  # a worker that died raises here, not in the step after it
"""

from __future__ import annotations

import time
from typing import Any

import torch.utils.data
from torch.utils.data import _utils
from torch.utils.data.dataloader import _BaseDataLoaderIter, _MultiProcessingDataLoaderIter

from autotune.online.frozen_fork import frozen_in_forked_workers

CHECK_S = 0.1  # a read waiting on the workers checks that they live this often


class _WatchedWorkers(_MultiProcessingDataLoaderIter):
    """torch's iterator over workers, its workers out of the SIGCHLD handler's watch, and
    seeded from the loader's ``base_seed`` where it has one (not drawn from its generator)."""

    def __init__(self, loader: WatchedDataLoader) -> None:
        self._given_seed = loader.base_seed
        super().__init__(loader)

    @property
    def _base_seed(self) -> int:  # what its workers are seeded from: seed + worker id
        return self._drawn_seed if self._given_seed is None else self._given_seed

    @_base_seed.setter
    def _base_seed(self, drawn: int) -> None:  # torch's iterator draws one as it starts
        self._drawn_seed = drawn

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        if first_iter and self._worker_pids_set:  # before any worker is handed an index
            _utils.signal_handling._remove_worker_pids(id(self))
            self._worker_pids_set = False  # nothing for its shutdown to remove
        super()._reset(loader, first_iter)

    def _try_get_data(self, timeout: float = CHECK_S) -> tuple[bool, Any]:
        """torch's read, its workers checked each ``CHECK_S`` of it (the loader's own
        ``timeout`` too may be long)."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            got, data = super()._try_get_data(min(CHECK_S, left))  # raises where one died
            if got or time.monotonic() >= deadline:
                return got, data


class WatchedDataLoader(torch.utils.data.DataLoader):
    """A ``torch.utils.data.DataLoader`` whose workers' deaths are raised by its iterator's
    ``next()`` alone (within ``CHECK_S``); ``base_seed``, where set, seeds its workers, and
    a worker forked freezes what it inherited (``frozen_fork``)."""

    base_seed: int | None = None

    def _get_iterator(self) -> _BaseDataLoaderIter:
        if self.num_workers == 0:
            return super()._get_iterator()
        self.check_worker_number_rationality()
        with frozen_in_forked_workers():
            return _WatchedWorkers(self)

"""Iterable Datasets (streams): how long an epoch is, the check that each DataLoader worker
reads its own share, and a stream read again and again for a timed window."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from autotune.errors import UsageError, one_line


def epoch_length(where: str, dataset: IterableDataset) -> int:
    """An iterable's samples per epoch, from ``__len__`` or ``samples`` (else as counted),
    after one epoch read by two DataLoader workers is checked against one read without: an
    iterable that does not split its stream by ``get_worker_info()`` yields every sample once
    per worker."""
    one = _count(dataset, workers=0)
    two = _count(dataset, workers=2)
    if two > one:
        raise UsageError(
            f"{where} yields its samples once per DataLoader worker (two workers read "
            f"{two} samples, one process read {one}): in __iter__, read only this worker's "
            "share, e.g. itertools.islice(samples, info.id, None, info.num_workers) with "
            "info = torch.utils.data.get_worker_info() (None: no workers, read all)"
        )
    stated = _stated_length(dataset)
    return stated if stated is not None else one


def _stated_length(dataset: IterableDataset) -> int | None:
    for read in (len, lambda d: d.samples):
        try:
            value = read(dataset)
        except (TypeError, AttributeError, NotImplementedError):
            continue
        if isinstance(value, int):
            return value
        if hasattr(value, "__len__"):
            return len(value)
    return None


def _count(dataset: IterableDataset, *, workers: int) -> int:
    """Samples in one epoch of ``dataset`` read by ``workers`` DataLoader workers."""
    loader = DataLoader(dataset, batch_size=None, num_workers=workers, collate_fn=_keep)
    try:
        return sum(1 for _ in loader)
    except Exception as exc:  # noqa: BLE001 - the user's __iter__, in this process or a worker
        raise UsageError(
            f"reading an epoch of {type(dataset).__name__} with {workers} worker(s) failed: "
            f"{one_line(exc)}"
        ) from None


def _keep(sample: Any) -> None:
    return None  # counted, never kept: nothing crosses from the workers but a None


class Repeating(IterableDataset):
    """An iterable Dataset read again and again, each worker its own share every pass: a
    timed window that never meets the end of an epoch (the trial's endless sampler, for a
    stream)."""

    def __init__(self, dataset: IterableDataset) -> None:
        self.dataset = dataset

    def __iter__(self) -> Iterator[Any]:
        while True:
            read = 0
            for read, sample in enumerate(self.dataset, 1):  # noqa: B007 - counted
                yield sample
            if not read:  # this worker's share is empty (fewer shards than workers)
                return

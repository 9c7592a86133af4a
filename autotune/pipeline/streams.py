"""Iterable Datasets (streams): how long an epoch is, the check that each DataLoader worker
reads its own share, and a stream read again and again for a timed window."""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from autotune.errors import UsageError, one_line

# An epoch not ended after this long (or this many samples) is read as an endless stream.
ENDLESS_AFTER_S = 300.0
ENDLESS_AFTER_SAMPLES = 50_000_000


class _Endless(Exception):
    """An epoch that did not end within the caps."""


def epoch_length(
    where: str, dataset: IterableDataset, *, endless_after_s: float = ENDLESS_AFTER_S
) -> int:
    """An iterable's samples per epoch, from ``__len__`` or ``samples`` (else as counted),
    after one epoch read by two DataLoader workers is checked against one read without: an
    iterable that does not split its stream by ``get_worker_info()`` yields every sample once
    per worker. A stream whose epoch does not end (within its stated length, else within
    ``endless_after_s``) is refused: its epochs cannot be timed or compared."""
    stated = _stated_length(dataset)
    limit = stated if stated is not None else ENDLESS_AFTER_SAMPLES
    try:
        one = _count(dataset, workers=0, limit=limit, within_s=endless_after_s)
        two = _count(dataset, workers=2, limit=2 * limit, within_s=endless_after_s)
    except _Endless as endless:
        raise UsageError(
            f"{where} did not end an epoch ({endless}): autotune times and compares epochs, so "
            "a stream must end; end __iter__ after one pass over the data (or state its "
            "length as __len__ or a `samples` attribute, if it is longer than it says)"
        ) from None
    if two > one:
        raise UsageError(
            f"{where} yields its samples once per DataLoader worker (two workers read "
            f"{two} samples, one process read {one}): in __iter__, read only this worker's "
            "share, e.g. itertools.islice(samples, info.id, None, info.num_workers) with "
            "info = torch.utils.data.get_worker_info() (None: no workers, read all)"
        )
    return stated if stated is not None else one


def asks_its_share(dataset: IterableDataset) -> bool | None:
    """Whether a stream asks ``torch.utils.data.get_worker_info()`` as it starts, as one that
    reads only its worker's share does (the docs' recipe, webdataset's and Hugging Face's
    streams): watched while a copy of it yields one sample here, a pass of the loop's
    over it untouched, even under way. A cheap stand-in for ``epoch_length``'s two epochs,
    for a run that is training.
    None where it cannot tell: a stream that is its own iterator (``__next__``), or whose
    ``iter()`` returns the same one each time (reading would take a sample from the loop);
    one that fails to start (the loop will say why); or where a profiler watches the process
    (``cProfile``, ``torch.profiler``), whose own hook could not be put back."""
    if hasattr(type(dataset), "__next__") or sys.getprofile() is not None:
        return None
    asks = get_worker_info.__code__
    asked = False

    def watch(frame: Any, event: str, arg: Any) -> None:
        nonlocal asked
        asked = asked or (event == "call" and frame.f_code is asks)

    samples = None
    sys.setprofile(watch)
    try:
        # a copy: a stream that keeps its place on itself keeps it for a pass under way
        probe = copy.copy(dataset)
        samples = iter(probe)
        if iter(probe) is samples:  # the stream's one iterator: not ours to read or close
            samples = None
            return None
        next(samples, None)
    except Exception:  # noqa: BLE001 - the user's __iter__ (or copy): the loop raises it again
        return None
    finally:
        sys.setprofile(None)
        close = getattr(samples, "close", None)  # a generator's: its files closed now
        if callable(close):
            close()
    return asked


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


def _count(dataset: IterableDataset, *, workers: int, limit: int, within_s: float) -> int:
    """Samples in one epoch of ``dataset`` read by ``workers`` DataLoader workers; more than
    ``limit``, or still reading after ``within_s``, is an endless epoch."""
    loader = DataLoader(dataset, batch_size=None, num_workers=workers, collate_fn=_keep)
    deadline, count = time.monotonic() + within_s, 0
    samples = iter(loader)
    try:
        for _ in samples:
            count += 1
            if count > limit:
                raise _Endless(f"more than {limit} samples")
            if time.monotonic() > deadline:
                raise _Endless(f"{count} samples in {within_s:.0f} s and no end")
    except _Endless:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's __iter__, in this process or a worker
        raise UsageError(
            f"reading an epoch of {type(dataset).__name__} with {workers} worker(s) failed: "
            f"{one_line(exc)}"
        ) from None
    finally:
        del samples  # shuts the workers down, ended or not
    return count


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

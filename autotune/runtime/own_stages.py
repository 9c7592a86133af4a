"""Where a sample's time goes in the user's own Dataset: its read as one stage (``getitem``:
its ``__getitem__``, or the next sample of its stream, whatever its own code does inside) and
its collate (DataLoader's default where it has none), timed one by one in this process,
single-threaded as a DataLoader worker runs them, in CPU and wall seconds. A read that waits on
storage shows as wall time above its CPU time.

Example:
    >>> profile = profile_own(UserData.check("mydata.Clips", {"root": "/data"}), 64, 32)
    >>> profile.stages["getitem"].wall_s, profile.cpu_work_bound(usable_cpus=8)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, default_collate

from autotune.pipeline.user_data import UserData
from autotune.runtime.sample_stages import StageClock
from autotune.runtime.stages import OWN_READ, SampleTime, StageProfile, per_sample, pick
from autotune.runtime.threads import threads

OWN_STAGES = (OWN_READ, "collate")


def profile_own(
    data: UserData, n_samples: int = 64, batch_size: int = 32, seed: int = 0, *, warmup: int = 2
) -> StageProfile:
    """Times the Dataset's read of each of ``n_samples`` samples (drawn with ``seed``; of a
    stream, its first ones after ``warmup``) and its collate of them by ``batch_size``.

    Returns the seconds per sample of each of ``OWN_STAGES``, and each sample's own read
    time (the latency tail), under the name ``as_is``: it is read as it is.
    """
    if batch_size < 1:
        raise ValueError(f"`batch_size >= 1` must hold, but got ({batch_size=}).")
    dataset, collate = data.open()
    with threads(1), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        reads = _reads(dataset, n_samples, seed, warmup)
        total, samples = _time(reads, collate or default_collate, batch_size)
    if not samples:
        raise ValueError(f"{data.target} gave no samples to profile")
    return StageProfile("as_is", per_sample(total, len(samples)), tuple(samples))


# (which sample, in words; a read of it)
Reads = Iterator[tuple[str, Callable[[], Any]]]


def _reads(dataset: Any, n_samples: int, seed: int, warmup: int) -> Reads:
    """The reads to time, after ``warmup`` reads untimed (a first read pays its set-up)."""
    if isinstance(dataset, IterableDataset):
        stream = iter(dataset)
        for _ in itertools.islice(stream, warmup):
            pass
        return ((f"sample {i} of the stream", stream.__next__) for i in range(n_samples))
    chosen = pick(len(dataset), n_samples, seed)
    for index in chosen[:warmup]:
        dataset[index]
    return ((f"index {i}", lambda i=i: dataset[i]) for i in chosen)


def _time(
    reads: Reads, collate: Callable[[list[Any]], Any], batch_size: int
) -> tuple[StageClock, list[SampleTime]]:
    """Reads each sample on its own clock, and collates them by ``batch_size``."""
    total = StageClock(OWN_STAGES)
    samples: list[SampleTime] = []
    batch: list[Any] = []
    for where, read in reads:
        clock = StageClock(OWN_STAGES)
        try:
            sample = read()
        except StopIteration:  # a stream shorter than asked for
            break
        spent = clock.lap(OWN_READ)
        total.add(clock)
        samples.append(SampleTime(where, 0, 0, 0, 0.0, 0.0, 0.0, own_s=spent))
        batch.append(sample)
        if len(batch) == batch_size:
            _collate(batch, collate, total)
            batch = []
    if batch:  # the last, smaller batch
        _collate(batch, collate, total)
    return total, samples


def _collate(batch: list[Any], collate: Callable[[list[Any]], Any], clock: StageClock) -> None:
    clock.reset()
    collate(batch)
    clock.lap("collate")

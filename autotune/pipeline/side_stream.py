"""``device_prefetch``: the next batch's copy to the device (and what follows it there) queued
on a side CUDA stream while the current step runs on the default one."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import torch

from autotune.pipeline import batches


class Stage(Protocol):
    """What moves a host batch to the device (``device_stage.DeviceStage``)."""

    device: torch.device

    def __call__(self, batch: Any) -> Any: ...


def one_ahead(
    items: Iterable[Any], start: Callable[[Any], Any], finish: Callable[[Any], Any]
) -> Iterator[Any]:
    """Yields ``finish(start(item))`` for each item, but starts item N+1 before yielding N:
    whatever ``start`` queues runs while the caller works on N. (The first item handed over
    waits for two loads: a prefetching config's time to first batch includes both.)"""
    iterator = iter(items)
    try:
        pending = start(next(iterator))
    except StopIteration:
        return
    for item in iterator:
        ready = finish(pending)
        pending = start(item)
        yield ready
    yield finish(pending)


def prefetch_on_side_stream(host_batches: Iterable[Any], stage: Stage) -> Iterator[Any]:
    """``device_prefetch``: batch N+1's copy (and device decode/augment) is queued on a side
    CUDA stream while step N runs on the current one."""
    side = torch.cuda.Stream(device=stage.device)

    def start(batch: Any) -> Any:
        with torch.cuda.stream(side):
            return stage(batch)

    def finish(ready: Any) -> Any:
        current = torch.cuda.current_stream(stage.device)
        current.wait_stream(side)
        for tensor in batches.tensors(ready):
            # made on the side stream, used on the current one: the caching allocator must
            # not hand its memory out again until the current stream is done with it
            tensor.record_stream(current)
        return ready

    return one_ahead(host_batches, start, finish)

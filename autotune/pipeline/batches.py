"""A batch of any shape: a tensor, or tuples, lists and dicts of them, nested (what a user's
collate returns). What crosses to the device, and how many samples a batch holds."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch


def to_device(batch: Any, device: torch.device, *, non_blocking: bool = False) -> Any:
    """``batch`` with every tensor in it moved to ``device``; its structure (dict, tuple,
    named tuple, list) and anything that is not a tensor are kept."""
    return _map(batch, lambda t: t.to(device, non_blocking=non_blocking))


def tensors(batch: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``batch``, depth first."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, Mapping):
        for value in batch.values():
            yield from tensors(value)
    elif isinstance(batch, (tuple, list)):
        for value in batch:
            yield from tensors(value)


def samples_in(batch: Any) -> int:
    """How many samples ``batch`` holds: a tensor's leading dimension; for a dict, its first
    value's count; for a tuple or list, its first element's count when that is a tensor or
    a dict (``(inputs, labels)``, ``[{"x": ...}, ...]`` batched by field), else its length
    (a list of samples, or of per-sample tensors of different sizes)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, Mapping):
        if not batch:
            raise ValueError("an empty dict is not a batch")
        return samples_in(next(iter(batch.values())))
    if isinstance(batch, (tuple, list)):
        if not batch:
            raise ValueError("an empty sequence is not a batch")
        first = batch[0]
        if isinstance(first, (torch.Tensor, Mapping)):
            return samples_in(first)
        if isinstance(first, (tuple, list)):
            return len(first)
        return len(batch)
    raise ValueError(
        f"not a batch: {type(batch).__name__} (return tensors, or tuples, lists or dicts of them)"
    )


def _map(batch: Any, fn: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        moved = {key: _map(value, fn) for key, value in batch.items()}
        try:
            return type(batch)(moved)  # type: ignore[call-arg]
        except TypeError:  # a mapping type that is not built from a dict (defaultdict)
            return moved
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple
        return type(batch)(*(_map(value, fn) for value in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(_map(value, fn) for value in batch)
    return batch


def counter(batched: bool, batch_size: int | None) -> Callable[[Any], int]:
    """Samples in a batch the loop receives: one without automatic batching; the batch size
    where the batch is of a shape the count cannot read (the training goes on; a
    ``batch_sampler``'s batches have no size given: one)."""

    def count(batch: Any) -> int:
        if not batched:
            return 1
        try:
            return samples_in(batch)
        except ValueError:
            return batch_size or 1

    return count

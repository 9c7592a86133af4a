"""The arguments a torch DataLoader was built with, read back from it: what builds a loader
that reads the same batches the same way (``autotune.DataLoader.from_loader``, for a loader a
library built: Accelerate's, a trainer's).

torch keeps each argument as an attribute, but turns ``batch_size``, ``shuffle``,
``sampler`` and ``drop_last`` into a batch sampler of its own: where it made one, they are
read back from it (``shuffle`` as the sampler it made, with its ``generator``); a batch
sampler of the caller's own is passed again as it is.
"""

from __future__ import annotations

from typing import Any

import torch.utils.data
from torch.utils.data import BatchSampler, IterableDataset

# the settings and callables torch's loader keeps under their own names
_KEPT = (
    "num_workers", "collate_fn", "pin_memory", "timeout", "worker_init_fn",
    "multiprocessing_context", "generator", "prefetch_factor", "persistent_workers",
    "pin_memory_device", "in_order",
)  # fmt: skip


def arguments_of(loader: torch.utils.data.DataLoader) -> dict[str, Any]:
    """The keyword arguments, its Dataset among them, that build a loader reading what
    ``loader`` reads: the same batches of the same samples in the same order for the same
    ``generator`` draws (its workers' base seeds drawn from it too)."""
    kwargs: dict[str, Any] = {name: getattr(loader, name) for name in _KEPT}
    kwargs["dataset"] = loader.dataset
    batches = loader.batch_sampler
    if isinstance(loader.dataset, IterableDataset):  # torch refuses a sampler for a stream
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif batches is None:  # no automatic batching: each index a sample, as it is
        kwargs.update(batch_size=None, sampler=loader.sampler)
    elif type(batches) is BatchSampler and loader.batch_size is not None:  # torch's own
        kwargs.update(
            batch_size=loader.batch_size, drop_last=loader.drop_last, sampler=loader.sampler
        )
    else:
        kwargs["batch_sampler"] = batches
    return kwargs

"""What a DataLoader's settings are tuned for and cannot change, as ``autotune.DataLoader``
knows it from the loader alone: its Dataset's class and length, batch size, sampler, collate,
``drop_last`` and ``in_order``, on a machine. Its fingerprint is where a run inside the
training starts: from the setting an earlier run of the same loader kept, or from an offline
study's pick for the loader a user builds with its ``loader_kwargs``."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import torch.utils.data

from autotune.machine import MachineFacts


def qualified_name(obj: Any) -> str:
    """A class's (or an object's class's) module and name."""
    kind = obj if isinstance(obj, type) else type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def collate_name(collate_fn: Any) -> str:
    """A collate function as a loader's job names it (a ``functools.partial`` by what it
    calls)."""
    if isinstance(collate_fn, functools.partial):
        return f"partial({collate_name(collate_fn.func)})"
    return getattr(collate_fn, "__qualname__", qualified_name(collate_fn))


@dataclass(frozen=True)
class LoaderJob:
    dataset: str  # the Dataset's class
    length: int | None  # its len(); None: a stream without one
    batch_size: int | None
    # the batch sampler's class (torch's BatchSampler around whichever sampler, where the
    # loader batches), else the sampler's
    sampler: str
    collate: str
    drop_last: bool = False
    in_order: bool = True

    @classmethod
    def of(cls, loader: torch.utils.data.DataLoader) -> LoaderJob:
        try:
            length: int | None = len(loader.dataset)  # type: ignore[arg-type]
        except (TypeError, NotImplementedError):  # a stream with no length, or saying so
            length = None
        given = loader.sampler if loader.batch_sampler is None else loader.batch_sampler
        return cls(
            dataset=qualified_name(loader.dataset),
            length=length,
            batch_size=loader.batch_size,
            sampler=qualified_name(given),
            collate=collate_name(loader.collate_fn),
            drop_last=loader.drop_last,
            in_order=getattr(loader, "in_order", True),
        )

    def fingerprint(self, facts: MachineFacts, cuda: bool, ranks: int = 1) -> str:
        """The job on this machine (``cuda``: whether torch sees a CUDA device), each of
        ``ranks`` ranks with its loader."""
        job: dict[str, Any] = {
            "machine": [facts.usable_cpus, facts.logical_cpus, facts.memory_total_bytes],
            "gpu": facts.gpu.name if facts.gpu else None,
            "cuda": cuda,
            "dataset": [self.dataset, self.length],
            "batch_size": self.batch_size,
            "sampler": self.sampler,
            "collate": self.collate,
            "drop_last": self.drop_last,
            "in_order": self.in_order,
        }
        if ranks > 1:  # one rank's loader alone is the job it always was
            job["ranks"] = ranks
        return hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()[:12]

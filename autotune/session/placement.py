"""Where a run trains: the device asked for, as this machine can give it, and the ranks
(processes under DDP) that share it."""

from __future__ import annotations

from autotune.errors import UsageError
from autotune.machine import MachineFacts


def resolve_ranks(requested: int | str, device: str, facts: MachineFacts) -> int:
    """``ranks`` as a number: ``auto`` is one rank per visible GPU on CUDA, else 1. On CUDA
    each rank has a GPU of its own."""
    if requested == "auto":
        return max(1, facts.gpu_count) if device == "cuda" else 1
    ranks = int(requested)
    if device == "cuda" and ranks > facts.gpu_count:
        raise UsageError(
            f"ranks={ranks} needs {ranks} GPUs, one per rank, and {facts.gpu_count} are "
            "visible: lower ranks, or use ranks=auto"
        )
    return ranks


def resolve_device(requested: str, cuda_available: bool) -> str:
    if requested == "cuda" and not cuda_available:
        raise UsageError("device=cuda but no CUDA device is usable here: use device=cpu or auto")
    return "cuda" if requested == "cuda" or (requested == "auto" and cuda_available) else "cpu"

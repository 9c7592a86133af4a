"""The other ranks of a trial, for what a timed window must decide alike on every rank.

Under DDP every step all-reduces the gradients, so the ranks step in lockstep: a rank that
times one sub-window more than the others waits forever for a partner. Each decision the
window takes from what it measured (how long a sub-window is, whether to lengthen, whether to
stop) is therefore agreed first; and each timed span starts and ends at a barrier, so that the
ranks' spans cover the same seconds and their samples add up to the node's.

Example:
    >>> peers = ProcessGroupPeers()  # inside an initialised torch.distributed group
    >>> peers.least(batch_rate)      # the slowest rank's: the one the window is shaped for
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.distributed as dist


class Peers(Protocol):
    rank: int  # this process's place: 0 .. ranks - 1 (torchrun's RANK)
    ranks: int  # the trial's processes (WORLD_SIZE)

    def wait(self) -> None:
        """Returns once every rank is here."""

    def least(self, value: float) -> float:
        """The smallest of the ranks' values."""

    def total(self, value: float) -> float:
        """The sum of the ranks' values."""

    def any(self, flag: bool) -> bool:
        """Whether any rank's flag is set."""


class Alone:
    """One process: nothing to agree with."""

    rank, ranks = 0, 1

    def wait(self) -> None:
        pass

    def least(self, value: float) -> float:
        return value

    def total(self, value: float) -> float:
        return value

    def any(self, flag: bool) -> bool:
        return flag


ALONE = Alone()


class ProcessGroupPeers:
    """The ranks of the default ``torch.distributed`` process group (gloo or NCCL), reduced
    over small tensors on the group's device."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device or torch.device("cpu")
        self.rank, self.ranks = dist.get_rank(), dist.get_world_size()

    def _reduce(self, value: float, op: dist.ReduceOp.RedOpType) -> float:
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=op)
        return float(tensor.item())

    def wait(self) -> None:
        dist.barrier()

    def least(self, value: float) -> float:
        return self._reduce(value, dist.ReduceOp.MIN)

    def total(self, value: float) -> float:
        return self._reduce(value, dist.ReduceOp.SUM)

    def any(self, flag: bool) -> bool:
        return self._reduce(1.0 if flag else 0.0, dist.ReduceOp.MAX) > 0

"""Models that really fail, for tests of failing trials (importable via model._target_)."""

from __future__ import annotations

import torch
from torch import nn


class SingleThreadAllergy(nn.Module):
    """Trains fine with 2+ torch threads; raises with 1 (a failure tied to one knob value)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.get_num_threads() == 1:
            raise RuntimeError("this model refuses to run on one thread")
        return self.head(x)


class AlwaysFails(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.head = nn.Linear(3, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("broken model")


# Sources that really break inside DataLoader workers (forked into the trial's child process).
from autotune.pipeline.sources import Source  # noqa: E402


def _in_worker() -> bool:
    return torch.utils.data.get_worker_info() is not None


class SegfaultInWorker(Source):
    def read(self, index: int) -> bytes:
        if _in_worker():
            import os
            import signal

            os.kill(os.getpid(), signal.SIGSEGV)
        return super().read(index)


class HangInWorker(Source):
    def read(self, index: int) -> bytes:
        if _in_worker():
            import time

            time.sleep(3600)
        return super().read(index)


def as_(cls: type[Source], source: Source) -> Source:
    return cls(
        root=source.root,
        paths=source.paths,
        labels=source.labels,
        classes=source.classes,
        skipped=source.skipped,
    )


class Segfaults(nn.Module):
    """Crashes the training process itself (not a worker)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.head = nn.Linear(3, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import ctypes

        ctypes.string_at(0)  # reads address 0: a real SIGSEGV
        return self.head(x)


class _FailsOnRank1(nn.Module):
    """Trains on every rank but rank 1 of a trial of several, where its third step fails in
    the way ``fail`` says: a rank of a DDP job that crashes or hangs while the others wait
    in their next all-reduce."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, num_classes))
        self.steps = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import os

        self.steps += 1
        if os.environ.get("RANK") == "1" and self.steps == 3:
            self.fail()
        return self.head(x)

    def fail(self) -> None:
        raise NotImplementedError


class SegfaultsOnRank1(_FailsOnRank1):
    def fail(self) -> None:
        import ctypes

        ctypes.string_at(0)  # a real SIGSEGV


class HangsOnRank1(_FailsOnRank1):
    def fail(self) -> None:
        import time

        time.sleep(3600)


class RaisesOnRank1(_FailsOnRank1):
    def fail(self) -> None:
        raise RuntimeError("rank 1 refuses this batch")

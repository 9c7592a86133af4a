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

"""Undoing a recipe's normalization in tests: batches back to 0-255 values."""

from __future__ import annotations

import torch

from autotune.pipeline.recipes import Recipe


def to_pixels(batch: torch.Tensor, recipe: Recipe) -> torch.Tensor:
    """``(B, 3, H, W)`` normalized floats (on the CPU) as 0-255 values again."""
    mean = torch.tensor(recipe.mean).view(1, 3, 1, 1) * 255
    std = torch.tensor(recipe.std).view(1, 3, 1, 1) * 255
    return batch * std + mean

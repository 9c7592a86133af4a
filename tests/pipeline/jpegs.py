"""Helpers for the pipeline tests: JPEG bytes from patterns, how far two images are, and the
first batches of a loader."""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image

from autotune.pipeline import loader
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.recipes import Recipe
from autotune.pipeline.sources import Source


def mad(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean absolute difference, in 0-255 units."""
    return (a.float() - b.float()).abs().mean().item()


def pattern(width: int, height: int) -> Image.Image:
    """Gradients along both axes plus noise: any flip or rotation changes it a lot."""
    rng = np.random.default_rng(0)
    x = np.broadcast_to(np.linspace(0, 255, width)[None, :], (height, width))
    y = np.broadcast_to(np.linspace(0, 255, height)[:, None], (height, width))
    noise = rng.uniform(0, 60, (height, width))
    return Image.fromarray(np.stack([x, y, noise], axis=-1).astype(np.uint8), "RGB")


def jpeg(img: Image.Image, *, quality: int = 95, **save: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality, **save)
    return buf.getvalue()


def exif_jpeg(orientation: int, size: tuple[int, int] = (400, 240)) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return jpeg(pattern(*size), exif=exif)


def first_batches(source: Source, config: PipelineConfig, recipe: Recipe, n: int = 2) -> list:
    """The first ``n`` batches of the loader ``config`` builds, in the source's order."""
    tuned = loader.build(source, config, recipe=recipe, seed=0, sampler=range(len(source)))
    out = []
    for batch in tuned:
        out.append(batch)
        if len(out) == n:
            return out
    return out

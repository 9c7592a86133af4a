"""One sample's way through the loader's stages, each piece charged to its stage on a
``StageClock``: the tuner's decode and recipe, the user's pipeline as it is, or a decoded
copy's pixels. ``autotune.runtime.stages`` times samples with these."""

from __future__ import annotations

import functools
import io
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from PIL import Image
from torchvision.transforms import v2

from autotune.pipeline import decoders
from autotune.pipeline.config import AS_IS
from autotune.pipeline.recipes import Recipe, largest_reduction

LOADER_STAGES = ("read", "decode", "augment", "collate")
# one sample's decode and augment, each charged to its stage: (image, width, height), from
# its bytes (or a decoded copy's pixels)
SampleStages = Callable[[Any, "StageClock"], tuple[torch.Tensor, int, int]]


class StageClock:
    """Adds the CPU and wall seconds since the last ``lap`` (or ``reset``) to a stage."""

    def __init__(self, stages: Sequence[str] = LOADER_STAGES) -> None:
        self.cpu: dict[str, float] = dict.fromkeys(stages, 0.0)
        self.wall: dict[str, float] = dict.fromkeys(stages, 0.0)
        self.reset()

    def reset(self) -> None:
        self._cpu, self._wall = time.thread_time(), time.perf_counter()

    def add(self, other: StageClock) -> None:
        """Adds the stage times ``other`` has charged."""
        for stage in self.cpu:
            self.cpu[stage] += other.cpu[stage]
            self.wall[stage] += other.wall[stage]

    def lap(self, stage: str) -> float:
        """Charges the time since the last lap to ``stage``; returns its wall seconds."""
        cpu, wall = time.thread_time(), time.perf_counter()
        spent = wall - self._wall
        self.cpu[stage] += cpu - self._cpu
        self.wall[stage] += spent
        self._cpu, self._wall = cpu, wall
        return spent


def decode_and_augment(
    recipe: Recipe, decoder: decoders.Decoder, data: bytes, clock: StageClock
) -> tuple[torch.Tensor, int, int]:
    """``recipe(data, decoder)``, piece by piece, each charged to its stage.

    The header probe and the decode (with its DCT reduction and EXIF orientation) are
    decode; drawing the random plan and applying it are augment. Returns the image and the
    full size (width, height).
    """
    width, height, orientation = decoders.probe(data)
    clock.lap("decode")
    plan = recipe.plan(width, height)
    clock.lap("augment")
    reduce = largest_reduction(plan.region, plan.needed) if decoder.can_reduce else 1
    image = decoder.decode(data, reduce=reduce)
    if not decoder.applies_orientation:
        image = decoders.orient(image, orientation)
    clock.lap("decode")
    out = recipe.apply(image, plan, scale=(image.shape[-2] / height, image.shape[-1] / width))
    clock.lap("augment")
    return out, width, height


def augment_pixels(
    recipe: Recipe, pixels: torch.Tensor, clock: StageClock
) -> tuple[torch.Tensor, int, int]:
    """A decoded copy's sample: no decode; the recipe on the pixels (touching the mapped
    pages, so a page read from storage is charged here, as in the loader)."""
    out = recipe.from_pixels(pixels)
    clock.lap("augment")
    return out, pixels.shape[-1], pixels.shape[-2]


def tutorial_decode_and_augment(
    transform: v2.Compose, data: bytes, clock: StageClock
) -> tuple[torch.Tensor, int, int]:
    """The tutorial's sample: decoded as ImageFolder's PIL loader does (no EXIF orientation),
    then the recipe's transforms.v2 (crop, flip, to tensor, normalize) as augment."""
    with Image.open(io.BytesIO(data)) as opened:
        image = opened.convert("RGB")
    clock.lap("decode")
    out = transform(image)
    clock.lap("augment")
    return out, image.width, image.height


def sample_stages(recipe: Recipe, decoder_name: str, *, decoded: bool = False) -> SampleStages:
    """How one sample is decoded and augmented: the tuner's decoder and recipe, the
    user's pipeline as it is (``AS_IS``), or a decoded copy's pixels (``decoded``)."""
    if decoded:
        return functools.partial(augment_pixels, recipe)
    if decoder_name == AS_IS:
        return functools.partial(tutorial_decode_and_augment, recipe.tutorial_transform())
    return functools.partial(decode_and_augment, recipe, decoders.get(decoder_name))

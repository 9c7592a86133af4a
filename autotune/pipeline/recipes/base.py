"""What every recipe is: the worker form (``plan`` then ``apply``, per sample on uint8 tensors),
the device form (per batch, after the copy) and the DALI form (operators in DALI's graph).

A recipe also tells a reducing decoder how far it may scale down: the crop (or resize) is
planned on the header's size first, so a reduced decode never goes below the pixels the
output needs. Normalization is not here: batches cross to the device as uint8 (4x fewer
bytes) and ``device_stage.DeviceStage`` normalizes them there.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torchvision.transforms import v2

from autotune.pipeline import decoders
from autotune.schema import RecipeConfig

_REDUCTIONS = (8, 4, 2)


def largest_reduction(available: tuple[int, int], needed: tuple[int, int]) -> int:
    """The largest DCT scale 1/r that keeps ``available`` (h, w) pixels >= ``needed`` (h, w)."""
    for r in _REDUCTIONS:
        if available[0] // r >= needed[0] and available[1] // r >= needed[1]:
            return r
    return 1


def scaled_size(width: int, height: int, scale: float) -> tuple[int, int]:
    """(width, height) times ``scale``, rounded up: never smaller than asked, never larger
    than it was."""
    if scale >= 1:
        return width, height
    return min(width, math.ceil(width * scale)), min(height, math.ceil(height * scale))


@dataclass(frozen=True)
class Plan:
    top: int
    left: int
    height: int
    width: int
    flip: bool
    region: tuple[int, int]  # (h, w) full-size pixels the output is made from
    needed: tuple[int, int]  # (h, w) the region may shrink to at decode, and no further

    def scaled_box(
        self, scale: tuple[float, float], image_size: tuple[int, int]
    ) -> tuple[int, int, int, int]:
        """The box in a decoded image ``scale`` times the full size, kept inside the image."""
        sy, sx = scale
        h = min(image_size[0], max(1, round(self.height * sy)))
        w = min(image_size[1], max(1, round(self.width * sx)))
        top = max(0, min(round(self.top * sy), image_size[0] - h))
        left = max(0, min(round(self.left * sx), image_size[1] - w))
        return top, left, h, w


def decode(
    data: bytes, decoder: decoders.Decoder, orientation: int, plan: Plan | None
) -> torch.Tensor:
    """Decodes as far reduced as ``plan`` allows (not at all without one), then orients."""
    reduce = 1
    if plan is not None and decoder.can_reduce:
        reduce = largest_reduction(plan.region, plan.needed)
    image = decoder.decode(data, reduce=reduce)
    return image if decoder.applies_orientation else decoders.orient(image, orientation)


class DeviceAugment(ABC):
    """A recipe's device form: turns a list of ``uint8 (3, H, W)`` images on one device into a
    float batch ``(B, 3, crop, crop)`` of 0-255 values (normalization follows in
    ``device_stage.DeviceStage``).

    Random parameters are drawn from this object's own RNG stream: reproducible from the
    loader seed, and never touching the training script's global RNG. The same code runs on a
    CPU device, which is how its equivalence with the worker form is tested without a GPU.
    """

    def __init__(self, recipe: Recipe, *, seed: int | None) -> None:
        self.recipe = recipe
        generator = torch.Generator()
        if seed is not None:
            generator.manual_seed(seed)
        else:
            generator.seed()
        self._rng_state = generator.get_state()

    @contextmanager
    def own_rng(self) -> Iterator[None]:
        """Runs kornia's generators (which draw from torch's global CPU RNG) on this object's
        stream, leaving the caller's RNG as it was."""
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self._rng_state)
            yield
            self._rng_state = torch.get_rng_state()

    @abstractmethod
    def __call__(self, images: Sequence[torch.Tensor]) -> torch.Tensor: ...


class Recipe(ABC):
    """Decode + augment one encoded image into a ``uint8`` ``(3, crop, crop)`` tensor."""

    name: str
    # the plan has no random part: it can be made in the workers even when the ops run on
    # the device, so a reduced decode stays possible there
    deterministic: bool = False

    def __init__(
        self,
        *,
        crop_size: int,
        mean: tuple[float, ...] = (0.485, 0.456, 0.406),
        std: tuple[float, ...] = (0.229, 0.224, 0.225),
    ) -> None:
        self.crop_size = crop_size
        self.mean = tuple(mean)
        self.std = tuple(std)

    @classmethod
    def from_config(cls, recipe_conf: RecipeConfig) -> Recipe:
        """The recipe with the settings of the ``recipe`` config group; a recipe with settings
        of its own adds them."""
        return cls(**cls.common_settings(recipe_conf))

    @staticmethod
    def common_settings(recipe_conf: RecipeConfig) -> dict[str, Any]:
        return {
            "crop_size": recipe_conf.crop_size,
            "mean": tuple(recipe_conf.mean),
            "std": tuple(recipe_conf.std),
        }

    def __call__(self, data: bytes, decoder: decoders.Decoder) -> torch.Tensor:
        width, height, orientation = decoders.probe(data)
        plan = self.plan(width, height)
        image = decode(data, decoder, orientation, plan)
        # a reduced decode is ~1/r of the size: rescale the planned box to what came back
        return self.apply(image, plan, scale=(image.shape[-2] / height, image.shape[-1] / width))

    def from_pixels(self, image: torch.Tensor) -> torch.Tensor:
        """The recipe on an image already decoded (a prepared copy's pixels), planned on its
        size."""
        plan = self.plan(image.shape[-1], image.shape[-2])
        return self.apply(image, plan, scale=(1.0, 1.0))

    def prepared_size(self, width: int, height: int) -> tuple[int, int]:
        """The smallest (width, height) an image may be prepared at once, for every epoch:
        every plan drawn on it keeps the pixels its output needs. Default: all of them."""
        return width, height

    def settings(self) -> dict[str, Any]:
        """What decides the pixels the recipe makes (a prepared copy is keyed by it)."""
        plain = (int, float, str, list, tuple)
        return {"name": self.name, **{k: v for k, v in vars(self).items() if isinstance(v, plain)}}

    def decode_for_device(self, data: bytes, decoder: decoders.Decoder) -> torch.Tensor:
        """The whole image, for augmentation on the device (``augment_on=gpu``).

        Reduced only when the plan is deterministic: random crops are drawn on the device, and
        a small crop of a reduced image would have fewer pixels than the recipe promises.
        """
        width, height, orientation = decoders.probe(data)
        plan = self.plan(width, height) if self.deterministic else None
        return decode(data, decoder, orientation, plan)

    @abstractmethod
    def plan(self, width: int, height: int) -> Plan:
        """Draws the random parameters on the full-size image (before decoding)."""

    @abstractmethod
    def apply(
        self, image: torch.Tensor, plan: Plan, *, scale: tuple[float, float]
    ) -> torch.Tensor:
        """Applies the planned ops to the decoded image (``scale``: decoded / full size)."""

    def device_form(self, *, seed: int | None) -> DeviceAugment:
        """The same recipe per batch on the device (``augment_on=gpu``)."""
        raise TypeError(f"no device placement for recipe {self.name!r}")

    def dali_ops(
        self, fn: Any, types: Any, jpegs: Any, *, decode_on: str, ops_on: str
    ) -> tuple[Any, Any]:
        """The recipe as DALI operators on the encoded ``jpegs``: ``(images, mirror)``.

        ``fn`` and ``types`` are ``nvidia.dali.fn`` and ``nvidia.dali.types`` (imported only
        where DALI runs). The images come out at least ``crop_size`` on each side; DALI's
        ``crop_mirror_normalize`` takes the centred crop, mirrors where ``mirror`` is 1 and
        normalizes.
        """
        raise TypeError(f"no DALI graph for recipe {self.name!r}")

    def tutorial_transform(self) -> v2.Compose:
        """The recipe as the PyTorch tutorial writes it, on PIL images: its crop
        (``tutorial_ops``), then ``ToImage``, ``ToDtype(float32, scale=True)``, ``Normalize``."""
        return v2.Compose(
            [
                *self.tutorial_ops(),
                v2.ToImage(),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(list(self.mean), list(self.std)),
            ]
        )

    def tutorial_ops(self) -> list[Any]:
        """The recipe's crop (and flip) as ``torchvision.transforms.v2`` ops."""
        raise ValueError(f"no tutorial pipeline for recipe {self.name!r}")

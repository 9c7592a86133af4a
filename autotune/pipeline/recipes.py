"""Augmentation recipes: fixed semantics, applied per sample on uint8 tensors in the workers.

A recipe also tells a reducing decoder how far it may scale down: the crop (or resize) is
planned on the header's size first, so a reduced decode never goes below the pixels the
output needs. Normalization is not here: batches cross to the device as uint8 (4x fewer
bytes) and ``loader.DeviceStage`` normalizes them there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from autotune.errors import UsageError
from autotune.pipeline import decoders
from autotune.schema import RecipeConfig

_REDUCTIONS = (8, 4, 2)


def largest_reduction(available: tuple[int, int], needed: tuple[int, int]) -> int:
    """The largest DCT scale 1/r that keeps ``available`` (h, w) pixels >= ``needed`` (h, w)."""
    for r in _REDUCTIONS:
        if available[0] // r >= needed[0] and available[1] // r >= needed[1]:
            return r
    return 1


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

    def __call__(self, data: bytes, decoder: decoders.Decoder) -> torch.Tensor:
        width, height, orientation = decoders.probe(data)
        plan = self.plan(width, height)
        image = _decode(data, decoder, orientation, plan)
        # a reduced decode is ~1/r of the size: rescale the planned box to what came back
        return self.apply(image, plan, scale=(image.shape[-2] / height, image.shape[-1] / width))

    def decode_for_device(self, data: bytes, decoder: decoders.Decoder) -> torch.Tensor:
        """The whole image, for augmentation on the device (``augment_on=gpu``).

        Reduced only when the plan is deterministic: random crops are drawn on the device, and
        a small crop of a reduced image would have fewer pixels than the recipe promises.
        """
        width, height, orientation = decoders.probe(data)
        plan = self.plan(width, height) if self.deterministic else None
        return _decode(data, decoder, orientation, plan)

    @abstractmethod
    def plan(self, width: int, height: int) -> Plan:
        """Draws the random parameters on the full-size image (before decoding)."""

    @abstractmethod
    def apply(
        self, image: torch.Tensor, plan: Plan, *, scale: tuple[float, float]
    ) -> torch.Tensor:
        """Applies the planned ops to the decoded image (``scale``: decoded / full size)."""


def _decode(
    data: bytes, decoder: decoders.Decoder, orientation: int, plan: Plan | None
) -> torch.Tensor:
    reduce = 1
    if plan is not None and decoder.can_reduce:
        reduce = largest_reduction(plan.region, plan.needed)
    image = decoder.decode(data, reduce=reduce)
    return image if decoder.applies_orientation else decoders.orient(image, orientation)


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


class ImagenetTrain(Recipe):
    """RandomResizedCrop(crop_size, scale, ratio), horizontal flip with ``flip_p``."""

    name = "imagenet_train"

    def __init__(
        self,
        *,
        crop_size: int,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        flip_p: float = 0.5,
        **kwargs: tuple[float, ...],
    ) -> None:
        super().__init__(crop_size=crop_size, **kwargs)
        self.scale, self.ratio, self.flip_p = list(scale), list(ratio), flip_p

    def plan(self, width: int, height: int) -> Plan:
        # torchvision's own sampler, on a zero-storage stand-in of the full-size image
        stand_in = torch.empty((), dtype=torch.uint8).expand(3, height, width)
        top, left, h, w = v2.RandomResizedCrop.get_params(stand_in, self.scale, self.ratio)
        flip = bool(torch.rand(()) < self.flip_p)
        needed = (min(h, self.crop_size), min(w, self.crop_size))
        return Plan(top, left, h, w, flip, region=(h, w), needed=needed)

    def apply(
        self, image: torch.Tensor, plan: Plan, *, scale: tuple[float, float]
    ) -> torch.Tensor:
        top, left, h, w = plan.scaled_box(scale, (image.shape[-2], image.shape[-1]))
        size = [self.crop_size, self.crop_size]
        out = F.resized_crop(image, top, left, h, w, size=size, antialias=True)
        return F.horizontal_flip(out) if plan.flip else out


class CenterCropEval(Recipe):
    """Resize the shorter side to ``resize_size`` (default crop * 256/224), centre crop."""

    name = "center_crop_eval"
    deterministic = True

    def __init__(
        self, *, crop_size: int, resize_size: int | None = None, **kwargs: tuple[float, ...]
    ) -> None:
        super().__init__(crop_size=crop_size, **kwargs)
        self.resize_size = resize_size or round(crop_size * 256 / 224)

    def plan(self, width: int, height: int) -> Plan:
        short = min(width, height)
        # the decode may shrink the image until its shorter side reaches resize_size
        needed = (
            max(1, height * self.resize_size // short),
            max(1, width * self.resize_size // short),
        )
        return Plan(0, 0, height, width, False, region=(height, width), needed=needed)

    def apply(
        self, image: torch.Tensor, plan: Plan, *, scale: tuple[float, float]
    ) -> torch.Tensor:
        out = F.resize(image, self.resize_size, antialias=True)
        return F.center_crop(out, [self.crop_size, self.crop_size])


RECIPES: dict[str, type[Recipe]] = {cls.name: cls for cls in (ImagenetTrain, CenterCropEval)}


def from_config(cfg: RecipeConfig) -> Recipe:
    """A recipe from the ``recipe`` config group."""
    common = {"crop_size": cfg.crop_size, "mean": tuple(cfg.mean), "std": tuple(cfg.std)}
    if cfg.name == "imagenet_train":
        scale, ratio = (cfg.scale[0], cfg.scale[1]), (cfg.ratio[0], cfg.ratio[1])
        return ImagenetTrain(scale=scale, ratio=ratio, flip_p=cfg.flip_p, **common)
    if cfg.name == "center_crop_eval":
        return CenterCropEval(resize_size=cfg.resize_size, **common)
    raise UsageError(f"unknown recipe {cfg.name!r}: choose one of {', '.join(sorted(RECIPES))}")

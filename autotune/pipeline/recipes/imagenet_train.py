"""``imagenet_train``: RandomResizedCrop then a horizontal flip, in the workers, on the device
or in DALI's graph."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import kornia.augmentation as K
import torch
import torch.nn.functional as F
from kornia.augmentation.random_generator import ResizedCropGenerator
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from autotune.pipeline.recipes.base import DeviceAugment, Plan, Recipe, scaled_size
from autotune.schema import RecipeConfig


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

    @classmethod
    def from_config(cls, recipe_conf: RecipeConfig) -> ImagenetTrain:
        scale, ratio = (
            (recipe_conf.scale[0], recipe_conf.scale[1]),
            (recipe_conf.ratio[0], recipe_conf.ratio[1]),
        )
        return cls(
            scale=scale, ratio=ratio, flip_p=recipe_conf.flip_p, **cls.common_settings(recipe_conf)
        )

    def plan(self, width: int, height: int) -> Plan:
        # torchvision's own sampler, on a zero-storage stand-in of the full-size image
        stand_in = torch.empty((), dtype=torch.uint8).expand(3, height, width)
        top, left, h, w = v2.RandomResizedCrop.get_params(stand_in, self.scale, self.ratio)
        flip = bool(torch.rand(()) < self.flip_p)
        needed = (min(h, self.crop_size), min(w, self.crop_size))
        return Plan(top, left, h, w, flip, region=(h, w), needed=needed)

    def prepared_size(self, width: int, height: int) -> tuple[int, int]:
        # the smallest crop (the least area, the most extreme ratio) keeps crop_size pixels
        # on its shorter side: no crop of the copy is ever upsampled where the original
        # had the pixels
        area = self.scale[0] * width * height
        shortest = min(math.sqrt(area / self.ratio[1]), math.sqrt(area * self.ratio[0]))
        return scaled_size(width, height, self.crop_size / shortest)

    def apply(
        self, image: torch.Tensor, plan: Plan, *, scale: tuple[float, float]
    ) -> torch.Tensor:
        top, left, h, w = plan.scaled_box(scale, (image.shape[-2], image.shape[-1]))
        size = [self.crop_size, self.crop_size]
        out = TF.resized_crop(image, top, left, h, w, size=size, antialias=True)
        return TF.horizontal_flip(out) if plan.flip else out

    def device_form(self, *, seed: int | None) -> DeviceTrain:
        return DeviceTrain(self, seed=seed)

    def tutorial_ops(self) -> list[Any]:
        return [
            v2.RandomResizedCrop(
                self.crop_size, scale=tuple(self.scale), ratio=tuple(self.ratio), antialias=True
            ),
            v2.RandomHorizontalFlip(self.flip_p),
        ]

    def dali_ops(
        self, fn: Any, types: Any, jpegs: Any, *, decode_on: str, ops_on: str
    ) -> tuple[Any, Any]:
        # decodes only the crop's region, then resizes it to the crop size
        images = fn.decoders.image_random_crop(
            jpegs,
            device=decode_on,
            output_type=types.RGB,
            random_area=list(self.scale),
            random_aspect_ratio=list(self.ratio),
        )
        crop = [self.crop_size, self.crop_size]
        images = fn.resize(images, device=ops_on, size=crop, antialias=True)
        return images, fn.random.coin_flip(probability=self.flip_p)


class DeviceTrain(DeviceAugment):
    """The crops and flips drawn per sample by kornia's generators.

    Workers hand over whole decoded images of different sizes, so the crop and resize run per
    sample (views and one interpolation each); the flip runs once per batch.
    """

    recipe: ImagenetTrain

    def __init__(self, recipe: ImagenetTrain, *, seed: int | None) -> None:
        super().__init__(recipe, seed=seed)
        size = (recipe.crop_size, recipe.crop_size)
        self._crops = ResizedCropGenerator(
            size, scale=tuple(recipe.scale), ratio=tuple(recipe.ratio)
        )
        self._flip = K.RandomHorizontalFlip(p=recipe.flip_p)

    def draw_boxes(self, sizes: Sequence[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
        """One ``(top, left, height, width)`` crop box per ``(H, W)`` image size."""
        boxes = []
        with self.own_rng():
            for height, width in sizes:
                corners = self._crops((1, 3, height, width))["src"][0]  # (4, 2): x, y
                (left, top), (right, bottom) = corners[0].tolist(), corners[2].tolist()
                boxes.append((int(top), int(left), int(bottom - top) + 1, int(right - left) + 1))
        return boxes

    def __call__(self, images: Sequence[torch.Tensor]) -> torch.Tensor:
        size = (self.recipe.crop_size, self.recipe.crop_size)
        boxes = self.draw_boxes([(img.shape[-2], img.shape[-1]) for img in images])
        crops = [
            # antialiased like the worker form (torchvision's resized_crop)
            F.interpolate(
                img[None, :, top : top + h, left : left + w].float(),
                size=size,
                mode="bilinear",
                align_corners=False,
                antialias=True,
            )
            for img, (top, left, h, w) in zip(images, boxes, strict=True)
        ]
        with self.own_rng():
            return self._flip(torch.cat(crops))

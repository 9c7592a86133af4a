"""``center_crop_eval``: resize the shorter side, centre crop, in the workers, on the device or
in DALI's graph."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from autotune.pipeline.recipes.base import DeviceAugment, Plan, Recipe
from autotune.schema import RecipeConfig


class CenterCropEval(Recipe):
    """Resize the shorter side to ``resize_size`` (default crop * 256/224), centre crop."""

    name = "center_crop_eval"
    deterministic = True

    def __init__(
        self, *, crop_size: int, resize_size: int | None = None, **kwargs: tuple[float, ...]
    ) -> None:
        super().__init__(crop_size=crop_size, **kwargs)
        self.resize_size = resize_size or round(crop_size * 256 / 224)

    @classmethod
    def from_config(cls, recipe_conf: RecipeConfig) -> CenterCropEval:
        return cls(resize_size=recipe_conf.resize_size, **cls.common_settings(recipe_conf))

    def plan(self, width: int, height: int) -> Plan:
        short = min(width, height)
        # the decode may shrink the image until its shorter side reaches resize_size
        needed = (
            max(1, height * self.resize_size // short),
            max(1, width * self.resize_size // short),
        )
        return Plan(0, 0, height, width, False, region=(height, width), needed=needed)

    def prepared_size(self, width: int, height: int) -> tuple[int, int]:
        # the size apply's resize makes, as torchvision computes it: apply's resize then
        # leaves a prepared image as it is
        short, long = sorted((width, height))
        if short <= self.resize_size:
            return width, height
        other = int(self.resize_size * long / short)
        return (self.resize_size, other) if width <= height else (other, self.resize_size)

    def apply(
        self, image: torch.Tensor, plan: Plan, *, scale: tuple[float, float]
    ) -> torch.Tensor:
        out = TF.resize(image, self.resize_size, antialias=True)
        return TF.center_crop(out, [self.crop_size, self.crop_size])

    def device_form(self, *, seed: int | None) -> DeviceEval:
        return DeviceEval(self, seed=seed)

    def tutorial_ops(self) -> list[Any]:
        return [v2.Resize(self.resize_size), v2.CenterCrop(self.crop_size)]

    def dali_ops(
        self, fn: Any, types: Any, jpegs: Any, *, decode_on: str, ops_on: str
    ) -> tuple[Any, Any]:
        images = fn.decoders.image(jpegs, device=decode_on, output_type=types.RGB)
        images = fn.resize(images, device=ops_on, resize_shorter=self.resize_size, antialias=True)
        return images, 0  # never mirrored


class DeviceEval(DeviceAugment):
    """Deterministic: the same torchvision ops as the worker form, so the pixels agree up to
    uint8 rounding."""

    recipe: CenterCropEval

    def __call__(self, images: Sequence[torch.Tensor]) -> torch.Tensor:
        crop = [self.recipe.crop_size, self.recipe.crop_size]
        return torch.stack(
            [
                TF.center_crop(TF.resize(img, self.recipe.resize_size, antialias=True), crop)
                for img in images
            ]
        ).float()

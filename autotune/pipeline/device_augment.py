"""The recipes on the device (``augment_on=gpu``): per batch, after transfer, with per-sample
random parameters.

Workers hand over whole decoded images of different sizes, so the crop and resize run per
sample (views and one interpolation each); everything batch-shaped after that (flip,
normalization) runs once per batch. Random parameters come from kornia's generators, drawn
from this object's own RNG stream: reproducible from the loader seed, and never touching the
training script's global RNG. The same code runs on a CPU device, which is how its
equivalence with the worker placement is tested without a GPU.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import kornia.augmentation as K
import torch
import torch.nn.functional as F
from kornia.augmentation.random_generator import ResizedCropGenerator
from torchvision.transforms.v2 import functional as TF

from autotune.pipeline.recipes import CenterCropEval, ImagenetTrain, Recipe


class DeviceAugment(ABC):
    """Turns a list of ``uint8 (3, H, W)`` images on one device into a float batch
    ``(B, 3, crop, crop)`` of 0-255 values (normalization follows in ``loader.DeviceStage``)."""

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


class DeviceTrain(DeviceAugment):
    """``imagenet_train``: RandomResizedCrop then horizontal flip, parameters per sample."""

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
            # antialiased like the worker placement (torchvision's resized_crop)
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


class DeviceEval(DeviceAugment):
    """``center_crop_eval``: resize the shorter side, centre crop. Deterministic: the same
    torchvision ops as the worker placement, so the pixels agree up to uint8 rounding."""

    recipe: CenterCropEval

    def __call__(self, images: Sequence[torch.Tensor]) -> torch.Tensor:
        crop = [self.recipe.crop_size, self.recipe.crop_size]
        return torch.stack(
            [
                TF.center_crop(TF.resize(img, self.recipe.resize_size, antialias=True), crop)
                for img in images
            ]
        ).float()


def for_recipe(recipe: Recipe, *, seed: int | None) -> DeviceAugment:
    if isinstance(recipe, ImagenetTrain):
        return DeviceTrain(recipe, seed=seed)
    if isinstance(recipe, CenterCropEval):
        return DeviceEval(recipe, seed=seed)
    raise TypeError(f"no device placement for recipe {recipe.name!r}")

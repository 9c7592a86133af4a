"""Augmentation recipes: fixed semantics, each in one module with its three forms (workers,
device, DALI). A new recipe is one module plus one line in ``RECIPES``."""

from __future__ import annotations

from autotune.errors import UsageError
from autotune.pipeline.recipes.base import DeviceAugment, Plan, Recipe, largest_reduction
from autotune.pipeline.recipes.center_crop_eval import CenterCropEval
from autotune.pipeline.recipes.imagenet_train import ImagenetTrain
from autotune.schema import RecipeConfig

RECIPES: dict[str, type[Recipe]] = {cls.name: cls for cls in (ImagenetTrain, CenterCropEval)}


def from_config(recipe_conf: RecipeConfig) -> Recipe:
    """A recipe from the ``recipe`` config group."""
    if recipe_conf.name not in RECIPES:
        choices = ", ".join(sorted(RECIPES))
        raise UsageError(f"unknown recipe {recipe_conf.name!r}: choose one of {choices}")
    return RECIPES[recipe_conf.name].from_config(recipe_conf)


__all__ = [
    "RECIPES",
    "CenterCropEval",
    "DeviceAugment",
    "ImagenetTrain",
    "Plan",
    "Recipe",
    "from_config",
    "largest_reduction",
]

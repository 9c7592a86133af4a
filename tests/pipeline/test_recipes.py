"""Tests for autotune.pipeline.recipes: the worker form of each recipe (plan, reduced decode,
apply), and the registry that builds recipes from the config.

Measured on this machine: CenterCropEval(224) on the 1920x1080 images through a 1/4 reduced
decode differs from full decode + resize by 1.75 and 2.14 (mean absolute, 0-255).
"""

from __future__ import annotations

import pytest
import torch
from jpegs import jpeg, mad, pattern
from torchvision.transforms import v2

from autotune.errors import UsageError
from autotune.pipeline import decoders, recipes
from autotune.pipeline.recipes.base import Plan
from autotune.pipeline.sources import Source
from autotune.schema import RecipeConfig


def test_largest_reduction_never_goes_below_the_needed_size() -> None:
    sides = [1, 7, 8, 15, 16, 63, 64, 65, 224, 255, 256, 257, 480, 1080, 1920, 4000]
    for ah in sides:
        for aw in sides:
            for nh in sides:
                for nw in sides:
                    if nh > ah or nw > aw:
                        continue  # the needed size is a part of what is there
                    r = recipes.largest_reduction((ah, aw), (nh, nw))
                    assert r in (1, 2, 4, 8)
                    assert ah // r >= nh and aw // r >= nw
                    if r < 8:  # the largest: the next scale would go below
                        assert ah // (2 * r) < nh or aw // (2 * r) < nw


def test_reduced_decode_keeps_the_pixels_a_recipe_needs(hd_set: Source) -> None:
    recipe = recipes.CenterCropEval(crop_size=224)
    for size in [(1920, 1080), (1001, 667), (667, 1001), (300, 300)]:
        data = hd_set.read(0) if size == (1920, 1080) else jpeg(pattern(*size))
        plan = recipe.plan(*size)
        r = recipes.largest_reduction(plan.region, plan.needed)
        _, h, w = decoders.get("pil_reduced").decode(data, reduce=r).shape
        assert h >= plan.needed[0] and w >= plan.needed[1], (size, r)
        assert min(h, w) >= recipe.resize_size or r == 1


def test_center_crop_eval_reduced_matches_full_decode(hd_set: Source) -> None:
    recipe = recipes.CenterCropEval(crop_size=224)
    assert recipes.largest_reduction((1080, 1920), recipe.plan(1920, 1080).needed) == 4
    for index in range(len(hd_set)):
        data = hd_set.read(index)
        full = recipe(data, decoders.get("pil"))
        reduced = recipe(data, decoders.get("pil_reduced"))
        assert reduced.shape == full.shape == (3, 224, 224)
        assert reduced.dtype == torch.uint8
        assert mad(reduced, full) < 4.0  # measured 1.75 and 2.14


def test_imagenet_train_reduced_stays_close_to_full_decode(hd_set: Source) -> None:
    recipe = recipes.ImagenetTrain(crop_size=224)
    worst = 0.0
    for index in range(len(hd_set)):
        data = hd_set.read(index)
        for seed in range(6):
            torch.manual_seed(seed)
            full = recipe(data, decoders.get("pil"))
            torch.manual_seed(seed)
            reduced = recipe(data, decoders.get("pil_reduced"))
            assert reduced.shape == full.shape
            worst = max(worst, mad(reduced, full))
    # measured worst 8.0 (the box origin is truncated, not rounded, in Plan.scaled_box)
    assert worst < 10.0


def test_imagenet_train_output(small_set: Source) -> None:
    recipe = recipes.ImagenetTrain(crop_size=64)
    for index in range(4):
        image = recipe(small_set.read(index), decoders.get("pil"))
        assert image.shape == (3, 64, 64) and image.dtype == torch.uint8


def test_imagenet_train_flips_half_the_time() -> None:
    recipe = recipes.ImagenetTrain(crop_size=64)
    torch.manual_seed(0)
    flips = [recipe.plan(500, 375).flip for _ in range(400)]
    assert 0.42 < sum(flips) / len(flips) < 0.58
    never = recipes.ImagenetTrain(crop_size=64, flip_p=0.0)
    assert not any(never.plan(500, 375).flip for _ in range(50))


def test_imagenet_train_flip_mirrors_the_same_crop(small_set: Source) -> None:
    data = small_set.read(0)
    torch.manual_seed(3)
    plain = recipes.ImagenetTrain(crop_size=48, flip_p=0.0)(data, decoders.get("pil"))
    torch.manual_seed(3)
    flipped = recipes.ImagenetTrain(crop_size=48, flip_p=1.0)(data, decoders.get("pil"))
    assert torch.equal(flipped, plain.flip(-1))


# --- the registry -----------------------------------------------------------------------------


def test_registry_names_every_recipe() -> None:
    assert {
        "imagenet_train": recipes.ImagenetTrain,
        "center_crop_eval": recipes.CenterCropEval,
    } == recipes.RECIPES


def test_from_config_passes_each_recipes_settings() -> None:
    train = recipes.from_config(
        RecipeConfig(crop_size=96, scale=[0.2, 0.9], ratio=[0.5, 2.0], flip_p=0.25, std=[1, 1, 1])
    )
    assert isinstance(train, recipes.ImagenetTrain)
    assert (train.crop_size, train.scale, train.ratio, train.flip_p) == (
        96,
        [0.2, 0.9],
        [0.5, 2.0],
        0.25,
    )
    assert train.mean == (0.485, 0.456, 0.406) and train.std == (1, 1, 1)
    evaluation = recipes.from_config(RecipeConfig(name="center_crop_eval", crop_size=112))
    assert isinstance(evaluation, recipes.CenterCropEval)
    assert (evaluation.crop_size, evaluation.resize_size) == (112, 128)
    sized = recipes.from_config(RecipeConfig(name="center_crop_eval", resize_size=300))
    assert sized.resize_size == 300


def test_from_config_refuses_an_unknown_recipe() -> None:
    with pytest.raises(UsageError) as info:
        recipes.from_config(RecipeConfig(name="mixup"))
    assert str(info.value) == (
        "unknown recipe 'mixup': choose one of center_crop_eval, imagenet_train"
    )


class _RedCorner(recipes.Recipe):
    """A user's own recipe, with a worker form only."""

    name = "red_corner"

    def plan(self, width: int, height: int) -> Plan:
        return Plan(0, 0, height, width, False, region=(height, width), needed=(height, width))

    def apply(
        self, image: torch.Tensor, plan: Plan, *, scale: tuple[float, float]
    ) -> torch.Tensor:
        return image[:1, : self.crop_size, : self.crop_size]


def test_a_recipe_with_a_worker_form_only(small_set: Source) -> None:
    recipe = _RedCorner.from_config(RecipeConfig(crop_size=16))
    assert recipe(small_set.read(0), decoders.get("pil")).shape == (1, 16, 16)
    with pytest.raises(TypeError, match="no device placement for recipe 'red_corner'"):
        recipe.device_form(seed=0)
    with pytest.raises(TypeError, match="no DALI graph for recipe 'red_corner'"):
        recipe.dali_ops(None, None, None, decode_on="cpu", ops_on="cpu")


def test_the_tutorial_transform_is_the_recipe_in_transforms_v2():
    train = recipes.from_config(RecipeConfig(crop_size=224, flip_p=0.3)).tutorial_transform()
    crop, flip, to_image, to_dtype, normalize = train.transforms
    assert isinstance(crop, v2.RandomResizedCrop) and crop.size == (224, 224)
    assert crop.scale == (0.08, 1.0) and crop.ratio == pytest.approx((0.75, 4 / 3))
    assert crop.antialias is True
    assert isinstance(flip, v2.RandomHorizontalFlip) and flip.p == 0.3
    assert isinstance(to_image, v2.ToImage) and isinstance(normalize, v2.Normalize)
    assert to_dtype.dtype == torch.float32 and to_dtype.scale is True
    assert normalize.mean == [0.485, 0.456, 0.406]
    evaluation = recipes.from_config(
        RecipeConfig(name="center_crop_eval", crop_size=224)
    ).tutorial_transform()
    resize, center = evaluation.transforms[:2]
    assert isinstance(resize, v2.Resize) and resize.size == [256]
    assert isinstance(center, v2.CenterCrop) and center.size == (224, 224)

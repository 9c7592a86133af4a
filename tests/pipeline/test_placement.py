"""A recipe's device form against its worker form, on a CPU device (the GPU runs are in
test_gpu.py).

The device placement must mean the same recipe: identical pixels for the deterministic eval
recipe (up to uint8 rounding), and for the random train recipe the same distributions of
crop scale, aspect ratio and flips, checked with two-sample tests over thousands of draws.

Measured on this machine (n=3000, seeds fixed): crop area KS p=0.11, log-aspect KS p=0.89,
crop position KS p=0.65; at n=20000, area p=0.34 and 0.38 for two seeds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from jpegs import first_batches
from pixels import to_pixels

from autotune.pipeline import decoders, loader, recipes
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.recipes.center_crop_eval import DeviceEval
from autotune.pipeline.recipes.imagenet_train import DeviceTrain
from autotune.pipeline.sources import Source

DRAWS = 3000
P_FLOOR = 0.001  # seeds are fixed: a miss is a real difference, not bad luck on a rerun


# --- the eval recipe: deterministic, so the placements agree pixel for pixel ------------------


@pytest.mark.parametrize("decoder", ["pil", "pil_reduced"])
def test_eval_on_the_device_matches_the_workers(small_set: Source, decoder: str) -> None:
    recipe = recipes.CenterCropEval(crop_size=64)
    on_cpu = PipelineConfig(batch_size=4, decoder=decoder)
    on_device = PipelineConfig(batch_size=4, decoder=decoder, augment_on="gpu")
    for (a, la), (b, lb) in zip(
        first_batches(small_set, on_cpu, recipe),
        first_batches(small_set, on_device, recipe),
        strict=True,
    ):
        assert a.shape == b.shape == (4, 3, 64, 64)
        assert a.dtype == b.dtype == torch.float32
        assert torch.equal(la, lb)
        diff = (to_pixels(a, recipe) - to_pixels(b, recipe)).abs()
        # workers round to uint8 after resizing; the device keeps the float (measured: <= 0.5)
        assert diff.max() <= 1.0, diff.max()


# --- the train recipe: random, so the distributions must agree ------------------------------


@pytest.mark.slow  # a search of its own / a statistical sample: seconds
def test_train_crop_distributions_match() -> None:
    recipe = recipes.ImagenetTrain(crop_size=112)
    height, width = 375, 500
    torch.manual_seed(0)
    cpu = [recipe.plan(width, height) for _ in range(DRAWS)]
    device = recipe.device_form(seed=0).draw_boxes([(height, width)] * DRAWS)
    area = (
        [p.height * p.width / (height * width) for p in cpu],
        [h * w / (height * width) for _, _, h, w in device],
    )
    aspect = ([np.log(p.width / p.height) for p in cpu], [np.log(w / h) for _, _, h, w in device])
    top = (
        [p.top / (height - p.height + 1) for p in cpu],
        [t / (height - h + 1) for t, _, h, _ in device],
    )
    from scipy import stats  # here: its import is 0.6 s, and only the slow tests use it

    for name, (a, b) in {"area": area, "aspect": aspect, "top": top}.items():
        assert stats.ks_2samp(a, b).pvalue > P_FLOOR, name
    assert all(
        t >= 0 and left >= 0 and t + h <= height and left + w <= width for t, left, h, w in device
    )


@pytest.mark.slow  # a search of its own / a statistical sample: seconds
def test_train_flip_rates_match() -> None:
    # a full-image "crop" of an image whose left and right halves differ: a flip shows
    recipe = recipes.ImagenetTrain(crop_size=8, scale=(1.0, 1.0), ratio=(1.0, 1.0), flip_p=0.5)
    image = torch.zeros(3, 8, 8, dtype=torch.uint8)
    image[:, :, :4] = 255
    augment = recipe.device_form(seed=0)
    flipped = 0
    for _ in range(DRAWS // 500):
        batch = augment([image] * 500)
        flipped += int((batch[:, 0, 0, 0] < 128).sum())
    torch.manual_seed(0)
    cpu_flipped = sum(recipe.plan(8, 8).flip for _ in range(DRAWS))
    from scipy import stats

    table = [[flipped, DRAWS - flipped], [cpu_flipped, DRAWS - cpu_flipped]]
    assert stats.chi2_contingency(table).pvalue > P_FLOOR, table
    assert 0.45 < flipped / DRAWS < 0.55


def test_train_on_the_device_batches(small_set: Source) -> None:
    recipe = recipes.ImagenetTrain(crop_size=48)
    config = PipelineConfig(batch_size=4, num_workers=1, augment_on="gpu")
    item, _ = loader.build(small_set, config, recipe=recipe).dataloader.dataset[0]
    width, height, _ = decoders.probe(small_set.read(0))
    assert item.dtype == torch.uint8  # the whole image crosses: crops are drawn on the device
    assert item.shape == (3, height, width)
    first = first_batches(small_set, config, recipe)
    again = first_batches(small_set, config, recipe)
    for (images, labels), (images2, labels2) in zip(first, again, strict=True):
        assert images.shape == (4, 3, 48, 48) and images.dtype == torch.float32
        assert labels.dtype == torch.int64
        pixels = to_pixels(images, recipe)
        assert pixels.min() > -0.5 and pixels.max() < 255.5 and pixels.std() > 1
        assert torch.equal(images, images2) and torch.equal(labels, labels2)  # seeded


def test_device_augment_leaves_the_callers_rng_alone() -> None:
    augment = recipes.ImagenetTrain(crop_size=8).device_form(seed=0)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    augment([torch.zeros(3, 20, 30, dtype=torch.uint8)] * 3)
    assert torch.equal(torch.get_rng_state(), before)

    def boxes(seed: int) -> list[tuple[int, int, int, int]]:
        augment = recipes.ImagenetTrain(crop_size=8).device_form(seed=seed)
        return augment.draw_boxes([(200, 300)] * 5)

    assert boxes(0) == boxes(0)  # reproducible from the seed
    assert boxes(0) != boxes(1)


@pytest.mark.parametrize(
    ("recipe", "form"),
    [
        (recipes.ImagenetTrain(crop_size=32), DeviceTrain),
        (recipes.CenterCropEval(crop_size=32), DeviceEval),
    ],
)
def test_the_device_stage_runs_the_recipes_device_form(
    small_set: Source, recipe: recipes.Recipe, form: type
) -> None:
    config = PipelineConfig(batch_size=4, augment_on="gpu")
    stage = loader.build(small_set, config, recipe=recipe).stage
    assert type(stage.augment) is form and stage.augment.recipe is recipe
    assert loader.build(small_set, PipelineConfig(), recipe=recipe).stage.augment is None

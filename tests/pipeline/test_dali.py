"""``decoder=dali``: DALI's graph on its CPU backend (the GPU backends are in test_gpu.py).

Measured on this machine (DALI 2.4, CPU backend): decoding is pixel-identical to Pillow. The
eval recipe keeps two conventions of DALI's that differ from torchvision's by up to a pixel of
geometry: ``resize_shorter`` rounds the longer side (torchvision truncates it), and the centre
crop rounds a half-pixel offset up (torchvision rounds to even). With those, the pixels differ
by 0.14-0.84 levels (mean, 0-255): the two antialias filters.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_session
from pixels import to_pixels
from torchvision.transforms.v2 import functional as F

from autotune.pipeline import decoders, loader, recipes, sources
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source
from autotune.runtime.trial import run_trial

pytest.importorskip("nvidia.dali")


@pytest.fixture(scope="module")
def small_set(tmp_path_factory: pytest.TempPathFactory) -> Source:
    return sources.synthetic(count=24, num_classes=3, cache_dir=tmp_path_factory.mktemp("c"))


def test_eval_matches_torchvision(small_set: Source) -> None:
    recipe = recipes.CenterCropEval(crop_size=64)
    config = PipelineConfig(batch_size=8, decoder="dali")
    batches = list(loader.build(small_set, config, recipe=recipe, sampler=range(len(small_set))))
    assert len(batches) == 3
    images, labels = batches[0]
    assert images.shape == (8, 3, 64, 64) and images.dtype == torch.float32
    assert labels.tolist() == list(small_set.labels[:8])
    worst = 0.0
    for i, image in enumerate(to_pixels(images, recipe)):
        full = decoders.get("pil").decode(small_set.read(i))
        h, w = full.shape[-2:]
        size = [73, round(73 * w / h)] if h <= w else [round(73 * h / w), 73]  # DALI rounds
        resized = F.resize(full, size, antialias=True)
        height, width = resized.shape[-2:]
        top, left = (height - 64 + 1) // 2, (width - 64 + 1) // 2  # DALI: half-pixel rounds up
        expected = resized[:, top : top + 64, left : left + 64].float()
        worst = max(worst, (image - expected).abs().mean().item())
    assert worst < 1.5, worst  # measured 0.14-0.84: DALI's and torchvision's antialias filters


def test_train_batches_reproducible_and_reshuffled(small_set: Source) -> None:
    recipe = recipes.ImagenetTrain(crop_size=32)
    config = PipelineConfig(batch_size=8, decoder="dali", dali_num_threads=1)
    tuned = loader.build(small_set, config, recipe=recipe, seed=0)
    first, second = list(tuned), list(tuned)  # two epochs
    again = list(loader.build(small_set, config, recipe=recipe, seed=0))
    assert len(first) == len(second) == len(tuned) == 3
    for (images, labels), (images2, labels2) in zip(first, again, strict=True):
        assert images.shape == (8, 3, 32, 32)
        pixels = to_pixels(images, recipe)
        assert pixels.min() > -0.5 and pixels.max() < 255.5 and pixels.std() > 1
        assert torch.equal(images, images2) and torch.equal(labels, labels2)  # seeded
    assert sorted(torch.cat([b[1] for b in first]).tolist()) == sorted(small_set.labels)
    assert not all(torch.equal(a[1], b[1]) for a, b in zip(first, second, strict=True))


def test_partial_last_batch_when_not_dropped(small_set: Source) -> None:
    config = PipelineConfig(batch_size=10, decoder="dali", drop_last=False)
    tuned = loader.build(small_set, config, recipe=recipes.CenterCropEval(crop_size=32))
    sizes = [len(labels) for _, labels in tuned]
    assert sizes == [10, 10, 4] and len(tuned) == 3


def test_channels_last(small_set: Source) -> None:
    config = PipelineConfig(batch_size=8, decoder="dali", channels_last=True)
    tuned = loader.build(small_set, config, recipe=recipes.CenterCropEval(crop_size=32))
    images, _ = next(iter(tuned))
    assert images.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.slow
def test_a_trial_through_dali(small_set: Source) -> None:
    session = make_session(
        ["window=quick", "recipe.crop_size=32", "batch_size=8"], source=small_set, device="cpu"
    )
    config = PipelineConfig(batch_size=8, decoder="dali", dali_num_threads=2)
    outcome = run_trial(session.job(config), timeout_s=120)
    assert outcome.failure is None, outcome.failure
    assert outcome.measurement is not None
    assert outcome.measurement.samples_per_s > 0
    assert np.isfinite(outcome.measurement.samples_per_s)

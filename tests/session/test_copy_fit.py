"""Which prepared copies a study tries: decided from the files' headers before the search."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from helpers import config_of

from autotune import machine
from autotune.machine import MachineFacts
from autotune.pipeline import sources
from autotune.pipeline.recipes import CenterCropEval, ImagenetTrain
from autotune.pipeline.sources import Source
from autotune.session import copy_fit
from autotune.session.space import SearchSpace


@pytest.fixture(scope="module")
def facts() -> MachineFacts:
    return machine.detect(want_cuda=False)


@pytest.fixture(scope="module")
def small_set(tmp_path_factory: pytest.TempPathFactory) -> Source:
    """16 ImageNet-sized JPEGs."""
    return sources.synthetic(count=16, num_classes=2, cache_dir=tmp_path_factory.mktemp("small"))


@pytest.fixture(scope="module")
def hd(tmp_path_factory: pytest.TempPathFactory) -> Source:
    folder = tmp_path_factory.mktemp("hd")
    return sources.synthetic(count=4, num_classes=1, size=(1920, 1080), cache_dir=folder)


def test_a_resized_copy_is_tried_only_where_the_recipe_leaves_pixels_to_drop(
    hd: Source, small_set: Source, facts: MachineFacts, tmp_path: Path
) -> None:
    train = ImagenetTrain(crop_size=224)
    # ImageNet-sized images: the smallest crop of RandomResizedCrop needs every pixel
    fit = copy_fit.measure(small_set, train, facts, root=tmp_path, budget_gb=None, epochs=90)
    assert fit.kinds == ("resized",)
    assert "a resized copy would be the dataset again" in fit.notes()[0]
    # 1920x1080 for 224-pixel crops, or a centre crop: pixels to drop
    assert copy_fit.measure(hd, train, facts, root=tmp_path, budget_gb=None, epochs=90).kinds == ()
    evaluation = CenterCropEval(crop_size=224)
    assert (
        copy_fit.measure(
            small_set, evaluation, facts, root=tmp_path, budget_gb=None, epochs=90
        ).kinds
        == ()
    )


def test_a_decoded_copy_is_tried_only_where_it_fits_in_memory(
    hd: Source, facts: MachineFacts, tmp_path: Path
) -> None:
    train = ImagenetTrain(crop_size=224)
    fit = copy_fit.measure(hd, train, facts, root=tmp_path, budget_gb=0.001, epochs=90)
    assert fit.kinds == ("decoded",)
    assert "MiB, over the 1 MiB it may hold in memory" in fit.notes()[0]
    small = dataclasses.replace(facts, memory_available_bytes=2 * 2**20)
    assert copy_fit.measure(hd, train, small, root=tmp_path, budget_gb=None, epochs=90).kinds == (
        "decoded",
    )


def test_the_space_leaves_out_the_copies_that_cannot_pay_and_says_why(
    small_set: Source, facts: MachineFacts, tmp_path: Path
) -> None:
    cfg = config_of([]).search_space
    fit = copy_fit.measure(
        small_set, ImagenetTrain(crop_size=224), facts, root=tmp_path, budget_gb=None, epochs=90
    )
    space = SearchSpace.from_config(cfg, facts, device="cpu", batch_size=32, copy_fit=fit)
    cache = next(k for k in space.knobs if k.name == "cache")
    assert cache.choices == ("none", "decoded")
    assert any(n.startswith("cache=resized left out: the recipe needs") for n in space.notes)
    one_epoch = copy_fit.measure(
        small_set, ImagenetTrain(crop_size=224), facts, root=tmp_path, budget_gb=None, epochs=1
    )
    space = SearchSpace.from_config(cfg, facts, device="cpu", batch_size=32, copy_fit=one_epoch)
    assert next(k for k in space.knobs if k.name == "cache").value == "none"
    assert f"cache=resized, decoded left out: {copy_fit.ONE_EPOCH}" in space.notes
    none_fit = copy_fit.CopyFit((("resized", "a"), ("decoded", "b")))
    space = SearchSpace.from_config(cfg, facts, device="cpu", batch_size=32, copy_fit=none_fit)
    cache = next(k for k in space.knobs if k.name == "cache")
    assert (cache.type, cache.value) == ("fixed", "none")
    assert [n for n in space.notes if n.startswith("cache=")] == [
        "cache=resized left out: a",
        "cache=decoded left out: b",
    ]

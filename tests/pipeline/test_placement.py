"""Where the work runs: augmentation on the device, what crosses the bus, the device decoder,
channels_last and the one-ahead prefetch, all on a CPU device (the GPU runs are in test_gpu.py).

The device placement must mean the same recipe: identical pixels for the deterministic eval
recipe (up to uint8 rounding), and for the random train recipe the same distributions of
crop scale, aspect ratio and flips, checked with two-sample tests over thousands of draws.

Measured on this machine (n=3000, seeds fixed): crop area KS p=0.11, log-aspect KS p=0.89,
crop position KS p=0.65; at n=20000, area p=0.34 and 0.38 for two seeds.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image
from pixels import to_pixels
from scipy import stats

import autotune
from autotune.pipeline import decoders, device_augment, loader, recipes, sources
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source

DRAWS = 3000
P_FLOOR = 0.001  # seeds are fixed: a miss is a real difference, not bad luck on a rerun


@pytest.fixture(scope="module")
def small_set(tmp_path_factory: pytest.TempPathFactory) -> Source:
    return sources.synthetic(count=16, num_classes=2, cache_dir=tmp_path_factory.mktemp("c"))


def _batches(source: Source, config: PipelineConfig, recipe: recipes.Recipe, n: int = 2):
    tuned = loader.build(source, config, recipe=recipe, seed=0, sampler=range(len(source)))
    out = []
    for batch in tuned:
        out.append(batch)
        if len(out) == n:
            return out
    return out


# --- the eval recipe: deterministic, so the placements agree pixel for pixel ------------------


@pytest.mark.parametrize("decoder", ["pil", "pil_reduced"])
def test_eval_on_the_device_matches_the_workers(small_set: Source, decoder: str) -> None:
    recipe = recipes.CenterCropEval(crop_size=64)
    on_cpu = PipelineConfig(batch_size=4, decoder=decoder)
    on_device = PipelineConfig(batch_size=4, decoder=decoder, augment_on="gpu")
    for (a, la), (b, lb) in zip(
        _batches(small_set, on_cpu, recipe), _batches(small_set, on_device, recipe), strict=True
    ):
        assert a.shape == b.shape == (4, 3, 64, 64)
        assert a.dtype == b.dtype == torch.float32
        assert torch.equal(la, lb)
        diff = (to_pixels(a, recipe) - to_pixels(b, recipe)).abs()
        # workers round to uint8 after resizing; the device keeps the float (measured: <= 0.5)
        assert diff.max() <= 1.0, diff.max()


def test_float_transfer_is_the_same_batch(small_set: Source) -> None:
    recipe = recipes.ImagenetTrain(crop_size=48)
    uint8 = _batches(small_set, PipelineConfig(batch_size=4, num_workers=1), recipe)
    floats = _batches(
        small_set, PipelineConfig(batch_size=4, num_workers=1, transfer="float"), recipe
    )
    dataset = loader.build(
        small_set, PipelineConfig(transfer="float"), recipe=recipe
    ).dataloader.dataset
    assert dataset[0][0].dtype == torch.float32  # normalized in the worker: 4x the bytes
    for (a, _), (b, _) in zip(uint8, floats, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_channels_last_batches(small_set: Source) -> None:
    recipe = recipes.CenterCropEval(crop_size=32)
    (plain, _), *_ = _batches(small_set, PipelineConfig(batch_size=4), recipe, n=1)
    (nhwc, _), *_ = _batches(
        small_set, PipelineConfig(batch_size=4, channels_last=True), recipe, n=1
    )
    assert nhwc.is_contiguous(memory_format=torch.channels_last)
    assert not plain.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(plain, nhwc)


# --- the train recipe: random, so the distributions must agree ------------------------------


def test_train_crop_distributions_match() -> None:
    recipe = recipes.ImagenetTrain(crop_size=112)
    height, width = 375, 500
    torch.manual_seed(0)
    cpu = [recipe.plan(width, height) for _ in range(DRAWS)]
    device = device_augment.DeviceTrain(recipe, seed=0).draw_boxes([(height, width)] * DRAWS)
    area = (
        [p.height * p.width / (height * width) for p in cpu],
        [h * w / (height * width) for _, _, h, w in device],
    )
    aspect = ([np.log(p.width / p.height) for p in cpu], [np.log(w / h) for _, _, h, w in device])
    top = (
        [p.top / (height - p.height + 1) for p in cpu],
        [t / (height - h + 1) for t, _, h, _ in device],
    )
    for name, (a, b) in {"area": area, "aspect": aspect, "top": top}.items():
        assert stats.ks_2samp(a, b).pvalue > P_FLOOR, name
    assert all(
        t >= 0 and left >= 0 and t + h <= height and left + w <= width for t, left, h, w in device
    )


def test_train_flip_rates_match() -> None:
    # a full-image "crop" of an image whose left and right halves differ: a flip shows
    recipe = recipes.ImagenetTrain(crop_size=8, scale=(1.0, 1.0), ratio=(1.0, 1.0), flip_p=0.5)
    image = torch.zeros(3, 8, 8, dtype=torch.uint8)
    image[:, :, :4] = 255
    augment = device_augment.DeviceTrain(recipe, seed=0)
    flipped = 0
    for _ in range(DRAWS // 500):
        batch = augment([image] * 500)
        flipped += int((batch[:, 0, 0, 0] < 128).sum())
    torch.manual_seed(0)
    cpu_flipped = sum(recipe.plan(8, 8).flip for _ in range(DRAWS))
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
    first = _batches(small_set, config, recipe)
    again = _batches(small_set, config, recipe)
    for (images, labels), (images2, labels2) in zip(first, again, strict=True):
        assert images.shape == (4, 3, 48, 48) and images.dtype == torch.float32
        assert labels.dtype == torch.int64
        pixels = to_pixels(images, recipe)
        assert pixels.min() > -0.5 and pixels.max() < 255.5 and pixels.std() > 1
        assert torch.equal(images, images2) and torch.equal(labels, labels2)  # seeded


def test_device_augment_leaves_the_callers_rng_alone() -> None:
    augment = device_augment.DeviceTrain(recipes.ImagenetTrain(crop_size=8), seed=0)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    augment([torch.zeros(3, 20, 30, dtype=torch.uint8)] * 3)
    assert torch.equal(torch.get_rng_state(), before)

    def boxes(seed: int) -> list[tuple[int, int, int, int]]:
        augment = device_augment.DeviceTrain(recipes.ImagenetTrain(crop_size=8), seed=seed)
        return augment.draw_boxes([(200, 300)] * 5)

    assert boxes(0) == boxes(0)  # reproducible from the seed
    assert boxes(0) != boxes(1)


# --- the device decoder: workers send bytes, the batch is decoded in one call ---------------


def _jpeg(image: Image.Image, **save: object) -> bytes:
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=92, **save)
    return buf.getvalue()


@pytest.fixture(scope="module")
def mixed_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Plain JPEGs, an EXIF-rotated JPEG and a PNG: the last two are decoded in the worker."""
    root = tmp_path_factory.mktemp("mixed")
    rng = np.random.default_rng(0)
    (root / "a").mkdir()
    for i in range(5):
        pixels = rng.integers(0, 255, (90 + 10 * i, 120, 3), dtype=np.uint8)
        (root / "a" / f"{i}.jpg").write_bytes(_jpeg(Image.fromarray(pixels)))
    exif = Image.Exif()
    exif[0x0112] = 6
    rotated = Image.fromarray(rng.integers(0, 255, (80, 140, 3), dtype=np.uint8))
    (root / "a" / "rotated.jpg").write_bytes(_jpeg(rotated, exif=exif))
    Image.fromarray(rng.integers(0, 255, (100, 100, 3), dtype=np.uint8)).save(root / "a" / "p.png")
    return root


def test_device_decoder_path_on_a_cpu_device(mixed_folder: Path) -> None:
    source = sources.scan_imagefolder(mixed_folder)
    recipe = recipes.CenterCropEval(crop_size=32)
    config = PipelineConfig(batch_size=len(source), decoder="nvjpeg")
    assert config.augment_on == "gpu"
    tuned = loader.build(source, config, recipe=recipe, sampler=range(len(source)))
    items = [tuned.dataloader.dataset[i][0] for i in range(len(source))]
    names = [Path(p).name for p in source.paths]
    for name, item in zip(names, items, strict=True):
        # plain JPEGs cross as bytes; a rotated JPEG and a PNG are decoded in the worker
        expected_dims = 3 if name in ("rotated.jpg", "p.png") else 1
        assert item.dim() == expected_dims, name
    ((images, labels),) = list(tuned)
    reference = loader.build(
        source, PipelineConfig(batch_size=len(source)), recipe=recipe, sampler=range(len(source))
    )
    ((expected, expected_labels),) = list(reference)
    assert torch.equal(labels, expected_labels)
    diff = (to_pixels(images, recipe) - to_pixels(expected, recipe)).abs()
    assert diff.max() <= 1.0, diff.max()  # TorchCodec's CPU decoder and Pillow: same libjpeg


# --- the one-ahead prefetch -----------------------------------------------------------------


def test_one_ahead_starts_the_next_item_before_handing_over_this_one() -> None:
    events: list[str] = []

    def start(item: int) -> int:
        events.append(f"start {item}")
        return item

    def finish(item: int) -> int:
        events.append(f"finish {item}")
        return item

    for item in loader.one_ahead(range(3), start, finish):
        events.append(f"use {item}")
    assert events == [
        "start 0",
        "finish 0",
        "start 1",
        "use 0",
        "finish 1",
        "start 2",
        "use 1",
        "finish 2",
        "use 2",
    ]
    assert list(loader.one_ahead([], start, finish)) == []


def test_device_prefetch_is_a_no_op_on_a_cpu_device(small_set: Source) -> None:
    recipe = recipes.CenterCropEval(crop_size=32)
    tuned = loader.build(
        small_set, PipelineConfig(batch_size=4, device_prefetch=True), recipe=recipe
    )
    assert not tuned.prefetches
    assert len(list(tuned)) == 4


def test_loader_kwargs_warn_when_the_device_has_a_share(tmp_path: Path) -> None:
    host_only = tmp_path / "host.yaml"
    host_only.write_text(yaml.safe_dump(PipelineConfig(num_workers=2).to_dict()))
    on_device = tmp_path / "device.yaml"
    on_device.write_text(yaml.safe_dump(PipelineConfig(decoder="nvjpeg").to_dict()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert autotune.loader_kwargs(host_only)["num_workers"] == 2
    with pytest.warns(UserWarning, match="use autotune.build_loader"):
        autotune.loader_kwargs(on_device)


def test_build_loader_from_a_best_yaml_with_device_augmentation(
    tmp_path: Path, small_set: Source
) -> None:
    doc = PipelineConfig(batch_size=4, num_workers=1, augment_on="gpu").to_dict()
    doc["workload"] = {"recipe": {"name": "imagenet_train", "crop_size": 40}, "device": "cpu"}
    best = tmp_path / "best.yaml"
    best.write_text(yaml.safe_dump(doc))
    images, labels = next(iter(autotune.build_loader(small_set, best)))
    assert images.shape == (4, 3, 40, 40) and labels.shape == (4,)


def test_workers_start_inside_the_first_next_not_at_iter(small_set: Source) -> None:
    """The trial's start-up clock runs from just after iter() to the first batch: worker
    spawn must fall inside it."""
    import psutil

    recipe = recipes.CenterCropEval(crop_size=32)
    me = psutil.Process()
    for config in (
        PipelineConfig(batch_size=4, num_workers=2),
        PipelineConfig(batch_size=4, num_workers=2, device_prefetch=True),
    ):
        tuned = loader.build(small_set, config, recipe=recipe)
        before = {p.pid for p in me.children()}
        batches = iter(tuned)
        assert {p.pid for p in me.children()} == before  # nothing started yet
        next(batches)
        assert len({p.pid for p in me.children()} - before) == 2
        del batches


def test_a_users_uint8_dataset_is_normalized_whatever_the_transfer() -> None:
    from torch.utils.data import TensorDataset

    images = torch.full((8, 3, 4, 4), 255, dtype=torch.uint8)
    dataset = TensorDataset(images, torch.zeros(8, dtype=torch.int64))
    recipe = recipes.CenterCropEval(crop_size=4)
    for transfer in ("uint8", "float"):
        config = PipelineConfig(batch_size=4, transfer=transfer)
        batch, _ = next(iter(loader.build(dataset, config, recipe=recipe)))
        assert batch.dtype == torch.float32
        assert torch.allclose(to_pixels(batch, recipe), torch.full_like(batch, 255.0), atol=1e-3)

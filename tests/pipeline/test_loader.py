"""Tests for autotune.pipeline.loader: ``build`` on real JPEGs, what crosses to the device,
the device decoder's path, channels_last, the one-ahead prefetch and when workers start, all
on a CPU device (the GPU runs are in test_gpu.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from jpegs import first_batches, jpeg
from PIL import Image
from pixels import to_pixels
from torch.utils.data import TensorDataset

from autotune.pipeline import decoders, loader, recipes, sources
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source

# --- build ----------------------------------------------------------------------------------


def _first_batches(source: Source, seed: int, count: int = 2) -> list[tuple[torch.Tensor, ...]]:
    cfg = PipelineConfig(num_workers=2, prefetch_factor=2, batch_size=4)
    tuned = loader.build(source, cfg, recipe=recipes.ImagenetTrain(crop_size=32), seed=seed)
    batches = []
    for batch in tuned:
        batches.append(batch)
        if len(batches) == count:
            break
    return batches


@pytest.fixture(scope="module")
def seed0_batches(small_set: Source) -> list[tuple[torch.Tensor, ...]]:
    return _first_batches(small_set, seed=0)


def test_build_yields_normalized_float_batches(small_set: Source, seed0_batches: list) -> None:
    recipe = recipes.ImagenetTrain(crop_size=32)
    mean = torch.tensor(recipe.mean).view(1, 3, 1, 1)
    std = torch.tensor(recipe.std).view(1, 3, 1, 1)
    for images, labels in seed0_batches:
        assert images.shape == (4, 3, 32, 32)
        assert images.dtype == torch.float32 and images.device.type == "cpu"
        assert labels.shape == (4,) and labels.dtype == torch.int64
        assert set(labels.tolist()) <= {0, 1}
        pixels = (images * std + mean) * 255  # undo the normalization: back to uint8 values
        assert torch.allclose(pixels, pixels.round(), atol=1e-3)
        assert pixels.min() > -1e-3 and pixels.max() < 255 + 1e-3
        assert pixels.std() > 1  # not a constant image


def test_build_len_and_uint8_dataset(small_set: Source) -> None:
    cfg = PipelineConfig(batch_size=4)
    tuned = loader.build(small_set, cfg, recipe=recipes.CenterCropEval(crop_size=32))
    assert len(tuned) == 16 // 4
    image, label = tuned.dataloader.dataset[0]
    assert image.dtype == torch.uint8 and image.shape == (3, 32, 32)
    assert label == small_set.labels[0]


def test_build_is_reproducible_with_workers(small_set: Source, seed0_batches: list) -> None:
    again = _first_batches(small_set, seed=0)
    for (images, labels), (images2, labels2) in zip(seed0_batches, again, strict=True):
        assert torch.equal(labels, labels2)
        assert torch.equal(images, images2)
    other = _first_batches(small_set, seed=1)
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(seed0_batches, other, strict=True))


def test_float_transfer_is_the_same_batch(small_set: Source) -> None:
    recipe = recipes.ImagenetTrain(crop_size=48)
    uint8 = first_batches(small_set, PipelineConfig(batch_size=4, num_workers=1), recipe)
    floats = first_batches(
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
    (plain, _), *_ = first_batches(small_set, PipelineConfig(batch_size=4), recipe, n=1)
    (nhwc, _), *_ = first_batches(
        small_set, PipelineConfig(batch_size=4, channels_last=True), recipe, n=1
    )
    assert nhwc.is_contiguous(memory_format=torch.channels_last)
    assert not plain.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(plain, nhwc)


# --- the device decoder: workers send bytes, the batch is decoded in one call ---------------


@pytest.fixture(scope="module")
def mixed_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Plain JPEGs, an EXIF-rotated JPEG and a PNG: the last two are decoded in the worker."""
    root = tmp_path_factory.mktemp("mixed")
    rng = np.random.default_rng(0)
    (root / "a").mkdir()
    for i in range(5):
        pixels = rng.integers(0, 255, (90 + 10 * i, 120, 3), dtype=np.uint8)
        (root / "a" / f"{i}.jpg").write_bytes(jpeg(Image.fromarray(pixels), quality=92))
    exif = Image.Exif()
    exif[0x0112] = 6
    rotated = Image.fromarray(rng.integers(0, 255, (80, 140, 3), dtype=np.uint8))
    (root / "a" / "rotated.jpg").write_bytes(jpeg(rotated, quality=92, exif=exif))
    Image.fromarray(rng.integers(0, 255, (100, 100, 3), dtype=np.uint8)).save(root / "a" / "p.png")
    return root


@pytest.mark.parametrize("library", ["torchcodec", "torchvision"])
@pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")  # torchvision 0.29's
def test_device_decoder_path_on_a_cpu_device(mixed_folder: Path, library, monkeypatch) -> None:
    if library == "torchvision":  # TorchCodec not installed: torchvision.io decodes the batch
        monkeypatch.setattr(decoders, "torchcodec_decode_jpeg", None)
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
    assert diff.max() <= 1.0, diff.max()  # their CPU decoders and Pillow: same libjpeg


def test_device_prefetch_is_a_no_op_on_a_cpu_device(small_set: Source) -> None:
    recipe = recipes.CenterCropEval(crop_size=32)
    tuned = loader.build(
        small_set, PipelineConfig(batch_size=4, device_prefetch=True), recipe=recipe
    )
    assert not tuned.prefetches
    assert len(list(tuned)) == 4


def test_workers_start_inside_the_first_next_not_at_iter(small_set: Source) -> None:
    """The trial's start-up clock runs from just after iter() to the first batch: worker
    spawn must fall inside it."""
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
    images = torch.full((8, 3, 4, 4), 255, dtype=torch.uint8)
    dataset = TensorDataset(images, torch.zeros(8, dtype=torch.int64))
    recipe = recipes.CenterCropEval(crop_size=4)
    for transfer in ("uint8", "float"):
        config = PipelineConfig(batch_size=4, transfer=transfer)
        batch, _ = next(iter(loader.build(dataset, config, recipe=recipe)))
        assert batch.dtype == torch.float32
        assert torch.allclose(to_pixels(batch, recipe), torch.full_like(batch, 255.0), atol=1e-3)

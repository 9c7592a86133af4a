"""Tests for autotune.pipeline: decoders, recipes, PipelineConfig and loader.build on real JPEGs.

Measured on this machine (Pillow 12 / OpenCV 5 / TorchCodec 0.17, all libjpeg-turbo): at
reduce=1 every decoder gives pixels identical to Pillow (mean absolute difference 0.0 on the
synthetic set); CMYK through OpenCV differs by 1.0, grayscale by 0.0. CenterCropEval(224) on
the 1920x1080 images through a 1/4 reduced decode differs from full decode + resize by 1.75
and 2.14 (mean absolute, 0-255).
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image, ImageOps
from torch.utils.data import DataLoader, TensorDataset

from autotune.errors import UsageError
from autotune.pipeline import decoders, loader, recipes, sources
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source

# the per-image decoders; the device decoder (nvjpeg) is tested in test_placement.py
DECODER_NAMES = sorted(name for name, cls in decoders.DECODERS.items() if not cls.on_device)
JPEG_TOLERANCE = 2.0  # mean absolute difference, 0-255, between two libjpeg-based decoders

try:
    import torchcodec.decoders  # noqa: F401

    HAS_TORCHCODEC = True
except ImportError:  # the torchvision.io fallback leaves EXIF orientation alone
    HAS_TORCHCODEC = False

# TorchCodec's decode_jpeg always applies the EXIF orientation (torchcodec/_core/DecodeJpeg.cpp,
# exif_orientation_transform), and the recipe applies it again with decoders.orient.


def _mad(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean absolute difference, in 0-255 units."""
    return (a.float() - b.float()).abs().mean().item()


def _test_pattern(width: int, height: int) -> Image.Image:
    """Gradients along both axes plus noise: any flip or rotation changes it a lot."""
    rng = np.random.default_rng(0)
    x = np.broadcast_to(np.linspace(0, 255, width)[None, :], (height, width))
    y = np.broadcast_to(np.linspace(0, 255, height)[:, None], (height, width))
    noise = rng.uniform(0, 60, (height, width))
    return Image.fromarray(np.stack([x, y, noise], axis=-1).astype(np.uint8), "RGB")


def _jpeg(img: Image.Image, **save: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=95, **save)
    return buf.getvalue()


def _exif_jpeg(orientation: int, size: tuple[int, int] = (400, 240)) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return _jpeg(_test_pattern(*size), exif=exif)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def small_set(cache: Path) -> Source:
    return sources.synthetic(count=16, num_classes=2, cache_dir=cache)


@pytest.fixture(scope="module")
def hd_set(cache: Path) -> Source:
    return sources.synthetic(count=2, num_classes=1, size=(1920, 1080), cache_dir=cache)


@pytest.fixture(scope="module")
def all_decoders() -> dict[str, decoders.Decoder]:
    return {name: decoders.get(name) for name in DECODER_NAMES}


# --- decoders -------------------------------------------------------------------------------


def test_every_cpu_decoder_is_available_here() -> None:
    assert all(decoders.DECODERS[name].unavailable_reason() is None for name in DECODER_NAMES)
    assert DECODER_NAMES == ["opencv", "pil", "pil_reduced", "torchvision"]


def test_decoders_agree_with_pil(small_set: Source, all_decoders: dict) -> None:
    pil = all_decoders["pil"]
    worst = dict.fromkeys(DECODER_NAMES, 0.0)
    for index in range(len(small_set)):
        data = small_set.read(index)
        width, height, _ = decoders.probe(data)
        reference = pil.decode(data)
        assert reference.shape == (3, height, width)
        for name, decoder in all_decoders.items():
            image = decoder.decode(data)
            assert image.dtype == torch.uint8, name
            assert image.shape == reference.shape, name
            worst[name] = max(worst[name], _mad(image, reference))
    assert all(value < JPEG_TOLERANCE for value in worst.values()), worst  # measured: all 0.0


def test_unknown_decoder_names_the_choices() -> None:
    with pytest.raises(KeyError, match="pil_reduced"):
        decoders.get("nope")


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orient_matches_pillow_exif_transpose(orientation: int) -> None:
    data = _exif_jpeg(orientation, size=(40, 24))
    width, height, found = decoders.probe(data)
    assert found == orientation
    assert (width, height) == ((24, 40) if orientation >= 5 else (40, 24))
    with Image.open(io.BytesIO(data)) as img:
        expected = torch.from_numpy(np.array(ImageOps.exif_transpose(img))).permute(2, 0, 1)
    oriented = decoders.orient(decoders.get("pil").decode(data), orientation)
    assert torch.equal(oriented, expected)


def test_probe_swaps_sides_for_exif_orientation_6() -> None:
    assert decoders.probe(_exif_jpeg(6)) == (240, 400, 6)
    assert decoders.probe(_jpeg(_test_pattern(400, 240))) == (400, 240, 1)


@pytest.mark.parametrize("name", DECODER_NAMES)
@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_orientation_through_a_recipe(name: str, orientation: int) -> None:
    data = _exif_jpeg(orientation)
    for recipe in (recipes.CenterCropEval(crop_size=32), recipes.ImagenetTrain(crop_size=32)):
        torch.manual_seed(0)
        expected = recipe(data, decoders.get("pil"))
        torch.manual_seed(0)
        image = recipe(data, decoders.get(name))
        assert image.shape == expected.shape == (3, 32, 32)
        # pil_reduced decodes this one at 1/4 (measured 0.4 and 1.0-2.0); the others exactly
        assert _mad(image, expected) < 4.0, (recipe.name, _mad(image, expected))


@pytest.mark.parametrize("mode", ["L", "CMYK"])
@pytest.mark.parametrize("name", DECODER_NAMES)
def test_grayscale_and_cmyk_decode_to_rgb(mode: str, name: str) -> None:
    data = _jpeg(_test_pattern(64, 48).convert(mode))
    expected = decoders.get("pil").decode(data)
    image = decoders.get(name).decode(data)
    assert image.dtype == torch.uint8
    assert image.shape == expected.shape == (3, 48, 64)
    assert _mad(image, expected) < JPEG_TOLERANCE  # measured: 0.0, OpenCV on CMYK 1.0


def test_pil_reduced_scales_the_hd_decode(hd_set: Source) -> None:
    data = hd_set.read(0)
    decoder = decoders.get("pil_reduced")
    full = decoder.decode(data)
    assert full.shape == (3, 1080, 1920)
    assert torch.equal(full, decoders.get("pil").decode(data))  # reduce=1 is a plain decode
    for reduce in (2, 4, 8):
        image = decoder.decode(data, reduce=reduce)
        assert image.dtype == torch.uint8
        _, h, w = image.shape
        assert 1080 // reduce <= h <= -(-1080 // reduce)
        assert 1920 // reduce <= w <= -(-1920 // reduce)


@pytest.mark.parametrize("size", [(1001, 667), (333, 501), (17, 9)])
def test_pil_reduced_never_below_the_floor_on_odd_sizes(size: tuple[int, int]) -> None:
    data = _jpeg(_test_pattern(*size))
    for reduce in (2, 4, 8):
        _, h, w = decoders.get("pil_reduced").decode(data, reduce=reduce).shape
        assert h >= size[1] // reduce and w >= size[0] // reduce
        assert h <= size[1] and w <= size[0]


def test_other_decoders_ignore_the_reduce_hint(small_set: Source) -> None:
    data = small_set.read(0)
    for name in ("pil", "opencv", "torchvision"):
        assert not decoders.DECODERS[name].can_reduce
        decoder = decoders.get(name)
        assert torch.equal(decoder.decode(data, reduce=4), decoder.decode(data))


# --- recipes --------------------------------------------------------------------------------


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
        data = hd_set.read(0) if size == (1920, 1080) else _jpeg(_test_pattern(*size))
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
        assert _mad(reduced, full) < 4.0  # measured 1.75 and 2.14


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
            worst = max(worst, _mad(reduced, full))
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


# --- PipelineConfig -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_workers": 0, "prefetch_factor": 2},
        {"num_workers": 0, "persistent_workers": True},
        {"num_workers": -1},
        {"batch_size": 0},
        {"num_workers": 2, "prefetch_factor": 0},
        {"main_threads": 0},
    ],
)
def test_config_validation(kwargs: dict) -> None:
    with pytest.raises(UsageError):
        PipelineConfig(**kwargs)


CONFIGS = [
    PipelineConfig(),
    PipelineConfig(batch_size=64, num_workers=2, prefetch_factor=3, persistent_workers=True),
    PipelineConfig(
        num_workers=2,
        prefetch_factor=2,
        pin_memory=True,
        decoder="pil_reduced",
        main_threads=1,
        drop_last=False,
    ),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.short())
def test_config_round_trip(cfg: PipelineConfig) -> None:
    data = cfg.to_dict()
    assert set(data) == {"loader", "pipeline"}
    assert PipelineConfig.from_dict(data) == cfg
    assert PipelineConfig.from_dict(yaml.safe_load(yaml.safe_dump(data))) == cfg  # best.yaml
    assert PipelineConfig.from_dict(dataclasses.asdict(cfg)) == cfg  # a flat dict too


def test_config_from_dict_refuses_unknown_settings() -> None:
    with pytest.raises(UsageError, match="num_wrokers"):
        PipelineConfig.from_dict({"loader": {"num_wrokers": 2}})
    with pytest.raises(UsageError, match="turbo"):
        PipelineConfig.from_dict({"turbo": True})


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.short())
def test_loader_kwargs_go_straight_into_a_dataloader(cfg: PipelineConfig) -> None:
    dataset = TensorDataset(torch.arange(200.0), torch.arange(200))
    dl = DataLoader(dataset, **cfg.loader_kwargs())
    assert dl.batch_size == cfg.batch_size and dl.num_workers == cfg.num_workers
    if cfg.num_workers:
        assert dl.prefetch_factor == cfg.prefetch_factor
    else:
        images, _ = next(iter(dl))
        assert len(images) == cfg.batch_size


def test_buffered_batches() -> None:
    assert PipelineConfig().buffered_batches == 0
    assert PipelineConfig(num_workers=3, prefetch_factor=4).buffered_batches == 12
    assert PipelineConfig(num_workers=3).buffered_batches == 6  # DataLoader's default of 2


def test_short() -> None:
    assert PipelineConfig().short() == "w0 pil t-default bs32"
    cfg = PipelineConfig(
        batch_size=64,
        num_workers=4,
        prefetch_factor=2,
        persistent_workers=True,
        pin_memory=True,
        decoder="pil_reduced",
        main_threads=1,
    )
    assert cfg.short() == "w4 pf2 persist pin pil_reduced t1 bs64"


def test_short_with_default_prefetch() -> None:
    assert "None" not in PipelineConfig(num_workers=2).short()


# --- loader.build ---------------------------------------------------------------------------


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


def test_build_refuses_an_unknown_decoder(small_set: Source) -> None:
    cfg = PipelineConfig(decoder="nope")
    with pytest.raises(KeyError):
        loader.build(small_set, cfg, recipe=recipes.CenterCropEval(crop_size=32))

"""Tests for autotune.pipeline.decoders on real JPEGs: every decoder against Pillow, EXIF
orientation, grayscale and CMYK, and the reduced (DCT-scaled) decode.

Measured on this machine (Pillow 12 / OpenCV 5 / TorchCodec 0.17, all libjpeg-turbo): at
reduce=1 every decoder gives pixels identical to Pillow (mean absolute difference 0.0 on the
synthetic set); CMYK through OpenCV differs by 1.0, grayscale by 0.0.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from jpegs import exif_jpeg, jpeg, mad, pattern
from PIL import Image, ImageOps

from autotune.pipeline import decoders, recipes
from autotune.pipeline.sources import Source

# the per-image decoders; the device decoder (nvjpeg) is tested in test_loader.py
DECODER_NAMES = sorted(name for name, cls in decoders.DECODERS.items() if not cls.on_device)
JPEG_TOLERANCE = 2.0  # mean absolute difference, 0-255, between two libjpeg-based decoders

# TorchCodec's decode_jpeg always applies the EXIF orientation (torchcodec/_core/DecodeJpeg.cpp,
# exif_orientation_transform), and the recipe applies it again with decoders.orient.


@pytest.fixture(scope="module")
def all_decoders() -> dict[str, decoders.Decoder]:
    return {name: decoders.get(name) for name in DECODER_NAMES}


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
            worst[name] = max(worst[name], mad(image, reference))
    assert all(value < JPEG_TOLERANCE for value in worst.values()), worst  # measured: all 0.0


def test_unknown_decoder_names_the_choices() -> None:
    with pytest.raises(KeyError, match="pil_reduced"):
        decoders.get("nope")


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orient_matches_pillow_exif_transpose(orientation: int) -> None:
    data = exif_jpeg(orientation, size=(40, 24))
    width, height, found = decoders.probe(data)
    assert found == orientation
    assert (width, height) == ((24, 40) if orientation >= 5 else (40, 24))
    with Image.open(io.BytesIO(data)) as img:
        expected = torch.from_numpy(np.array(ImageOps.exif_transpose(img))).permute(2, 0, 1)
    oriented = decoders.orient(decoders.get("pil").decode(data), orientation)
    assert torch.equal(oriented, expected)


def test_probe_swaps_sides_for_exif_orientation_6() -> None:
    assert decoders.probe(exif_jpeg(6)) == (240, 400, 6)
    assert decoders.probe(jpeg(pattern(400, 240))) == (400, 240, 1)


@pytest.mark.parametrize("name", DECODER_NAMES)
@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_orientation_through_a_recipe(name: str, orientation: int) -> None:
    data = exif_jpeg(orientation)
    for recipe in (recipes.CenterCropEval(crop_size=32), recipes.ImagenetTrain(crop_size=32)):
        torch.manual_seed(0)
        expected = recipe(data, decoders.get("pil"))
        torch.manual_seed(0)
        image = recipe(data, decoders.get(name))
        assert image.shape == expected.shape == (3, 32, 32)
        # pil_reduced decodes this one at 1/4 (measured 0.4 and 1.0-2.0); the others exactly
        assert mad(image, expected) < 4.0, (recipe.name, mad(image, expected))


@pytest.mark.parametrize("mode", ["L", "CMYK"])
@pytest.mark.parametrize("name", DECODER_NAMES)
def test_grayscale_and_cmyk_decode_to_rgb(mode: str, name: str) -> None:
    data = jpeg(pattern(64, 48).convert(mode))
    expected = decoders.get("pil").decode(data)
    image = decoders.get(name).decode(data)
    assert image.dtype == torch.uint8
    assert image.shape == expected.shape == (3, 48, 64)
    assert mad(image, expected) < JPEG_TOLERANCE  # measured: 0.0, OpenCV on CMYK 1.0


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
    data = jpeg(pattern(*size))
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


def test_device_decoders_need_cuda() -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is usable here")
    for cls in (decoders.NvjpegDecoder, decoders.DaliDecoder):
        assert cls.unavailable_reason() == "it needs a CUDA device"


def test_torchvision_decoder_orients_only_through_torchcodec() -> None:
    assert decoders.TorchvisionDecoder.applies_orientation == (
        decoders.torchcodec_decode_jpeg is not None
    )

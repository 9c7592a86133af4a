"""Tests for autotune.pipeline.synthetic_images (through ``sources.synthetic``): the generated
sets, their determinism and their cache."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from autotune.errors import UsageError
from autotune.pipeline import synthetic_images
from autotune.pipeline.sources import Source, scan_imagefolder, synthetic
from autotune.pipeline.synthetic_images import default_cache_dir


@pytest.fixture(scope="module")
def small_set(tmp_path_factory: pytest.TempPathFactory) -> Source:
    return synthetic(count=24, num_classes=3, cache_dir=tmp_path_factory.mktemp("cache"))


def test_synthetic_layout(small_set: Source) -> None:
    assert small_set.classes == ("class_00", "class_01", "class_02")
    assert len(small_set) == 24
    assert not small_set.skipped
    for path, label in zip(small_set.paths, small_set.labels, strict=True):
        assert Path(path).parent.name == small_set.classes[label]
    assert Path(small_set.paths[0]).name == "img_00000.jpg"
    assert sorted(small_set.labels) == [0] * 8 + [1] * 8 + [2] * 8
    # Only the finished folder is left in the cache: no temp folders.
    assert [p.name for p in small_set.root.parent.iterdir()] == [small_set.root.name]


def test_synthetic_imagenet_like(small_set: Source) -> None:
    for path in small_set.paths:
        with Image.open(path) as im:
            w, h = im.size
            assert (im.format, im.mode) == ("JPEG", "RGB")
        assert 300 <= min(w, h) <= 500
        assert 4 / 3 - 0.01 <= max(w, h) / min(w, h) <= 16 / 9 + 0.01
        assert 30_000 < os.path.getsize(path) < 300_000  # photo-like, not flat colour


@pytest.mark.slow
def test_synthetic_deterministic(small_set: Source, tmp_path: Path) -> None:
    again = synthetic(count=24, num_classes=3, cache_dir=tmp_path / "a")
    assert again.root != small_set.root.parent
    assert [Path(p).read_bytes() for p in again.paths] == [
        Path(p).read_bytes() for p in small_set.paths
    ]
    other = synthetic(count=24, num_classes=3, seed=1, cache_dir=tmp_path / "a")
    assert other.root != again.root
    assert all(
        Path(a).read_bytes() != Path(b).read_bytes()
        for a, b in zip(other.paths, again.paths, strict=True)
    )


def test_synthetic_cache_hit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = synthetic(count=4, num_classes=2, cache_dir=tmp_path)
    mtimes = [os.stat(p).st_mtime_ns for p in first.paths]

    def fail(*args: object) -> None:
        raise AssertionError("regenerated a cached set")

    monkeypatch.setattr(synthetic_images, "_render", fail)
    second = synthetic(count=4, num_classes=2, cache_dir=tmp_path)
    assert second == first
    assert [os.stat(p).st_mtime_ns for p in second.paths] == mtimes


def test_synthetic_lost_race_uses_existing(tmp_path: Path) -> None:
    first = synthetic(count=2, num_classes=1, cache_dir=tmp_path)
    # Another process generating the same set after us must not fail or leave temp folders.
    synthetic_images._generate(first.root, 2, 1, None, 0, 90, False)
    assert [p.name for p in tmp_path.iterdir()] == [first.root.name]
    assert scan_imagefolder(first.root) == first


def test_synthetic_hd(tmp_path: Path) -> None:
    src = synthetic(count=2, num_classes=2, size=(1920, 1080), cache_dir=tmp_path)
    for path in src.paths:
        with Image.open(path) as im:
            assert im.size == (1920, 1080)
        assert 300_000 < os.path.getsize(path) < 2_000_000


@pytest.mark.parametrize(
    "kwargs",
    [{"count": 0}, {"count": 2, "num_classes": 3}, {"size": (0, 10)}, {"quality": 0}],
)
def test_synthetic_bad_params(tmp_path: Path, kwargs: dict) -> None:
    with pytest.raises(UsageError):
        synthetic(cache_dir=tmp_path, **kwargs)


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x"
    monkeypatch.delenv("AUTOTUNE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "autotune"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "autotune"


def test_uneven_sizes_span_thumbnails_to_camera_originals() -> None:
    rng = np.random.default_rng(0)
    areas = [w * h for w, h in (synthetic_images._uneven_size(rng) for _ in range(300))]
    assert max(areas) / min(areas) > 100
    shorter = [min(synthetic_images._uneven_size(rng)) for _ in range(300)]
    assert min(shorter) >= 120 and max(shorter) <= 2400


def test_uneven_files_mix_formats_as_photographs_do(tmp_path: Path) -> None:
    image = Image.new("RGB", (64, 48), (120, 60, 30))
    kinds = set()
    for i in range(60):
        synthetic_images._save_uneven(image, tmp_path / f"img_{i}", np.random.default_rng(i), 90)
    for path in tmp_path.iterdir():
        with Image.open(path) as im:
            progressive = bool(im.info.get("progressive") or im.info.get("progression"))
            kinds.add((im.format, im.mode, progressive))
    assert {("PNG", "RGBA", False), ("PNG", "LA", False), ("JPEG", "RGB", True)} <= kinds
    assert ("JPEG", "RGB", False) in kinds


def test_every_decoder_reads_the_uneven_formats_as_three_channels(tmp_path: Path) -> None:
    from autotune.pipeline import decoders

    image = Image.new("RGB", (64, 48), (120, 60, 30))
    for i in range(30):
        synthetic_images._save_uneven(image, tmp_path / f"img_{i}", np.random.default_rng(i), 90)
    for name in ("pil", "pil_reduced", "opencv", "torchvision"):
        for path in tmp_path.iterdir():
            decoded = decoders.DECODERS[name]().decode(path.read_bytes())
            assert tuple(decoded.shape) == (3, 48, 64), (name, path.name)

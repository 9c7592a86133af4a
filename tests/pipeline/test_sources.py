"""Tests for autotune.pipeline.sources: scanning an ImageFolder tree into a Source."""

from __future__ import annotations

import io
import logging
import os
import pickle
from pathlib import Path

import pytest
from PIL import Image

from autotune.errors import UsageError
from autotune.pipeline import sources
from autotune.pipeline.sources import scan_imagefolder


def _jpeg_bytes(size: tuple[int, int] = (32, 24), colour: int = 120) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (colour, 50, 200)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _noisy_jpeg_bytes() -> bytes:
    buf = io.BytesIO()
    Image.effect_noise((96, 96), 60).convert("RGB").save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def messy_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    _write(root / "cat" / "a.jpg", _jpeg_bytes())
    (root / "cat" / "deep" / "er").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(root / "cat" / "deep" / "er" / "b.png")  # nested, not JPEG
    _write(root / "cat" / "UPPER.JPG", _jpeg_bytes(colour=10))
    _write(root / "cat" / "padded.jpg", _jpeg_bytes(colour=30) + b"\x00" * 8)  # pad after EOI
    _write(root / "dog" / "c.jpg", _jpeg_bytes(colour=200))
    _write(root / "dog" / "trunc.jpg", _noisy_jpeg_bytes()[:-500])  # cut in the scan data
    _write(root / "dog" / "trunc_head.jpg", _noisy_jpeg_bytes()[:100])  # cut in the header
    _write(root / "dog" / "text.jpg", b"this is not an image\n")
    _write(root / "dog" / "empty.jpg", b"")
    _write(root / "dog" / "notes.txt", b"ignored")
    _write(root / "README.txt", b"ignored")
    _write(root / "loose.jpg", _jpeg_bytes())  # not in a class folder: ignored
    _write(root / ".hidden" / "x.jpg", _jpeg_bytes())
    _write(root / "cat" / ".DS_Store.jpg", b"junk")
    (root / "nothing_here").mkdir()
    return root


def test_scan_labels_skips_and_ignores(messy_root: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=sources.__name__):
        src = scan_imagefolder(messy_root)
    root = messy_root.resolve()
    assert src.root == root
    assert src.classes == ("cat", "dog")
    names = [os.path.relpath(p, root) for p in src.paths]
    assert names == [
        "cat/UPPER.JPG",
        "cat/a.jpg",
        "cat/deep/er/b.png",
        "cat/padded.jpg",
        "dog/c.jpg",
    ]
    assert src.labels == (0, 0, 0, 0, 1)
    assert all(os.path.isabs(p) for p in src.paths)
    reasons = {os.path.basename(p): r for p, r in src.skipped}
    assert reasons == {
        "trunc.jpg": "truncated JPEG",
        "trunc_head.jpg": "truncated JPEG",
        "text.jpg": "not an image",
        "empty.jpg": "empty file",
    }
    assert len(src) == 5
    assert src.read(4) == (root / "dog" / "c.jpg").read_bytes()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "skipped 4 of 9" in warnings[0].getMessage()


def test_scan_missing_root(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"does not exist: set dataset\.root=PATH") as info:
        scan_imagefolder(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(info.value)


def test_scan_root_is_file(tmp_path: Path) -> None:
    f = _write(tmp_path / "file.jpg", _jpeg_bytes())
    with pytest.raises(UsageError, match="is not a folder"):
        scan_imagefolder(f)


@pytest.mark.parametrize("layout", ["empty", "flat", "class_without_images"])
def test_scan_no_images(tmp_path: Path, layout: str) -> None:
    if layout == "flat":
        _write(tmp_path / "a.jpg", _jpeg_bytes())  # images but no class sub-folders
    elif layout == "class_without_images":
        _write(tmp_path / "cat" / "readme.md", b"x")
    with pytest.raises(UsageError) as info:
        scan_imagefolder(tmp_path)
    msg = str(info.value)
    assert f"{tmp_path.resolve()} holds no images (*.jpg" in msg
    assert f"expected {tmp_path.resolve()}/<class>/<image>" in msg
    assert "\n" not in msg


def test_scan_mostly_bad(tmp_path: Path) -> None:
    _write(tmp_path / "a" / "good.jpg", _jpeg_bytes())
    for i in range(3):
        _write(tmp_path / "a" / f"bad{i}.jpg", b"nope")
    with pytest.raises(UsageError) as info:
        scan_imagefolder(tmp_path)
    msg = str(info.value)
    assert msg.startswith(f"3 of 4 files under {tmp_path.resolve()} are not readable images")
    assert "bad0.jpg: not an image" in msg
    assert msg.endswith("fix or remove them")
    assert len(scan_imagefolder(tmp_path, max_bad_fraction=0.8)) == 1


def test_source_pickle_and_fingerprint(messy_root: Path) -> None:
    src = scan_imagefolder(messy_root)
    clone = pickle.loads(pickle.dumps(src))
    assert clone == src
    assert clone.read(0) == src.read(0)
    fp = src.fingerprint()
    assert fp == scan_imagefolder(messy_root).fingerprint()
    assert len(fp) == 16
    _write(messy_root / "dog" / "d.jpg", _jpeg_bytes(colour=99))
    assert scan_imagefolder(messy_root).fingerprint() != fp
    # Same names and count, different content size: still detected.
    (messy_root / "dog" / "d.jpg").unlink()
    _write(messy_root / "dog" / "c.jpg", _jpeg_bytes((40, 40), colour=200))
    assert scan_imagefolder(messy_root).fingerprint() != fp

"""Synthetic photo-like JPEGs: rendered from a seed, written once into a cache folder.

The same parameters give byte-identical files, so a cached set is reused across runs and
processes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from autotune.errors import UsageError

log = logging.getLogger(__name__)

# Bump whenever synthetic output changes, so stale caches are not reused.
GENERATOR_VERSION = 1


def default_cache_dir() -> Path:
    """Returns $AUTOTUNE_CACHE, else $XDG_CACHE_HOME/autotune, else ~/.cache/autotune."""
    if os.environ.get("AUTOTUNE_CACHE"):
        return Path(os.environ["AUTOTUNE_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg).expanduser() / "autotune"


def _imagenet_like_size(rng: np.random.Generator) -> tuple[int, int]:
    """Draws (width, height): shorter side 300-500, aspect 4:3 to 16:9, mostly landscape."""
    short = int(np.clip(rng.normal(340, 35), 300, 500))
    aspect = 4 / 3 if rng.random() < 0.5 else rng.uniform(4 / 3, 16 / 9)  # 4:3 is the common case
    long = round(short * aspect)
    return (long, short) if rng.random() < 0.75 else (short, long)


def _uneven_size(rng: np.random.Generator) -> tuple[int, int]:
    """(width, height) of a folder of real photographs: thumbnails to camera originals, the
    shorter side log-uniform over 120-2400 px (400x the pixels, ~100x the file size)."""
    short = round(float(np.exp(rng.uniform(np.log(120), np.log(2400)))))
    long = round(short * rng.uniform(4 / 3, 16 / 9))
    return (long, short) if rng.random() < 0.7 else (short, long)


def _save_uneven(img: Image.Image, stem: Path, rng: np.random.Generator, quality: int) -> None:
    """Saves as a folder of photographs mixes them: a fifth PNGs (RGB, RGBA with a soft
    alpha, gray + alpha), a quarter of the JPEGs progressive, qualities around ``quality``."""
    if rng.random() < 0.2:
        mode = rng.choice(["RGB", "RGBA", "LA"])
        if mode != "RGB":
            alpha = Image.linear_gradient("L").resize(img.size)
            img = (img.convert("L") if mode == "LA" else img).copy()
            img.putalpha(alpha)
        img.save(stem.with_suffix(".png"), "PNG", compress_level=1)
        return
    q = int(np.clip(quality + rng.integers(-15, 6), 1, 100))
    progressive = bool(rng.random() < 0.25)
    img.save(stem.with_suffix(".jpg"), "JPEG", quality=q, progressive=progressive)


def _upsample(a: np.ndarray, w: int, h: int) -> np.ndarray:
    """Bilinearly resizes a float32 2-D array to (h, w)."""
    if a.shape == (h, w):
        return a
    return np.asarray(Image.fromarray(a, "F").resize((w, h), Image.Resampling.BILINEAR))


def _render(
    seed: int,
    index: int,
    num_classes: int,
    size: tuple[int, int] | None,
    *,
    uneven: bool = False,
) -> Image.Image:
    """Renders one photo-like image: smooth colour field, soft shapes, film-grain texture."""
    rng = np.random.default_rng([seed, index])  # not seed+index: seeds 0 and 1 must not overlap
    class_rng = np.random.default_rng([seed, num_classes, index % num_classes])
    palette = class_rng.uniform(0, 255, (5, 3))  # shared by a class: labels mean something
    if uneven:
        w, h = _uneven_size(rng)
    else:
        w, h = size if size is not None else _imagenet_like_size(rng)
    scale = min(w, h)

    gh, gw = rng.integers(3, 7, size=2)
    mix = rng.dirichlet(np.full(len(palette), 0.7), size=(gh, gw)) @ palette
    img = Image.fromarray(np.clip(mix, 0, 255).astype(np.uint8), "RGB")
    img = img.resize((w, h), Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(4, 12))):
        colour = np.clip(palette[rng.integers(len(palette))] + rng.normal(0, 25, 3), 0, 255)
        fill = tuple(int(c) for c in colour)
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(0.05, 0.35) * scale
        if rng.random() < 0.5:
            ry = r * rng.uniform(0.4, 1.6)
            draw.ellipse((cx - r, cy - ry, cx + r, cy + ry), fill=fill)
        else:
            k = int(rng.integers(3, 7))
            angles, radii = np.sort(rng.uniform(0, 2 * np.pi, k)), r * rng.uniform(0.5, 1.2, k)
            xs, ys = cx + radii * np.cos(angles), cy + radii * np.sin(angles)
            draw.polygon(list(zip(xs.tolist(), ys.tolist(), strict=True)), fill=fill)
    img = img.filter(ImageFilter.GaussianBlur(rng.uniform(1.0, 3.0) * scale / 400))

    # Texture sets the JPEG size; coarser grain on big images keeps HD files photo-like.
    grain = max(1.0, scale / 700)
    mid = rng.standard_normal((max(2, int(h / grain / 4)), max(2, int(w / grain / 4))), np.float32)
    fine = rng.standard_normal((max(2, int(h / grain)), max(2, int(w / grain))), np.float32)
    lum = rng.uniform(6, 20) * _upsample(mid, w, h) + rng.uniform(14, 30) * _upsample(fine, w, h)
    chroma = rng.uniform(0.85, 1.15, 3).astype(np.float32)
    arr = np.asarray(img, dtype=np.float32) + lum[..., None] * chroma
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")


def folder(
    *,
    count: int,
    num_classes: int,
    size: tuple[int, int] | None,
    seed: int,
    quality: int,
    cache_dir: str | Path | None,
    uneven: bool = False,
) -> Path:
    """The cached folder of this set (``class_NN/img_NNNNN.jpg``), generated if missing.
    ``uneven``: sizes, formats and encodings as mixed as a folder of real photographs
    (``_uneven_size``, ``_save_uneven``: ``.jpg`` and ``.png``); ``size`` does not apply.

    Raises:
        UsageError: a parameter is out of range or the cache folder is not writable.
    """
    if count < 1 or num_classes < 1 or num_classes > count:
        raise UsageError(
            f"synthetic data needs count >= num_classes >= 1, got count={count} "
            f"num_classes={num_classes}"
        )
    if size is not None and (len(size) != 2 or min(size) < 1):
        raise UsageError(f"synthetic size must be (width, height) of positive ints, got {size}")
    if not 1 <= quality <= 100:
        raise UsageError(f"synthetic JPEG quality must be within 1-100, got {quality}")
    size = None if size is None else (int(size[0]), int(size[1]))
    params = [GENERATOR_VERSION, count, num_classes, size, seed, quality]
    if uneven:  # appended only when set: the keys of the sets cached before stay valid
        params.append("uneven")
    key = hashlib.sha256(json.dumps(params).encode()).hexdigest()[:12]
    base = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = base / f"synthetic-{key}"
    if not target.is_dir():
        try:
            _generate(target, count, num_classes, size, seed, quality, uneven)
        except OSError as exc:
            raise UsageError(
                f"cannot write synthetic images under {base} ({exc.strerror or exc}): "
                "set AUTOTUNE_CACHE=DIR to a writable folder"
            ) from exc
    return target


def _generate(
    folder: Path,
    count: int,
    classes: int,
    size: tuple[int, int] | None,
    seed: int,
    quality: int,
    uneven: bool,
) -> None:
    """Writes the images into a temp folder, then renames it into place atomically."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    log.info("generating %d synthetic JPEGs in %s (once)", count, folder)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it owner-only; the final folder should be readable
    try:
        cwidth, iwidth = max(2, len(str(classes - 1))), max(5, len(str(count - 1)))
        for label in range(classes):
            (tmp / f"class_{label:0{cwidth}d}").mkdir()
        for i in range(count):
            stem = tmp / f"class_{i % classes:0{cwidth}d}" / f"img_{i:0{iwidth}d}"
            image = _render(seed, i, classes, size, uneven=uneven)
            if uneven:
                _save_uneven(image, stem, np.random.default_rng([seed, i, 1]), quality)
            else:
                image.save(stem.with_suffix(".jpg"), "JPEG", quality=quality)
        try:
            os.replace(tmp, folder)
        except OSError:
            if not folder.is_dir():
                raise
            # Another process finished the same set first; its files are identical.
            log.debug("synthetic set %s was generated concurrently; using it", folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

"""Encoded image samples on disk: scanning an ImageFolder tree or generating synthetic JPEGs."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, UnidentifiedImageError

from autotune.errors import UsageError

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
# Bump whenever synthetic output changes, so stale caches are not reused.
GENERATOR_VERSION = 1
_FIX_ROOT = "set dataset.root=PATH to a folder of class sub-folders"


@dataclass(frozen=True)
class Source:
    """Encoded samples on disk: what a trial reads. Picklable (sent to DataLoader workers).

    Attributes:
        root: Dataset folder (absolute).
        paths: Absolute file paths, grouped by class in class order, sorted within a class.
        labels: Class index of each path.
        classes: Sorted class folder names; a label is an index into this.
        skipped: ``(path, reason)`` for files with an image extension that are not usable.
    """

    root: Path
    paths: tuple[str, ...]
    labels: tuple[int, ...]
    classes: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...] = ()

    def __len__(self) -> int:
        return len(self.paths)

    def read(self, index: int) -> bytes:
        """Returns the encoded bytes of sample ``index``."""
        with open(self.paths[index], "rb") as f:
            return f.read()

    def fingerprint(self) -> str:
        """Returns a short hash of root, sample count, classes and file names and sizes.

        Cheap (one ``stat`` per file, no reads); used to refuse resuming a study on changed data.
        """
        h = hashlib.sha256(json.dumps([str(self.root), len(self.paths), self.classes]).encode())
        for path in self.paths:
            try:
                size = os.stat(path).st_size
            except OSError:
                size = -1
            h.update(f"{os.path.relpath(path, self.root)}\0{size}\n".encode())
        return h.hexdigest()[:16]


def default_cache_dir() -> Path:
    """Returns $AUTOTUNE_CACHE, else $XDG_CACHE_HOME/autotune, else ~/.cache/autotune."""
    if os.environ.get("AUTOTUNE_CACHE"):
        return Path(os.environ["AUTOTUNE_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg).expanduser() / "autotune"


def _check_image(path: str) -> str | None:
    """Returns why ``path`` is not a usable image, or None. Reads only header and tail."""
    try:
        size = os.path.getsize(path)
        if size == 0:
            return "empty file"
        with open(path, "rb") as f:
            # JPEG by signature (as PIL does) so that a cut-off header also reads as truncated.
            if f.read(3) == b"\xff\xd8\xff":
                # Some encoders pad after EOI, so look in the last 16 bytes, not just the last 2.
                f.seek(max(0, size - 16))
                if b"\xff\xd9" not in f.read():
                    return "truncated JPEG"
            f.seek(0)
            try:
                with Image.open(f):  # lazy: parses the header only
                    pass
            except UnidentifiedImageError:
                return "not an image"
            except Exception as exc:  # noqa: BLE001 - any parser failure means unusable
                return f"unreadable image ({type(exc).__name__}: {exc})"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    return None


def _walk(folder: Path, extensions: tuple[str, ...]) -> list[str]:
    """Returns sorted non-hidden files under ``folder``, recursively, with those extensions."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]  # prune hidden folders
        found += [
            os.path.join(dirpath, name)
            for name in filenames
            if not name.startswith(".") and name.lower().endswith(extensions)
        ]
    return sorted(found)


def scan_imagefolder(
    root: str | Path,
    *,
    extensions: tuple[str, ...] = IMAGE_EXTENSIONS,
    max_bad_fraction: float = 0.5,
) -> Source:
    """Scans ``root/<class>/**/<image>`` into a Source, checking every file cheaply.

    Args:
        root: Folder of class sub-folders; images may be nested deeper inside a class folder.
        extensions: File name endings (compared lower-case) treated as images; others ignored.
        max_bad_fraction: Largest tolerated fraction of image-named files that are unusable.

    Returns:
        The usable images; unusable ones are listed in ``Source.skipped`` with a reason.

    Raises:
        UsageError: root is missing or not a folder, holds no images, or too many are bad.
    """
    if not 0.0 <= max_bad_fraction <= 1.0:
        raise UsageError(f"max_bad_fraction must be within [0, 1], got {max_bad_fraction}")
    root_path = Path(root).expanduser()
    if not root_path.exists():
        raise UsageError(f"dataset folder {root_path} does not exist: {_FIX_ROOT}")
    if not root_path.is_dir():
        raise UsageError(f"dataset root {root_path} is not a folder: {_FIX_ROOT}")
    root_path = root_path.resolve()
    exts = tuple(e.lower() for e in extensions)

    good: dict[str, list[str]] = {}
    skipped: list[tuple[str, str]] = []
    class_dirs = [p for p in root_path.iterdir() if p.is_dir() and not p.name.startswith(".")]
    for class_dir in sorted(class_dirs):
        for path in _walk(class_dir, exts):
            reason = _check_image(path)
            if reason is None:
                good.setdefault(class_dir.name, []).append(path)
            else:
                skipped.append((path, reason))

    total = sum(map(len, good.values())) + len(skipped)
    if skipped and len(skipped) > max_bad_fraction * total:
        first, reason = skipped[0]
        raise UsageError(
            f"{len(skipped)} of {total} files under {root_path} are not readable images "
            f"(first: {first}: {reason}); fix or remove them"
        )
    if not good:
        patterns = ", ".join(f"*{e}" for e in exts[:3]) + (", ..." if len(exts) > 3 else "")
        raise UsageError(
            f"dataset folder {root_path} holds no images ({patterns}) in class sub-folders; "
            f"expected {root_path}/<class>/<image>"
        )
    if skipped:
        shown = ", ".join(f"{p} ({r})" for p, r in skipped[:3])
        more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        log.warning(
            "skipped %d of %d files under %s that are not readable images: %s%s",
            len(skipped),
            total,
            root_path,
            shown,
            more,
        )
    classes = tuple(sorted(good))
    paths = tuple(p for c in classes for p in good[c])
    labels = tuple(i for i, c in enumerate(classes) for _ in good[c])
    return Source(root_path, paths, labels, classes, tuple(skipped))


def _imagenet_like_size(rng: np.random.Generator) -> tuple[int, int]:
    """Draws (width, height): shorter side 300-500, aspect 4:3 to 16:9, mostly landscape."""
    short = int(np.clip(rng.normal(340, 35), 300, 500))
    aspect = 4 / 3 if rng.random() < 0.5 else rng.uniform(4 / 3, 16 / 9)  # 4:3 is the common case
    long = round(short * aspect)
    return (long, short) if rng.random() < 0.75 else (short, long)


def _upsample(a: np.ndarray, w: int, h: int) -> np.ndarray:
    """Bilinearly resizes a float32 2-D array to (h, w)."""
    if a.shape == (h, w):
        return a
    return np.asarray(Image.fromarray(a, "F").resize((w, h), Image.Resampling.BILINEAR))


def _render(seed: int, index: int, num_classes: int, size: tuple[int, int] | None) -> Image.Image:
    """Renders one photo-like image: smooth colour field, soft shapes, film-grain texture."""
    rng = np.random.default_rng([seed, index])  # not seed+index: seeds 0 and 1 must not overlap
    class_rng = np.random.default_rng([seed, num_classes, index % num_classes])
    palette = class_rng.uniform(0, 255, (5, 3))  # shared by a class: labels mean something
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


def synthetic(
    *,
    count: int = 512,
    num_classes: int = 8,
    size: tuple[int, int] | None = None,
    seed: int = 0,
    quality: int = 90,
    cache_dir: str | Path | None = None,
) -> Source:
    """Returns deterministic photo-like JPEGs, generated once and cached on disk.

    Args:
        count: Number of images; image ``i`` gets label ``i % num_classes``.
        num_classes: Number of class folders (``class_00``, ...).
        size: Fixed (width, height), or None for varied ImageNet-like sizes.
        seed: Seed of the content; same parameters give byte-identical files.
        quality: JPEG quality (1-100).
        cache_dir: Folder that holds generated sets; default ``default_cache_dir()``.

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
    key = hashlib.sha256(json.dumps(params).encode()).hexdigest()[:12]
    base = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    folder = base / f"synthetic-{key}"
    if not folder.is_dir():
        try:
            _generate(folder, count, num_classes, size, seed, quality)
        except OSError as exc:
            raise UsageError(
                f"cannot write synthetic images under {base} ({exc.strerror or exc}): "
                "set AUTOTUNE_CACHE=DIR to a writable folder"
            ) from exc
    return scan_imagefolder(folder)


def _generate(
    folder: Path, count: int, classes: int, size: tuple[int, int] | None, seed: int, quality: int
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
            path = tmp / f"class_{i % classes:0{cwidth}d}" / f"img_{i:0{iwidth}d}.jpg"
            _render(seed, i, classes, size).save(path, "JPEG", quality=quality)
        try:
            os.replace(tmp, folder)
        except OSError:
            if not folder.is_dir():
                raise
            # Another process finished the same set first; its files are identical.
            log.debug("synthetic set %s was generated concurrently; using it", folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

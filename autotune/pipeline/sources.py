"""Encoded image samples on disk: an ImageFolder tree scanned into a ``Source``, or a set of
synthetic JPEGs generated into one."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from autotune.errors import UsageError
from autotune.pipeline import synthetic_images

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
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

    def fingerprint(self, *, mtimes: bool = False) -> str:
        """Returns a short hash of root, sample count, classes and file names and sizes
        (``mtimes``: and modification times, where a file rewritten in place must count).

        Cheap (one ``stat`` per file, no reads); used to refuse resuming a study on changed data.
        """
        h = hashlib.sha256(json.dumps([str(self.root), len(self.paths), self.classes]).encode())
        for path in self.paths:
            try:
                st = os.stat(path)
                size, mtime = st.st_size, st.st_mtime_ns
            except OSError:
                size = mtime = -1
            when = f"\0{mtime}" if mtimes else ""
            h.update(f"{os.path.relpath(path, self.root)}\0{size}{when}\n".encode())
        return h.hexdigest()[:16]


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
    root_path = _existing_folder(root)
    exts = tuple(e.lower() for e in extensions)
    good, skipped = _sort_files(root_path, exts)
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
        _warn_skipped(skipped, total, root_path)
    classes = tuple(sorted(good))
    paths = tuple(p for c in classes for p in good[c])
    labels = tuple(i for i, c in enumerate(classes) for _ in good[c])
    return Source(root_path, paths, labels, classes, tuple(skipped))


def _existing_folder(root: str | Path) -> Path:
    root_path = Path(root).expanduser()
    if not root_path.exists():
        raise UsageError(f"dataset folder {root_path} does not exist: {_FIX_ROOT}")
    if not root_path.is_dir():
        raise UsageError(f"dataset root {root_path} is not a folder: {_FIX_ROOT}")
    return root_path.resolve()


def _sort_files(
    root: Path, exts: tuple[str, ...]
) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """The usable images by class folder name, and ``(path, reason)`` for the others."""
    good: dict[str, list[str]] = {}
    skipped: list[tuple[str, str]] = []
    class_dirs = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    for class_dir in sorted(class_dirs):
        for path in _walk(class_dir, exts):
            reason = _check_image(path)
            if reason is None:
                good.setdefault(class_dir.name, []).append(path)
            else:
                skipped.append((path, reason))
    return good, skipped


def _warn_skipped(skipped: list[tuple[str, str]], total: int, root: Path) -> None:
    shown = ", ".join(f"{p} ({r})" for p, r in skipped[:3])
    more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    log.warning(
        "skipped %d of %d files under %s that are not readable images: %s%s",
        len(skipped),
        total,
        root,
        shown,
        more,
    )


def synthetic(
    *,
    count: int = 512,
    num_classes: int = 8,
    size: tuple[int, int] | None = None,
    seed: int = 0,
    quality: int = 90,
    cache_dir: str | Path | None = None,
    uneven: bool = False,
) -> Source:
    """Returns deterministic photo-like images (JPEGs; PNGs too when ``uneven``), generated
    once and cached on disk.

    Args:
        count: Number of images; image ``i`` gets label ``i % num_classes``.
        num_classes: Number of class folders (``class_00``, ...).
        size: Fixed (width, height), or None for varied ImageNet-like sizes.
        seed: Seed of the content; same parameters give byte-identical files.
        quality: JPEG quality (1-100).
        uneven: mixed like a folder of photographs: sizes 120-2400 px on the shorter side,
            a fifth PNGs (some with alpha), a quarter of the JPEGs progressive.
        cache_dir: Folder that holds generated sets; default
            ``synthetic_images.default_cache_dir()``.

    Raises:
        UsageError: a parameter is out of range or the cache folder is not writable.
    """
    folder = synthetic_images.folder(
        count=count,
        num_classes=num_classes,
        size=size,
        seed=seed,
        quality=quality,
        cache_dir=cache_dir,
        uneven=uneven,
    )
    return scan_imagefolder(folder)

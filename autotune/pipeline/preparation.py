"""Making a prepared copy (``prepared``): once per dataset, recipe and kind, with one process
per usable CPU as a user would, into a temporary folder renamed once complete; timed, since
that time is what the tuner charges against the epochs the copy serves.

Example:
    >>> copy = ensure(source, recipe, "decoded", Path("studies/prepared"), processes=8)
    >>> copy.seconds, copy.data()      # the time it took once, and what the workers read
"""

from __future__ import annotations

import fcntl
import io
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision.transforms.v2 import functional as TF
from tqdm import tqdm

from autotune.errors import UsageError
from autotune.pipeline import decoders
from autotune.pipeline.prepared import (
    FORMAT,
    KINDS,
    MANIFEST,
    PIXELS,
    PreparedCopy,
    folder_of,
    load,
)
from autotune.pipeline.recipes import Recipe
from autotune.pipeline.recipes.base import decode
from autotune.pipeline.sources import Source

log = logging.getLogger(__name__)

_QUALITY = 95  # a resized copy's JPEGs
_CHUNK = 64  # images per task of the preparing processes


def ensure(
    source: Source,
    recipe: Recipe,
    kind: str,
    root: Path,
    *,
    processes: int,
    progress: bool = False,
) -> PreparedCopy:
    """The copy of ``source`` for ``recipe`` under ``root``, prepared first if there is none
    (one process at a time per copy: others wait and find it)."""
    if kind not in KINDS[1:]:
        raise UsageError(f"cache must be one of {KINDS}, got {kind!r}")
    folder = folder_of(source, recipe, kind, root)
    found = load(folder, source)
    if found is not None:
        return found
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".{folder.name}.lock"):
        found = load(folder, source)
        if found is not None:
            return found
        log.info("preparing a %s copy of %d images in %s", kind, len(source), folder)
        copy = _prepare(source, recipe, kind, folder, processes=processes, progress=progress)
        log.info(
            "prepared the %s copy in %.1f s (%.0f MiB)", kind, copy.seconds, copy.nbytes / 2**20
        )
        return copy


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the holder exits, even killed
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _prepare(
    source: Source, recipe: Recipe, kind: str, folder: Path, *, processes: int, progress: bool
) -> PreparedCopy:
    start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        chunks = [range(i, min(i + _CHUNK, len(source))) for i in range(0, len(source), _CHUNK)]
        files: list[str] = []
        # forked, as DataLoader's workers are (spawning would re-run a script without a
        # __main__ guard), each on one torch thread as they are
        with ProcessPoolExecutor(max(1, processes), mp_context=get_context("fork")) as pool:
            measured = pool.map(_sizes, [(source, recipe, list(c)) for c in chunks])
            sizes = [size for chunk in measured for size in chunk]
            offsets = np.concatenate([[0], np.cumsum([3 * h * w for h, w in sizes])])
            if kind == "decoded":
                shape = (max(1, int(offsets[-1])),)
                np.memmap(tmp / PIXELS, dtype=np.uint8, mode="w+", shape=shape).flush()
            tasks = [
                (source, list(c), [sizes[i] for i in c], int(offsets[c[0]]), kind, str(tmp))
                for c in chunks
            ]
            bar = tqdm(total=len(source), disable=not progress, unit="image", desc=kind)
            for written in pool.map(_prepare_chunk, tasks):
                files += written
                bar.update(len(written))
            bar.close()
        seconds = time.perf_counter() - start
        nbytes = sum(f.stat().st_size for f in tmp.iterdir())
        manifest = {
            "format": FORMAT,
            "kind": kind,
            "count": len(source),
            "seconds": round(seconds, 3),
            "nbytes": nbytes,
            "source": str(source.root),
            "recipe": recipe.settings(),
            "sizes": [list(s) for s in sizes],
            "files": files if kind == "resized" else [],
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest))
        if folder.exists():  # an incomplete copy of an older run: replaced
            shutil.rmtree(folder)
        tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    copy = load(folder, source)
    assert copy is not None
    return copy


def _sizes(task: tuple[Source, Recipe, list[int]]) -> list[tuple[int, int]]:
    """(height, width) of the images ``indices`` as prepared (as displayed: EXIF orientation
    applied), from their headers (in a pool process)."""
    source, recipe, indices = task
    sizes = []
    for i in indices:
        width, height, _ = decoders.probe(source.read(i))
        out_w, out_h = recipe.prepared_size(width, height)
        sizes.append((out_h, out_w))
    return sizes


def _prepare_chunk(
    task: tuple[Source, list[int], list[tuple[int, int]], int, str, str],
) -> list[str]:
    """Prepares the images ``indices`` of ``source`` into ``folder`` (in a pool process):
    a decoded copy's pixels from byte ``offset`` of its file on; the names of a resized
    copy's files."""
    source, indices, sizes, offset, kind, folder = task
    torch.set_num_threads(1)  # one process per CPU, as DataLoader's workers
    if kind == "resized":
        return [
            _write_resized(source.read(i), (h, w), Path(folder), i)
            for i, (h, w) in zip(indices, sizes, strict=True)
        ]
    pixels = np.memmap(Path(folder) / PIXELS, dtype=np.uint8, mode="r+")
    for i, (h, w) in zip(indices, sizes, strict=True):
        image = _displayed(source.read(i), (h, w))
        pixels[offset : offset + 3 * h * w] = image.contiguous().view(-1).numpy()
        offset += 3 * h * w
    pixels.flush()
    return [str(i) for i in indices]


def _displayed(data: bytes, size: tuple[int, int]) -> torch.Tensor:
    """``uint8 (3, h, w)``: decoded and oriented as the pipeline's ``pil`` decoder does, then
    resized with the recipes' own resize (antialiased bilinear)."""
    _, _, orientation = decoders.probe(data)
    image = decode(data, decoders.PilDecoder(), orientation, plan=None)
    return TF.resize(image, list(size), antialias=True)


def _write_resized(data: bytes, size: tuple[int, int], folder: Path, index: int) -> str:
    """Sample ``index`` into ``folder``: as it is where the recipe needs it whole (its own
    format), else re-encoded at ``size`` as JPEG. Returns the file's name."""
    width, height, _ = decoders.probe(data)
    if (height, width) == size:
        with Image.open(io.BytesIO(data)) as img:
            name = f"{index:09d}.{(img.format or 'bin').lower()}"
        (folder / name).write_bytes(data)
        return name
    name = f"{index:09d}.jpg"
    pixels = _displayed(data, size).permute(1, 2, 0).numpy()
    Image.fromarray(pixels).save(folder / name, quality=_QUALITY)
    return name

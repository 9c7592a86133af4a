"""Prepared copies of an image source: the work every epoch repeats, done once.

- ``resized``: each image re-encoded (JPEG, quality 95) at the smallest size the recipe needs,
  never below it (``Recipe.prepared_size``: every crop the recipe can draw keeps the pixels
  its output needs, the rule a reduced decode follows per sample); an image the recipe needs
  whole is copied as it is.
- ``decoded``: uint8 pixels at that size, in one memory-mapped file that every worker and rank
  reads through the page cache, without a copy per process.

A copy lives in ``<root>/<kind>-<key>/``; the key hashes the source's files (names, sizes and
modification times), the recipe's settings and the kind, so a changed dataset or recipe never
finds a stale copy. ``preparation.ensure`` makes one.

Example:
    >>> copy = find(source, recipe, "decoded", Path("studies/prepared"))
    >>> copy.seconds, copy.data()      # the time preparing took once, what workers read
"""

from __future__ import annotations

import hashlib
import json
import random
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from autotune.pipeline import decoders
from autotune.pipeline.recipes import Recipe
from autotune.pipeline.sources import Source

KINDS = ("none", "resized", "decoded")
MANIFEST = "prepared.json"
PIXELS = "pixels.u8"
FORMAT = 1  # bumped when what a copy holds changes: older copies are not found


@dataclass(frozen=True)
class PreparedCopy:
    """A complete prepared copy (picklable: sent to trials and their workers).

    Attributes:
        kind: ``resized`` or ``decoded``.
        folder: Where it lives.
        seconds: The wall time preparing it took on this machine, once.
        nbytes: Its size on disk.
        sizes: (height, width) of each image as prepared, in the source's order.
        files: A resized copy's file of each image, in the source's order.
        source: The source it was prepared from (its labels, classes and file names).
    """

    kind: str
    folder: Path
    seconds: float
    nbytes: int
    sizes: tuple[tuple[int, int], ...]
    files: tuple[str, ...]
    source: Source

    @property
    def paths(self) -> list[str]:
        """The files a reader of the copy reads (for the page cache: evicted, warmed)."""
        if self.kind == "resized":
            return [str(self.folder / name) for name in self.files]
        return [str(self.folder / PIXELS)]

    def data(self) -> Source | DecodedPixels:
        """What the workers read: a Source of the resized files, or the decoded pixels."""
        if self.kind == "resized":
            return Source(
                self.folder,
                tuple(str(self.folder / name) for name in self.files),
                self.source.labels,
                self.source.classes,
            )
        return DecodedPixels(self)


class DecodedPixels:
    """A decoded copy read like a ``Source``: ``read(i)`` gives sample i's ``uint8 (3, H, W)``
    pixels, a view of the memory-mapped file (opened lazily, once per process)."""

    def __init__(self, copy: PreparedCopy) -> None:
        self.copy = copy
        self.root, self.paths = copy.source.root, copy.source.paths
        self.labels, self.classes = copy.source.labels, copy.source.classes
        sizes = np.array(copy.sizes, dtype=np.int64).reshape(-1, 2)
        ends = np.cumsum(3 * sizes[:, 0] * sizes[:, 1])
        self._offsets = np.concatenate([[0], ends[:-1]])
        self._pixels: np.memmap | None = None

    def __len__(self) -> int:
        return len(self.paths)

    def read(self, index: int) -> torch.Tensor:
        if self._pixels is None:
            self._pixels = np.memmap(self.copy.folder / PIXELS, dtype=np.uint8, mode="r")
        h, w = self.copy.sizes[index]
        start = int(self._offsets[index])
        with warnings.catch_warnings():  # read-only pages: nothing writes a sample in place
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(self._pixels[start : start + 3 * h * w]).view(3, h, w)

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_pixels": None}  # each process maps the file itself


def key(source: Source, recipe: Recipe, kind: str) -> str:
    """What a copy is keyed by: the files (names, sizes, modification times), the recipe's
    settings and the kind."""
    h = hashlib.sha256(json.dumps([FORMAT, kind, recipe.settings()]).encode())
    h.update(source.fingerprint(mtimes=True).encode())
    return h.hexdigest()[:16]


def folder_of(source: Source, recipe: Recipe, kind: str, root: Path) -> Path:
    return Path(root) / f"{kind}-{key(source, recipe, kind)}"


def find(source: Source, recipe: Recipe, kind: str, root: Path) -> PreparedCopy | None:
    """The complete copy of ``source`` for ``recipe``, if one was prepared under ``root``."""
    return load(folder_of(source, recipe, kind, root), source)


@dataclass(frozen=True)
class SampledSizes:
    """Up to 256 files drawn across a source, read once: each one's encoded bytes, its size
    and its size as prepared; what a copy would hold is extrapolated from them."""

    files: tuple[tuple[int, int, int, int, int], ...]  # bytes, width, height, out_w, out_h
    count: int  # files in the source

    @classmethod
    def of(cls, source: Source, recipe: Recipe, *, samples: int = 256) -> SampledSizes:
        picked = random.Random(0).sample(range(len(source)), min(samples, len(source)))
        files = []
        for i in picked:
            data = source.read(i)
            width, height, _ = decoders.probe(data)
            files.append((len(data), width, height, *recipe.prepared_size(width, height)))
        return cls(tuple(files), len(source))

    def pixel_share(self) -> float:
        """The share of the pixels a resized copy keeps (1.0: the recipe needs them all)."""
        kept = sum(out_w * out_h for _, _, _, out_w, out_h in self.files)
        whole = sum(w * h for _, w, h, _, _ in self.files)
        return kept / whole if whole else 1.0

    def estimate_bytes(self, kind: str) -> int:
        """The size a copy would have (exact when the source has no more files)."""
        total = 0
        for nbytes, width, height, out_w, out_h in self.files:
            if kind == "decoded":
                total += 3 * out_w * out_h
            elif (out_w, out_h) == (width, height):
                total += nbytes
            else:  # re-encoded: about the same bytes per pixel as the original
                total += round(nbytes * out_w * out_h / (width * height))
        return round(total * self.count / max(1, len(self.files)))


def load(folder: Path, source: Source) -> PreparedCopy | None:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("format") != FORMAT or manifest.get("count") != len(source):
        return None
    return PreparedCopy(
        kind=manifest["kind"],
        folder=folder,
        seconds=float(manifest["seconds"]),
        nbytes=int(manifest["nbytes"]),
        sizes=tuple((int(h), int(w)) for h, w in manifest["sizes"]),
        files=tuple(manifest.get("files", ())),
        source=source,
    )

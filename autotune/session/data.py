"""What a run reads: the ``dataset`` config group as samples, an image folder (scanned, or
generated synthetic JPEGs) or the user's own Dataset (checked on two of its samples)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.errors import UsageError
from autotune.pipeline import sources
from autotune.pipeline.user_data import Data, UserData
from autotune.schema import DatasetConfig


def load_source(cfg: DatasetConfig, instance: Any = None) -> tuple[Data, Any]:
    """The dataset's samples: the user's own Dataset (checked; with a batch of two of its
    samples; ``instance``: a Dataset object of class ``_target_``), generated (and cached)
    synthetic JPEGs, or an image folder (no batch)."""
    if cfg._target_:
        return UserData.inspect(cfg._target_, cfg.kwargs, cfg.collate_fn, instance=instance)
    return _image_source(cfg), None


def _image_source(cfg: DatasetConfig) -> Data:
    if cfg.kind == "synthetic":
        size = (cfg.width, cfg.height) if cfg.width and cfg.height else None
        return sources.synthetic(
            count=cfg.count,
            num_classes=cfg.num_classes,
            size=size,
            seed=cfg.seed,
            quality=cfg.quality,
            uneven=cfg.uneven,
        )
    if not cfg.root:
        raise UsageError("dataset.root is not set: add dataset.root=PATH (class sub-folders)")
    return sources.scan_imagefolder(Path(cfg.root).expanduser())

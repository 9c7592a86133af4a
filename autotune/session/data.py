"""What a run reads: the ``dataset`` config group as samples, an image folder (scanned, or
generated synthetic JPEGs) or the user's own Dataset (checked on two of its samples)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.errors import UsageError
from autotune.pipeline import sources
from autotune.pipeline.user_data import Data, UserData
from autotune.schema import DatasetConfig


def load_source(dataset_conf: DatasetConfig, instance: Any = None) -> tuple[Data, Any]:
    """The dataset's samples: the user's own Dataset (checked; with a batch of two of its
    samples; ``instance``: a Dataset object of class ``_target_``), generated (and cached)
    synthetic JPEGs, or an image folder (no batch)."""
    if dataset_conf._target_:
        return UserData.inspect(
            dataset_conf._target_, dataset_conf.kwargs, dataset_conf.collate_fn, instance=instance
        )
    return _image_source(dataset_conf), None


def _image_source(dataset_conf: DatasetConfig) -> Data:
    if dataset_conf.kind == "synthetic":
        size = (
            (dataset_conf.width, dataset_conf.height)
            if dataset_conf.width and dataset_conf.height
            else None
        )
        return sources.synthetic(
            count=dataset_conf.count,
            num_classes=dataset_conf.num_classes,
            size=size,
            seed=dataset_conf.seed,
            quality=dataset_conf.quality,
            uneven=dataset_conf.uneven,
        )
    if not dataset_conf.root:
        raise UsageError("dataset.root is not set: add dataset.root=PATH (class sub-folders)")
    return sources.scan_imagefolder(Path(dataset_conf.root).expanduser())

"""autotune: measure and pick the fastest input pipeline for a PyTorch training job.

Example:
    >>> from autotune import build_loader
    >>> loader = build_loader("data/train", "studies/mine-resnet50/best.yaml")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.app.from_python import tune
    from autotune.online.loader import DataLoader
    from autotune.pipeline.config import PipelineConfig
    from autotune.pipeline.user_api import build_loader, load_pipeline_config, loader_kwargs

# each public name and the module that defines it, imported when first asked for: a script
# that only applies a result stays light, and a tool importing one module of the package
# (``autotune.tuner.lease``) loads neither torch nor Optuna through this file
_PUBLIC = {
    "DataLoader": "autotune.online.loader",
    "PipelineConfig": "autotune.pipeline.config",
    "build_loader": "autotune.pipeline.user_api",
    "load_pipeline_config": "autotune.pipeline.user_api",
    "loader_kwargs": "autotune.pipeline.user_api",
    "tune": "autotune.app.from_python",
}
__all__ = [
    "DataLoader",
    "PipelineConfig",
    "build_loader",
    "load_pipeline_config",
    "loader_kwargs",
    "tune",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # looked up once
    return value

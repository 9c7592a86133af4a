"""autotune: measure and pick the fastest input pipeline for a PyTorch training job.

Example:
    >>> from autotune import build_loader
    >>> loader = build_loader("data/train", "studies/mine-resnet50/best.yaml")
"""

from typing import Any

from autotune.online.loader import DataLoader
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.user_api import build_loader, load_pipeline_config, loader_kwargs

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
    # tune runs studies (Optuna, Hydra): imported when asked for, so that a training script
    # that only applies a result stays light
    if name == "tune":
        from autotune.app.from_python import tune

        return tune
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")

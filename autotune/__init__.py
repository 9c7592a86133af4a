"""autotune: measure and pick the fastest input pipeline for a PyTorch training job.

Example:
    >>> from autotune import build_loader
    >>> loader = build_loader("data/train", "studies/mine-resnet50/best.yaml")
"""

from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.user_api import build_loader, load_pipeline_config, loader_kwargs

__all__ = ["PipelineConfig", "build_loader", "load_pipeline_config", "loader_kwargs"]
__version__ = "0.1.0"

"""autotune: measure and pick the fastest input pipeline for a PyTorch training job."""

from autotune.pipeline.config import PipelineConfig

__all__ = ["PipelineConfig"]
__version__ = "0.1.0"

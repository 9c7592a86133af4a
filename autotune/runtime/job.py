"""What one trial measures: a pipeline on a source, a workload and a window, or real epochs of
one way of loading the data (pickled to the trial's child process)."""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass, field
from typing import Literal

from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.prepared import PreparedCopy
from autotune.pipeline.user_data import Data
from autotune.schema import ModelConfig, OptimizerConfig, RecipeConfig, StepConfig, WindowConfig


@dataclass(frozen=True)
class EpochRun:
    """What a ``kind="epochs"`` job times: whole epochs of one arm (``runtime.epochs``)."""

    arm: str  # baseline | loader_kwargs | build_loader
    epochs: int  # timed after the run's first epoch, which is timed apart
    best_path: str | None = None  # the best.yaml the tuned arms load, as a user does
    # a seeded subset: indices of the samples read (a folder's i-th file, a Dataset's index
    # i), in order; None: all
    subset: tuple[int, ...] | None = None


@dataclass(frozen=True)
class TrialJob:
    """Everything one measurement needs (pickled to the child)."""

    pipeline: PipelineConfig
    source: Data  # an image folder, or the user's own Dataset (by name)
    model: ModelConfig
    recipe: RecipeConfig
    window: WindowConfig
    device: str
    seed: int = 0
    kind: Literal["window", "ceiling", "epochs"] = "window"
    memory_limit_bytes: int | None = None  # per process, beyond what it holds at start
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    precision: str = "fp32"  # fp32 | bf16 | fp16: autocast in the step
    step: StepConfig = field(default_factory=StepConfig)  # the loss: the user's, or the default
    # torch.compile the model, with Inductor's cache of compiled code in this folder
    compile_cache: str | None = None
    epochs: EpochRun | None = None  # kind="epochs" only
    # how DataLoader workers start: the default of the process that asked for the trial,
    # which is what the user's training script gets (not the fork server's)
    worker_start_method: str = field(default_factory=lambda: multiprocessing.get_start_method())
    # processes that train together under DDP, each with its own DataLoader (``ranks``)
    ranks: int = 1
    prepared: PreparedCopy | None = None  # the copy ``pipeline.cache`` names, ready

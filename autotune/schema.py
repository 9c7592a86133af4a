"""The configuration schema: typed dataclasses registered in Hydra's ConfigStore.

The YAML files under ``conf/`` fill these in; OmegaConf rejects unknown keys and wrong types
when they are composed, and ``__post_init__`` checks the rules types cannot express. The core
takes these dataclasses (converted once, in ``app/cli.py``), never a ``DictConfig``.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

from autotune.errors import UsageError


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)


@dataclass
class DatasetConfig:
    name: str = "synthetic"
    kind: str = "synthetic"  # synthetic | imagefolder
    root: str | None = None
    # your own Dataset: dataset._target_=pkg.module.Class (or a factory), built with kwargs;
    # then kind, root and the synthetic keys are not used
    _target_: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    collate_fn: str | None = None  # a dotted path; None: DataLoader's default collate
    # synthetic only: generated once from the seed, cached
    count: int = 512
    num_classes: int = 8
    width: int | None = None  # None with height None: varied ImageNet-like sizes
    height: int | None = None
    seed: int = 0
    quality: int = 90
    # like a photo folder: thumbnails to originals, PNGs, progressive JPEGs (no width/height)
    uneven: bool = False

    def __post_init__(self) -> None:
        if self._target_:
            return  # the user's own Dataset: checked when it is built
        _require(
            self.kind in ("synthetic", "imagefolder"),
            f"dataset.kind must be 'synthetic' or 'imagefolder', got {self.kind!r}",
        )
        _require(self.count >= 1, f"dataset.count must be >= 1, got {self.count}")
        _require(
            (self.width is None) == (self.height is None),
            "set both dataset.width and dataset.height (or neither, for varied sizes)",
        )
        _require(
            self.kind != "imagefolder" or bool(self.root),
            "dataset.root is not set: add dataset.root=PATH (the folder of class sub-folders)",
        )


@dataclass
class ModelConfig:
    name: str = "tiny"
    # Any nn.Module: model._target_=pkg.module.Class (random init; kwargs passed through)
    _target_: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    lr: float = 0.01


@dataclass
class OptimizerConfig:
    """The optimizer of the timed step: any ``torch.optim.Optimizer`` by ``_target_``, built
    on the model's parameters with ``kwargs`` (``lr`` defaults to ``model.lr``; SGD without
    kwargs gets momentum 0.9, as training recipes use it)."""

    _target_: str = "torch.optim.SGD"
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepConfig:
    """The loss of the timed step: ``_target_`` names a function ``(model, batch) -> loss``
    (a dotted path); None: cross-entropy of ``model(inputs)`` against ``labels`` for batches
    of ``(inputs, labels)``."""

    _target_: str | None = None


PRECISIONS = ("fp32", "bf16", "fp16")


@dataclass
class RecipeConfig:
    name: str = "imagenet_train"  # imagenet_train | center_crop_eval
    crop_size: int = 224
    resize_size: int | None = None  # eval: shorter side before the centre crop (crop * 256/224)
    scale: list[float] = field(default_factory=lambda: [0.08, 1.0])
    ratio: list[float] = field(default_factory=lambda: [3 / 4, 4 / 3])
    flip_p: float = 0.5
    mean: list[float] = field(default_factory=lambda: [0.485, 0.456, 0.406])
    std: list[float] = field(default_factory=lambda: [0.229, 0.224, 0.225])

    def __post_init__(self) -> None:
        _require(self.crop_size >= 8, f"recipe.crop_size must be >= 8, got {self.crop_size}")
        _require(
            len(self.scale) == 2 and 0 < self.scale[0] <= self.scale[1] <= 1,
            f"recipe.scale must be [low, high] with 0 < low <= high <= 1, got {self.scale}",
        )
        _require(
            len(self.ratio) == 2 and 0 < self.ratio[0] <= self.ratio[1],
            f"recipe.ratio must be [low, high] with 0 < low <= high, got {self.ratio}",
        )
        _require(0 <= self.flip_p <= 1, f"recipe.flip_p must be in [0, 1], got {self.flip_p}")


@dataclass
class KnobConfig:
    """One tunable setting. ``type``: int | choice | bool | fixed.

    ``high`` (and ``low``) may be ``cpus``: the usable CPUs of this machine. ``when`` is a
    condition on another knob (``"num_workers > 0"``); ``requires`` a machine feature
    (``cuda``). A knob whose condition does not hold takes its inactive default.
    """

    type: str = "int"
    low: Any = None
    high: Any = None
    step: int = 1
    log: bool = False
    choices: list[Any] | None = None
    value: Any = None
    when: str | None = None
    requires: str | None = None


@dataclass
class SearchSpaceConfig:
    name: str = "default"
    knobs: dict[str, KnobConfig] = field(default_factory=dict)


@dataclass
class StudyConfig:
    name: str = "${dataset.name}-${model.name}"
    storage: str = "sqlite:///${studies_dir}/autotune.db"  # postgresql://...: hosts share it
    n_trials: int = 20  # total trials of the study (a resumed study runs up to this many)
    timeout: float | None = None  # seconds for this run's search
    trial_timeout: float = 120.0  # a trial running longer is killed and recorded as timeout
    heartbeat_s: int = 10  # a running trial's; silent for 3 (its host died): failed by others
    seed: int = 0
    n_startup_trials: int = 6  # TPE's random start, after the enqueued baseline
    polish_fraction: float = 0.25  # last trials: the best's unmeasured one-knob neighbours
    as_is_share: float = 0.3  # of the search's trials, on the pipeline as it is (loader_kwargs)
    step_bound_wait: float = 0.05  # a best waiting less for data ends TPE early: the step binds
    stop_when_nothing_left: bool = True  # the rate model: no point left predicted to win ends TPE
    warm_start: bool = True  # a new study first measures earlier studies' picks of its job
    confirm_top_k: int = 3  # finalists re-measured against the baseline, interleaved
    confirm_rounds: int = 2
    worth_budget: float = 0.25  # what each setting is worth: at most this share of the search
    worth_rounds: int = 1  # interleaved rounds of the winner and its variants
    # objective = samples/s over an epoch, each epoch's start (at a real boundary) charged once
    epoch_aware: bool = True
    epochs: int = 1  # planned: a prepared copy (`cache`) costs its preparation / epochs each
    memory_budget_gb: float | None = None  # peak memory of the process tree; over = infeasible
    trial_memory_limit_gb: float | None = None  # hard cap per trial process (RLIMIT_DATA)

    def __post_init__(self) -> None:
        _require(self.n_trials >= 1, f"study.n_trials must be >= 1, got {self.n_trials}")
        timeout_ok = self.timeout is None or self.timeout > 0
        _require(timeout_ok, f"study.timeout must be > 0 seconds, got {self.timeout}")
        _require(self.trial_timeout > 0, "study.trial_timeout must be > 0 seconds")
        _require(self.heartbeat_s >= 1, "study.heartbeat_s must be >= 1 second")
        if self.storage.startswith("postgresql://") and not importlib.util.find_spec("psycopg2"):
            self.storage = "postgresql+psycopg://" + self.storage.removeprefix("postgresql://")
        _require(self.confirm_top_k >= 0, "study.confirm_top_k must be >= 0")
        _require(0 <= self.polish_fraction <= 1, "study.polish_fraction must be in [0, 1]")
        _require(0 <= self.as_is_share <= 1, "study.as_is_share must be in [0, 1]")
        _require(0 <= self.step_bound_wait < 1, "study.step_bound_wait must be in [0, 1)")
        _require(self.confirm_rounds >= 1, "study.confirm_rounds must be >= 1")
        _require(self.worth_budget >= 0, "study.worth_budget must be >= 0 (0: none)")
        _require(self.worth_rounds >= 1, "study.worth_rounds must be >= 1")
        _require(self.epochs >= 1, f"study.epochs must be >= 1, got {self.epochs}")
        for key in ("memory_budget_gb", "trial_memory_limit_gb"):
            value = getattr(self, key)
            _require(value is None or value > 0, f"study.{key} must be > 0 GB, got {value}")


@dataclass
class WindowConfig:
    """The timed training window of one trial: start-up apart, a warm-up past the prefetch
    buffer, then timed sub-windows: all their samples over all their seconds is the rate."""

    warmup_extra_batches: int = 4  # beyond num_workers * prefetch_factor
    sub_windows: int = 3
    batches_per_window: int = 4  # at least; more when a sub-window would be shorter than:
    min_sub_window_s: float = 0.4
    # uneven samples: set after set of sub-windows (each span one sub-window longer) until the
    # last set's (max - min) / median is under this (0: never) or the next passes max_timed_s
    target_spread: float = 0.10
    max_timed_s: float = 20.0
    confirm_max_timed_s: float = 20.0  # of the runs that rank the finalists
    epoch_sub_windows: int = 2  # sub_windows where they are real epochs (each reads all)

    def __post_init__(self) -> None:
        _require(self.warmup_extra_batches >= 1, "window.warmup_extra_batches must be >= 1")
        for key in ("sub_windows", "epoch_sub_windows"):
            _require(getattr(self, key) >= 1, f"window.{key} must be >= 1")
        _require(self.batches_per_window >= 1, "window.batches_per_window must be >= 1")
        _require(self.min_sub_window_s >= 0, "window.min_sub_window_s must be >= 0 seconds")
        _require(self.target_spread >= 0, "window.target_spread must be >= 0 (0: never extend)")
        _require(self.max_timed_s > 0, "window.max_timed_s must be > 0 seconds")
        _require(self.confirm_max_timed_s > 0, "window.confirm_max_timed_s must be > 0 seconds")


@dataclass
class DiagnoseConfig:
    """``mode=diagnose``: how much of the data the in-process stage profile times."""

    samples: int = 512  # timed stage by stage (the stage times, the latency tail); all if fewer
    decoder_samples: int = 64  # the same samples timed with each decoder of the search space
    slowest: int = 10  # slowest files listed
    shards: bool = True  # loose files against shards of some of them, cold and warm

    def __post_init__(self) -> None:
        for key in ("samples", "decoder_samples", "slowest"):
            value = getattr(self, key)
            _require(value >= 1, f"diagnose.{key} must be >= 1, got {value}")


@dataclass
class VerifyConfig:
    """``mode=verify``: real epochs of best.yaml's pipeline against the tutorial pipeline, each
    arm in fresh processes, interleaved."""

    rounds: int = 3  # interleaved rounds of the three arms (A B C A B C ...)
    epochs: int = 2  # timed per run after its first (its one-off start, timed apart)
    # samples an epoch (a seeded subset); None: all, capped to about 5 minutes at best.yaml's rates
    samples: int | None = None

    def __post_init__(self) -> None:
        for key, value in (("rounds", self.rounds), ("epochs", self.epochs)):
            _require(value >= 1, f"verify.{key} must be >= 1, got {value}")
        _require(
            self.samples is None or self.samples >= 1,
            f"verify.samples must be >= 1 (or null for all), got {self.samples}",
        )


MODES = ("tune", "diagnose", "report", "verify")


@dataclass
class AutotuneConfig:
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    recipe: RecipeConfig = field(default_factory=RecipeConfig)
    search_space: SearchSpaceConfig = field(default_factory=SearchSpaceConfig)
    study: StudyConfig = field(default_factory=StudyConfig)
    window: WindowConfig = field(default_factory=WindowConfig)
    diagnose: DiagnoseConfig = field(default_factory=DiagnoseConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    step: StepConfig = field(default_factory=StepConfig)
    # the step's precision: fp32, or autocast to bf16 / fp16 (a GradScaler with fp16 on CUDA)
    precision: str = "fp32"
    # torch.compile the model in each trial's warm-up (never timed), cached under studies_dir
    compile: bool = False
    mode: str = "tune"  # tune | diagnose | report | verify
    pipeline: str | None = None  # diagnose: the best.yaml diagnosed (default: the baseline)
    quiet: bool = False  # results only: no per-trial progress lines, no progress bar
    device: str = "auto"  # auto | cpu | cuda
    ranks: Any = 1  # DDP processes on this node, settings per rank; auto: one a GPU (CUDA)
    batch_size: int = 32
    seed: int = 0  # the loader's seed: augmentation is random but reproducible
    studies_dir: str = "studies"

    def __post_init__(self) -> None:
        _require(
            self.device in ("auto", "cpu", "cuda"),
            f"device must be auto, cpu or cuda, got {self.device!r}",
        )
        _require(self.mode in MODES, f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        _require(
            self.precision in PRECISIONS,
            f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}",
        )
        _require(self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}")
        _require(
            self.ranks == "auto" or (isinstance(self.ranks, int) and self.ranks >= 1),
            f"ranks must be a whole number >= 1 or auto, got {self.ranks!r}",
        )
        one = f"mode={self.mode} times one process: run it with ranks=1 (ranks is for tuning)"
        _require(self.ranks == 1 or self.mode in ("tune", "report"), one)


@functools.cache  # once a process: Hydra deep-copies the stored node at each load
def register_configs() -> None:
    ConfigStore.instance().store(name="autotune_schema", node=AutotuneConfig)

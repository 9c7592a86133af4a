"""The work a trial times: a model by name and its training step (the loss, the user's or
cross-entropy, under the chosen precision; backward; the optimizer by name)."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
import torchvision
from hydra.utils import get_class, get_method
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from autotune.errors import UsageError, imported
from autotune.runtime.job import TrialJob
from autotune.runtime.lightning_module import TrainingStep, is_lightning_module, optimizer_of
from autotune.schema import ModelConfig, OptimizerConfig, StepConfig

TORCHVISION_MODELS = ("resnet18", "resnet50", "mobilenet_v3_small")
BUILTIN_MODELS = ("tiny", "none", *TORCHVISION_MODELS)


class TinyCNN(nn.Module):
    """A small CNN whose step is cheap on a CPU, so that the input pipeline is what matters.

    A patchify stem (8x8, stride 8) then two strided 3x3 stages: a real conv net with
    batch norm, forward and backward, at a small fraction of a ResNet's cost.
    """

    def __init__(self, num_classes: int = 10, width: int = 24) -> None:
        super().__init__()

        def stage(cin: int, cout: int, kernel: int, stride: int) -> list[nn.Module]:
            pad = kernel // 2 if stride < kernel else 0
            conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=pad, bias=False)
            return [conv, nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        self.features = nn.Sequential(
            *stage(3, width, 8, 8),
            *stage(width, 2 * width, 3, 2),
            *stage(2 * width, 4 * width, 3, 2),
        )
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _import_class(target: str) -> Callable[..., nn.Module]:
    module_name, _, attr = target.rpartition(".")
    try:
        module = __import__(module_name, fromlist=[attr]) if module_name else None
        return getattr(module, attr)
    except (ImportError, AttributeError, ValueError):
        raise UsageError(
            f"model._target_={target} cannot be imported: give the full path of an nn.Module "
            "class, e.g. model._target_=torchvision.models.resnet34"
        ) from None


def build_model(model_conf: ModelConfig, *, num_classes: int | None) -> nn.Module | None:
    """The model, randomly initialised (never a download); None for ``model=none``.
    ``num_classes`` is passed where the data knows its classes and the model takes it."""
    if model_conf._target_:
        factory = _import_class(model_conf._target_)
    elif model_conf.name == "none":
        return None
    elif model_conf.name == "tiny":
        factory = TinyCNN
    elif model_conf.name in TORCHVISION_MODELS:
        factory = getattr(torchvision.models, model_conf.name)
    else:
        raise UsageError(
            f"unknown model {model_conf.name!r}: choose one of {', '.join(BUILTIN_MODELS)}, "
            "or any nn.Module with model._target_=pkg.module.Class"
        )
    kwargs = dict(model_conf.kwargs)
    try:
        params = inspect.signature(factory).parameters
        takes = "num_classes" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
        if takes and num_classes is not None:
            kwargs.setdefault("num_classes", num_classes)
    except (TypeError, ValueError):  # builtins without a signature: pass only what was given
        pass
    model = factory(**kwargs)
    if not isinstance(model, nn.Module):
        raise UsageError(
            f"model {model_conf._target_ or model_conf.name} did not build an nn.Module"
        )
    return model


# an optimizer named without kwargs: what training recipes give it
_DEFAULT_KWARGS = {torch.optim.SGD: {"momentum": 0.9}}


def build_optimizer(
    optimizer_conf: OptimizerConfig, params: Iterable[nn.Parameter], *, lr: float
) -> torch.optim.Optimizer:
    """``optimizer_conf._target_(params, lr=lr, **optimizer_conf.kwargs)`` (the kwargs' own
    ``lr`` wins); a target that cannot be imported or built is one line."""
    where = f"optimizer._target_={optimizer_conf._target_}"
    fix = "give the full path of a torch.optim class, e.g. optimizer._target_=torch.optim.AdamW"
    factory = imported(optimizer_conf._target_, "optimizer._target_", fix, get_class)
    kwargs = optimizer_conf.kwargs or _DEFAULT_KWARGS.get(factory, {})
    try:
        return factory(params, **{"lr": lr, **kwargs})
    except Exception as exc:  # noqa: BLE001 - the kwargs the optimizer refuses
        raise UsageError(
            f"{where}: building it with {kwargs} failed: {type(exc).__name__}: {exc} "
            "(check optimizer.kwargs)"
        ) from None


_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}

Loss = Callable[[nn.Module, Any], torch.Tensor]  # (model, batch) -> loss


def build_loss(step_conf: StepConfig) -> Loss | None:
    """The user's ``(model, batch) -> loss`` named by ``step._target_``; None: the default
    (cross-entropy on ``(inputs, labels)``)."""
    if not step_conf._target_:
        return None
    fix = (
        "give the full dotted path of a function (model, batch) -> loss, e.g. "
        "step._target_=mytrain.loss"
    )
    return imported(step_conf._target_, "step._target_", fix, get_method)


def is_pair(batch: Any) -> bool:
    """A batch the default step takes: ``(inputs, labels)``, two tensors."""
    return (
        isinstance(batch, (tuple, list))
        and len(batch) == 2
        and all(isinstance(part, torch.Tensor) for part in batch)
    )


def _form(batch: Any) -> str:
    """A batch's structure in a few words: ``dict(spec, lengths, label)``, ``tuple of 3``."""
    if isinstance(batch, dict):
        return f"dict({', '.join(map(str, batch))})"
    if isinstance(batch, (tuple, list)):
        return f"{type(batch).__name__} of {len(batch)}"
    return type(batch).__name__


class TrainStep:
    """One optimizer step on a batch: the loss (the user's ``loss(model, batch)``, else
    cross-entropy of ``model(inputs)`` against ``labels``) under autocast at ``precision``,
    backward, the optimizer (SGD with momentum unless told otherwise); with fp16 on CUDA, a
    GradScaler as an AMP training loop has.

    With no model (``model=none``) the step does nothing: the loop measures the loader alone.
    ``distributed``: one rank of several, the model in DistributedDataParallel (each
    backward all-reduces the gradients, as a DDP job's does).
    """

    def __init__(
        self,
        model: nn.Module | None,
        device: torch.device,
        *,
        lr: float,
        channels_last: bool = False,
        optimizer: OptimizerConfig | None = None,
        precision: str = "fp32",
        loss: StepConfig | None = None,
        compile: bool = False,
        distributed: bool = False,
    ) -> None:
        self.device = device
        if model is not None:
            # NHWC weights to match NHWC batches (channels_last): else every conv converts
            memory_format = torch.channels_last if channels_last else torch.preserve_format
            model = model.to(device, memory_format=memory_format).train()
            if compile:  # in place: the loss, training_step and forward call it as ever
                model.compile()
        self.model = self.module = model  # the model as called in the step; as built
        self.loss = build_loss(loss or StepConfig())
        # a LightningModule brings its own step and optimizer, unless a loss is named
        self.lightning = self.loss is None and is_lightning_module(model)
        self.steps = 0  # the batch index a LightningModule's training_step is given
        if model is None:
            self.optimizer = None
        elif self.lightning:
            self.optimizer = optimizer_of(model)
        else:
            self.optimizer = build_optimizer(
                optimizer or OptimizerConfig(), model.parameters(), lr=lr
            )
        if model is not None and distributed:
            self.model = _distributed(TrainingStep(model) if self.lightning else model, device)
        elif self.lightning:
            self.model = TrainingStep(model)
        self.criterion = nn.CrossEntropyLoss()
        self.loss_name = (loss or StepConfig())._target_
        self.autocast_dtype = _AUTOCAST.get(precision)
        scales = precision == "fp16" and device.type == "cuda"
        self.scaler = torch.amp.GradScaler("cuda") if scales else None

    def __call__(self, batch: Any) -> None:
        if self.model is None or self.optimizer is None:
            return
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(
            self.device.type,
            dtype=self.autocast_dtype or torch.float32,
            enabled=self.autocast_dtype is not None,
        ):
            loss = self._loss_of(batch)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            return
        loss.backward()
        self.optimizer.step()

    def _loss_of(self, batch: Any) -> torch.Tensor:
        if self.loss is not None:
            return self.loss(self.model, batch)
        if self.lightning:  # the model is its TrainingStep: (batch, index) -> loss
            self.steps += 1
            return self.model(batch, self.steps - 1)
        inputs, labels = batch
        return self.criterion(self.model(inputs), labels)

    def check(self, batch: Any, *, dataset: str) -> None:
        """One step on ``batch`` (a few samples of the user's Dataset), here: a loss that
        cannot take the batch is one line before anything is measured."""
        if self.model is None:
            return
        if self.loss is None and not self.lightning and not is_pair(batch):
            raise UsageError(
                f"{dataset} yields batches of {_form(batch)}, and the default step takes "
                "(inputs, labels): name your loss with step._target_=module.function, a "
                "function (model, batch) -> loss"
            )
        try:
            self(batch)
        except Exception as exc:  # noqa: BLE001 - the user's loss, model or batch
            what = (
                f"step._target_={self.loss_name}"
                if self.loss
                else f"{type(self.module).__qualname__}.training_step"
                if self.lightning
                else "the default step"
            )
            raise UsageError(
                f"{what} failed on a batch of {dataset}: {type(exc).__name__}: "
                f"{' '.join(str(exc).split())} (a model that fits the batches: model=... or "
                "model._target_=...; a loss that reads them: step._target_=...)"
            ) from None

    def sync(self) -> None:
        """Waits for queued device work: timed spans must end when the work does."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def _distributed(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` in DistributedDataParallel, on this rank's device."""
    return DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)


def job_step(
    job: TrialJob,
    *,
    num_classes: int | None,
    channels_last: bool,
    device: torch.device | None = None,
) -> TrainStep:
    """The train step a trial's job describes, in the trial's process (its model built now,
    from the seed set before; Inductor's cache pointed at the job's, for ``compile``), on
    ``device`` (default: the job's); in DistributedDataParallel inside a group of ranks."""
    if job.compile_cache:  # read when Inductor first compiles, in the first step
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = job.compile_cache
    return TrainStep(
        build_model(job.model, num_classes=num_classes),
        device or torch.device(job.device),
        lr=job.model.lr,
        channels_last=channels_last,
        optimizer=job.optimizer,
        precision=job.precision,
        loss=job.step,
        compile=job.compile_cache is not None,
        distributed=dist.is_initialized() and dist.get_world_size() > 1,
    )

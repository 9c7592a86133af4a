"""A LightningModule as the model: its ``training_step`` is the loss and its
``configure_optimizers`` the optimizer, as a Lightning Trainer runs them (automatic
optimization). Recognized by shape, so the tuner needs no import of Lightning."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from autotune.errors import UsageError


def is_lightning_module(model: nn.Module | None) -> bool:
    return model is not None and all(
        callable(getattr(model, name, None)) for name in ("training_step", "configure_optimizers")
    )


def optimizer_of(model: nn.Module) -> torch.optim.Optimizer:
    """The one optimizer ``configure_optimizers()`` returns, in any of Lightning's forms (an
    optimizer; a list or tuple; ``(optimizers, schedulers)``; a dict with ``optimizer``)."""
    where = f"{type(model).__qualname__}.configure_optimizers()"
    try:
        returned = model.configure_optimizers()
    except Exception as exc:  # noqa: BLE001 - e.g. it reads self.trainer, absent here
        raise UsageError(
            f"{where} failed outside a Trainer ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())}): build the optimizer from self.parameters(), or "
            "name your loss with step._target_ and the optimizer with optimizer._target_"
        ) from None
    found = _optimizers(returned)
    if len(found) != 1:
        raise UsageError(
            f"{where} returned {len(found)} optimizers: the timed step runs Lightning's "
            "automatic optimization with one (manual optimization is not tuned)"
        )
    return found[0]


def _optimizers(returned: Any) -> list[torch.optim.Optimizer]:
    if isinstance(returned, torch.optim.Optimizer):
        return [returned]
    if isinstance(returned, Mapping):
        return _optimizers(returned.get("optimizer"))
    if isinstance(returned, (list, tuple)):
        if len(returned) == 2 and isinstance(returned[1], (list, tuple)):  # (opts, scheds)
            return _optimizers(returned[0])
        return [o for item in returned for o in _optimizers(item)]
    return []


def training_loss(model: nn.Module, batch: Any, index: int) -> torch.Tensor:
    """``model.training_step(batch, index)``'s loss (its ``loss`` key when it returns a dict).
    Outside a Trainer, ``self.log`` only warns: those warnings are silenced here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*self.log.*")
        out = model.training_step(batch, index)
    return out["loss"] if isinstance(out, Mapping) else out


class TrainingStep(nn.Module):
    """A LightningModule's ``training_step`` as ``forward``, the loss out: the module that
    DistributedDataParallel wraps (its gradient hooks are armed in ``forward``), as
    Lightning's own DDP strategy does."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: Any, index: int) -> torch.Tensor:
        return training_loss(self.module, batch, index)

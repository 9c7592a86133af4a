"""``autotune.tune``: the tune mode from a script or a notebook, on the user's own Dataset.

The same study, trials, report and best.yaml as ``python -m autotune``: the arguments become
the overrides the command line would take. Trials run in processes of their own, which import
the user's code by name: classes and functions must live in an importable module (not in the
script or notebook that calls ``tune``); a Dataset object must pickle.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from autotune.app import cli
from autotune.errors import UsageError
from autotune.pipeline import best_file, user_api
from autotune.pipeline.config import PipelineConfig
from autotune.session import Session


@dataclass(frozen=True)
class Tuned:
    """What ``tune`` found: best.yaml's path and what it says.

    Example:
        >>> tuned = autotune.tune("mydata.Clips", model="mydata.Net", n_trials=20)
        >>> DataLoader(Clips(), shuffle=True, **tuned.loader_kwargs())
    """

    best_path: Path
    config: PipelineConfig  # the picked settings (what build_loader applies)
    speedup: float | None  # the pick's samples/s over the baseline's, measured interleaved
    baseline: str  # what the speedup is a ratio to, in words
    study_name: str
    storage: str

    def loader_kwargs(self) -> dict[str, Any]:
        """``DataLoader`` arguments of the pick (sets torch's threads, as it was measured)."""
        return user_api.loader_kwargs(self.best_path)


def tune(
    dataset: str | Callable[..., Any] | Dataset,
    *,
    model: str | Callable[..., Any] = "tiny",
    step: str | Callable[..., Any] | None = None,
    collate_fn: str | Callable[..., Any] | None = None,
    dataset_kwargs: Mapping[str, Any] | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
    optimizer: str | Callable[..., Any] = "torch.optim.SGD",
    optimizer_kwargs: Mapping[str, Any] | None = None,
    precision: str = "fp32",
    batch_size: int = 32,
    n_trials: int = 20,
    device: str = "auto",
    study_name: str | None = None,
    storage: str | None = None,
    studies_dir: str | Path = "studies",
    overrides: Sequence[str] = (),
    quiet: bool = True,
) -> Tuned:
    """Tunes the DataLoader for ``dataset`` on this machine and writes best.yaml.

    Args:
        dataset: a Dataset class or factory (built with ``dataset_kwargs`` in each trial),
            its dotted name, or a Dataset object (pickled to each trial).
        model: a built-in model name (``tiny``, ``resnet50``, ...), an ``nn.Module`` class
            or its dotted name (built with ``model_kwargs``).
        step: a function ``(model, batch) -> loss`` or its dotted name; None: cross-entropy
            on ``(inputs, labels)``.
        collate_fn: the Dataset's collate function (or its dotted name).
        optimizer: a ``torch.optim`` class or its dotted name, with ``optimizer_kwargs``.
        precision: ``fp32``, ``bf16`` or ``fp16`` (autocast).
        overrides: any further ``key=value`` of the command line (``window=quick``, ...).
        quiet: no per-trial progress lines.

    Raises ``UsageError`` (one line naming the fix) for bad input, before anything runs.
    """
    instance = dataset if isinstance(dataset, Dataset) else None
    named = {
        "dataset._target_": type(dataset) if instance is not None else dataset,
        "optimizer._target_": optimizer,
        "step._target_": step,
        "dataset.collate_fn": collate_fn,
    }
    builtin = isinstance(model, str) and "." not in model  # a built-in model is a group
    named["model" if builtin else "model._target_"] = model
    settings = {
        "precision": precision,
        "batch_size": batch_size,
        "study.n_trials": n_trials,
        "device": device,
        "studies_dir": str(studies_dir),
        "quiet": quiet,
        "study.name": study_name,
        "study.storage": storage,
    }
    kwargs = {"dataset": dataset_kwargs, "model": model_kwargs, "optimizer": optimizer_kwargs}
    args = _overrides(named, settings, kwargs)
    return _run([*args, *overrides], instance)


def _run(args: list[str], instance: Dataset | None) -> Tuned:
    """The tune mode on ``args``: the study, best.yaml and report.md, as the CLI runs it."""
    config = cli.to_config(cli.compose(args))
    cli.start_logging()  # progress lines (unless quiet), unless the caller set logging up
    with cli.progress_silenced(config.quiet):
        result, best = cli.tune_and_export(Session.build(config, dataset=instance))
    if best is None:
        raise RuntimeError(
            f"no trial of study {result.study_name} finished: see "
            f"{Path(config.studies_dir) / result.study_name / 'report.md'}"
        )
    written = best_file.read(best)
    return Tuned(
        best_path=best,
        config=written.config,
        speedup=result.speedup,
        baseline=written.baseline,
        study_name=result.study_name,
        storage=result.storage,
    )


def _overrides(
    named: dict[str, Any], settings: dict[str, Any], kwargs: dict[str, Mapping[str, Any] | None]
) -> list[str]:
    """The command line's overrides for ``tune``'s arguments (None: not given)."""
    args = [f"{key}={_name(obj, key)}" for key, obj in named.items() if obj is not None]
    args += [f"{key}={_value(value)}" for key, value in settings.items() if value is not None]
    for group, given in kwargs.items():
        args += [f"{group}.kwargs.{key}={_value(value)}" for key, value in (given or {}).items()]
    return args


def _name(obj: str | Callable[..., Any], what: str) -> str:
    """The dotted name a trial's process imports ``obj`` by."""
    if isinstance(obj, str):
        return obj
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<locals>" in qualname:
        where = "this script or notebook" if module == "__main__" else "a function's body"
        raise UsageError(
            f"{what} {getattr(obj, '__name__', obj)!r} is defined in {where}: trials import "
            "it by name in their own processes; move it into a module of your project"
        )
    if inspect.ismodule(obj):
        raise UsageError(f"{what} is a module: pass a class or function of it")
    return f"{module}.{qualname}"


def _value(value: Any) -> str:
    """A value as a Hydra override reads it back (strings quoted, lists and dicts as such)."""
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_value(v)}" for k, v in value.items()) + "}"
    return repr(value)

"""``autotune.tune``: the tune mode from a script or a notebook, on the user's own Dataset.

The same study, trials, report and best.yaml as ``python -m autotune``: the arguments become
the overrides the command line would take. Trials run in processes of their own, which import
the user's code by name: classes and functions must live in an importable module (not in the
script or notebook that calls ``tune``); a Dataset object must pickle.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException
from torch.utils.data import Dataset

from autotune.app import cli, exit_codes
from autotune.app.composition import compose, to_config
from autotune.errors import UsageError
from autotune.pipeline import best_file, user_api
from autotune.pipeline.config import PipelineConfig
from autotune.schema import AutotuneConfig
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
        collate_fn, optimizer: a function, a ``torch.optim`` class (with
            ``optimizer_kwargs``), or their dotted names.
        overrides: any further ``key=value`` of the command line (``window=quick``, ...).

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
        "quiet": str(quiet).lower(),
    }
    args = [f"{key}={_name(obj, key)}" for key, obj in named.items() if obj is not None]
    args += [f"{key}={value}" for key, value in settings.items()]
    given = _given(
        {"dataset": dataset_kwargs, "model": model_kwargs, "optimizer": optimizer_kwargs},
        study_name,
        storage,
        studies_dir,
    )
    return _run([*args, *overrides], given, instance)


def _given(
    kwargs: dict[str, Mapping[str, Any] | None],
    study_name: str | None,
    storage: str | None,
    studies_dir: str | Path,
) -> dict[str, Any]:
    """The free-form values: they go onto the composed config as they are, never through
    Hydra's override grammar, which would read quotes, backslashes and ${...} in them."""
    return {
        "kwargs": kwargs,
        "study": {"name": study_name, "storage": storage},
        "studies_dir": str(studies_dir),
    }


def _run(args: list[str], given: dict[str, Any], instance: Dataset | None) -> Tuned:
    """The tune mode on ``args`` and the ``given`` values: the study, best.yaml and
    report.md, as the CLI runs it."""
    try:
        conf = _with_given(to_config(compose(args)), given)
    except (HydraException, OmegaConfBaseException) as exc:
        raise UsageError(exit_codes.one_line(exc)) from None
    cli.start_logging()  # progress lines (unless quiet), unless the caller set logging up
    with cli.progress_silenced(conf.quiet):
        result, best = cli.tune_and_export(Session.build(conf, dataset=instance))
    if best is None:
        raise RuntimeError(
            f"no trial of study {result.study_name} finished: see "
            f"{Path(conf.studies_dir) / result.study_name / 'report.md'}"
        )
    written = best_file.read(best)
    return Tuned(
        best_path=best,
        config=written.config,
        # where another host confirmed a shared study, its figure is in its best.yaml
        speedup=result.speedup or written.measured.speedup_vs_baseline,
        baseline=written.baseline,
        study_name=result.study_name,
        storage=result.storage,
    )


def _with_given(conf: AutotuneConfig, given: dict[str, Any]) -> AutotuneConfig:
    """``conf`` with the kwargs, study name, storage and studies folder given to ``tune``."""
    sections = {}
    for section, kwargs in given["kwargs"].items():
        if kwargs:
            own = getattr(conf, section)
            merged = {
                **own.kwargs,
                **{key: _plain(value, section) for key, value in kwargs.items()},
            }
            sections[section] = dataclasses.replace(own, kwargs=merged)
    study = {key: value for key, value in given["study"].items() if value is not None}
    if "storage" not in study and conf.study.storage == _sqlite_in(conf.studies_dir):
        study["storage"] = _sqlite_in(given["studies_dir"])  # the default follows the folder
    return dataclasses.replace(
        conf,
        **sections,
        study=dataclasses.replace(conf.study, **study),
        studies_dir=given["studies_dir"],
    )


def _sqlite_in(studies_dir: str) -> str:
    return f"sqlite:///{studies_dir}/autotune.db"


def _plain(value: Any, section: str) -> Any:
    """A kwarg as best.yaml can record it (a path as its string); anything else is refused."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    try:
        yaml.safe_dump(value)
    except yaml.YAMLError:
        raise UsageError(
            f"{section}_kwargs: {value!r} is not a plain value (str, number, bool, None, or "
            "lists and dicts of them): best.yaml records the kwargs"
        ) from None
    return value


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

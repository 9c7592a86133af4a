"""The user's own Dataset, named the way Hydra names code: ``dataset._target_`` (a Dataset
class, or a factory that returns one) with ``dataset.kwargs``, and an optional
``dataset.collate_fn`` (a dotted path). Only the names travel to a trial's process, which
builds the Dataset itself; DataLoader workers get it as DataLoader gives it to them.

It is read as it is: the tuner's decoders and augmentation do not apply, only the DataLoader's
arguments and the training process's threads (``decoder=as_is``).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hydra.utils import get_method, get_object, instantiate
from torch.utils.data import Dataset, IterableDataset, default_collate

from autotune.errors import UsageError
from autotune.pipeline.sources import Source


@dataclass(frozen=True)
class UserData:
    """What names the user's Dataset, and what checking it found (its length, its classes).

    Example:
        >>> data = UserData.check("mydata.Spectrograms", {"root": "/data"}, "mydata.pad")
        >>> dataset, collate = data.build(), data.collate()
    """

    target: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    collate_fn: str | None = None
    length: int = 0  # samples per epoch
    classes: tuple[str, ...] = ()  # the Dataset's ``classes``, where it has them
    skipped: tuple[tuple[str, str], ...] = ()  # nothing is skipped: the Dataset decides

    def __len__(self) -> int:
        return self.length

    def build(self) -> Dataset:
        """A new instance of the Dataset (in the process that reads it)."""
        where = f"dataset._target_={self.target}"
        try:
            get_object(self.target)
        except Exception as exc:  # noqa: BLE001 - Hydra raises ImportError or ValueError
            raise UsageError(
                f"{where} cannot be imported ({_one_line(exc.__cause__ or exc)}): run from "
                "your project's folder, or put its package on PYTHONPATH"
            ) from None
        try:
            return instantiate({"_target_": self.target, **self.kwargs}, _convert_="all")
        except Exception as exc:  # noqa: BLE001 - any failure of the user's code is bad input
            cause = exc.__cause__ or exc
            raise UsageError(
                f"{where}: building it with {self.kwargs} failed: "
                f"{type(cause).__name__}: {_one_line(cause)} (check dataset.kwargs)"
            ) from None

    def collate(self) -> Callable[[list[Any]], Any] | None:
        """The collate function named by ``collate_fn``; None: DataLoader's default."""
        if self.collate_fn is None:
            return None
        try:
            return get_method(self.collate_fn)
        except Exception:  # noqa: BLE001 - Hydra raises ImportError or ValueError
            raise UsageError(
                f"dataset.collate_fn={self.collate_fn} cannot be imported: give the full "
                "dotted path of a function, e.g. mydata.pad_collate"
            ) from None

    def describe(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        collate = f", collate_fn={self.collate_fn}" if self.collate_fn else ""
        return f"{self.target}({args}){collate}"

    def fingerprint(self) -> str:
        """Names and length, never the data: what the tuned numbers depend on."""
        payload = json.dumps(
            [self.target, self.kwargs, self.collate_fn, self.length], sort_keys=True, default=str
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @classmethod
    def check(cls, target: str, kwargs: dict[str, Any], collate_fn: str | None = None) -> UserData:
        """Imports, builds and samples the Dataset once, here: each way it can fail is one
        line naming the class and the fix, before anything is measured."""
        data = cls(target, dict(kwargs), collate_fn)
        dataset = data.build()
        if isinstance(dataset, IterableDataset):
            raise UsageError(
                f"dataset._target_={target} is an IterableDataset: only map-style Datasets "
                "(__getitem__ and __len__) are tuned for now"
            )
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise UsageError(
                f"dataset._target_={target} built a {type(dataset).__name__}, not a Dataset "
                "with __getitem__ and __len__"
            )
        length = len(dataset)
        if length < 2:
            raise UsageError(f"dataset._target_={target} has {length} samples: it needs 2+")
        _check_batches(data, dataset)
        _check_pickles(target, dataset)
        classes = tuple(str(c) for c in getattr(dataset, "classes", ()) or ())
        return cls(target, dict(kwargs), collate_fn, length, classes)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _check_batches(data: UserData, dataset: Dataset) -> None:
    """Two samples must batch with the collate the DataLoader will use."""
    try:
        samples = [dataset[0], dataset[1]]
    except Exception as exc:  # noqa: BLE001 - the user's __getitem__
        raise UsageError(
            f"dataset._target_={data.target}: reading sample 0 failed: "
            f"{type(exc).__name__}: {_one_line(exc)}"
        ) from None
    collate = data.collate() or default_collate
    try:
        collate(samples)
    except Exception as exc:  # noqa: BLE001 - the collate cannot batch these samples
        fix = (
            f"fix dataset.collate_fn={data.collate_fn}"
            if data.collate_fn
            else "pass dataset.collate_fn=module.function"
        )
        raise UsageError(
            f"dataset._target_={data.target}: its samples cannot be batched "
            f"({type(exc).__name__}: {_one_line(exc)}): {fix}"
        ) from None


def _check_pickles(target: str, dataset: Dataset) -> None:
    """Workers started by spawn or forkserver get the Dataset pickled; fork does not."""
    if multiprocessing.get_start_method() == "fork":
        return
    try:
        pickle.dumps(dataset)
    except Exception as exc:  # noqa: BLE001 - whatever pickle refuses
        raise UsageError(
            f"dataset._target_={target} cannot be pickled to DataLoader workers "
            f"({type(exc).__name__}: {_one_line(exc)}): open files and handles lazily, in "
            "__getitem__"
        ) from None


# What a run reads: an image folder (decoded and augmented by the tuner, or as it is) or the
# user's own Dataset (as it is)
Data = Source | UserData

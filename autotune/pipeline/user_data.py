"""The user's own Dataset, named the way Hydra names code: ``dataset._target_`` (a Dataset
class, or a factory that returns one) with ``dataset.kwargs``, and an optional
``dataset.collate_fn`` (a dotted path). Only the names travel to a trial's process, which
builds the Dataset itself; DataLoader workers get it as DataLoader gives it to them.

It is read as it is: the tuner's decoders and augmentation do not apply, only the DataLoader's
arguments and the training process's threads (``decoder=as_is``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import multiprocessing
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hydra.utils import get_method, get_object, instantiate
from torch.utils.data import DataLoader, Dataset, IterableDataset, default_collate

from autotune.errors import UsageError, imported, one_line
from autotune.pipeline import streams
from autotune.pipeline.loader_job import LoaderJob
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
    iterable: bool = False  # an IterableDataset: each worker reads its own share
    # a Dataset object handed over as it is (the Python API), pickled to each trial
    instance: Any = field(default=None, compare=False, repr=False)
    batch_size: int | None = None  # a DataModule's train_dataloader() batch size
    skipped: tuple[tuple[str, str], ...] = ()  # nothing is skipped: the Dataset decides
    # what each process reading it holds besides a batch (a shuffle buffer): the Dataset's
    # ``buffer_bytes()``, where it says
    buffer_bytes: int = 0
    # the loader a user builds over it, ``DataLoader(dataset, shuffle=True, **loader_kwargs)``
    # (a DataModule's: its ``train_dataloader()``), its batch size aside
    loader_job: LoaderJob | None = field(default=None, compare=False)

    def __len__(self) -> int:
        return self.length

    def open(self) -> tuple[Dataset, Callable[[list[Any]], Any] | None]:
        """The Dataset and its collate (None: DataLoader's default), built anew in the
        process that reads it; of a DataModule, what its ``train_dataloader()`` reads, after
        ``setup("fit")`` (``prepare_data`` ran once, when it was checked)."""
        built = self.build()
        if not is_datamodule(built):
            return built, self.collate()
        built.setup("fit")
        loader = built.train_dataloader()
        return loader.dataset, loader.collate_fn

    def build(self) -> Any:
        """A new instance of what ``target`` names: a Dataset, or a LightningDataModule; an
        object handed over as it is: that object (in a trial, its unpickled copy)."""
        if self.instance is not None:
            return self.instance
        where = f"dataset._target_={self.target}"
        fix = "run from your project's folder, or put its package on PYTHONPATH"
        imported(self.target, "dataset._target_", fix, get_object)
        try:
            return instantiate({"_target_": self.target, **self.kwargs}, _convert_="all")
        except Exception as exc:  # noqa: BLE001 - any failure of the user's code is bad input
            cause = exc.__cause__ or exc
            raise UsageError(
                f"{where}: building it with {self.kwargs} failed: "
                f"{type(cause).__name__}: {one_line(cause)} (check dataset.kwargs)"
            ) from None

    def collate(self) -> Callable[[list[Any]], Any] | None:
        """The collate function named by ``collate_fn``; None: DataLoader's default."""
        if self.collate_fn is None:
            return None
        fix = "give the full dotted path of a function, e.g. mydata.pad_collate"
        return imported(self.collate_fn, "dataset.collate_fn", fix, get_method)

    def describe(self) -> str:
        if self.instance is not None:
            return f"a {self.target} object" + (
                f", collate_fn={self.collate_fn}" if self.collate_fn else ""
            )
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        collate = f", collate_fn={self.collate_fn}" if self.collate_fn else ""
        return f"{self.target}({args}){collate}"

    def fingerprint(self) -> str:
        """Names and length (of an object handed over, a hash of its pickled state), never
        the data: what the tuned numbers depend on."""
        state = ""
        if self.instance is not None:
            state = hashlib.sha256(pickle.dumps(self.instance)).hexdigest()
        payload = json.dumps(
            [self.target, self.kwargs, self.collate_fn, self.length, state],
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @classmethod
    def check(cls, target: str, kwargs: dict[str, Any], collate_fn: str | None = None) -> UserData:
        """``inspect`` without the batch."""
        return cls.inspect(target, kwargs, collate_fn)[0]

    @classmethod
    def inspect(
        cls,
        target: str,
        kwargs: dict[str, Any],
        collate_fn: str | None = None,
        *,
        instance: Any = None,
    ) -> tuple[UserData, Any]:
        """Imports, builds and samples the Dataset once, here: each way it can fail is one
        line naming the class and the fix, before anything is measured. Returns what names
        it, with its length and classes, and a batch of its first two samples. ``instance``:
        a Dataset object to read as it is (``target`` names its class)."""
        where = f"dataset._target_={target}"
        if instance is not None:  # read from a copy: the object itself goes to the trials
            _check_pickles(target, instance, to_trials=True)
            data = cls(
                target, dict(kwargs), collate_fn, instance=pickle.loads(pickle.dumps(instance))
            )
        else:
            data = cls(target, dict(kwargs), collate_fn)
        built = data.build()
        if is_datamodule(built):
            loader = _train_loader(where, built)
            built, collate, batch_size = loader.dataset, loader.collate_fn, loader.batch_size
        else:
            collate, loader, batch_size = data.collate(), None, None
        dataset = built
        iterable = isinstance(dataset, IterableDataset)
        if not iterable and not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise UsageError(
                f"{where} built a {type(dataset).__name__}, not a Dataset (__getitem__ and "
                "__len__, or an IterableDataset)"
            )
        _check_pickles(target, dataset, to_trials=False)
        length = streams.epoch_length(where, dataset) if iterable else len(dataset)
        if length < 2:
            raise UsageError(f"{where} has {length} samples: it needs 2+")
        batch = _check_batches(data, collate, _first_two(where, dataset, iterable))
        if loader is None:  # the loader a user builds over it: made, never iterated
            loader = DataLoader(dataset, shuffle=not iterable, collate_fn=collate)
        classes = tuple(str(c) for c in getattr(dataset, "classes", ()) or ())
        held = getattr(dataset, "buffer_bytes", None)
        checked = cls(
            target,
            dict(kwargs),
            collate_fn,
            length,
            classes,
            iterable,
            batch_size=batch_size,
            buffer_bytes=int(held()) if callable(held) else 0,
            loader_job=LoaderJob.of(loader),
        )
        return dataclasses.replace(checked, instance=instance), batch


def _train_loader(where: str, module: Any) -> DataLoader:
    """A DataModule's ``train_dataloader()``, prepared and set up as Lightning does."""
    module.prepare_data()  # once, here: downloads and the like
    module.setup("fit")
    loader = module.train_dataloader()
    if loader.batch_size is None:
        raise UsageError(
            f"{where}: its train_dataloader() has no batch_size (a batch_sampler, or "
            "batches made by the Dataset): give the DataLoader a batch_size to tune"
        )
    return loader


def _first_two(where: str, dataset: Dataset, iterable: bool) -> list[Any]:
    try:
        if iterable:
            return list(itertools.islice(iter(dataset), 2))
        return [dataset[0], dataset[1]]
    except Exception as exc:  # noqa: BLE001 - the user's __getitem__ or __iter__
        raise UsageError(
            f"{where}: reading sample 0 failed: {type(exc).__name__}: {one_line(exc)}"
        ) from None


def is_datamodule(obj: Any) -> bool:
    """A LightningDataModule, or anything shaped like one (no import of Lightning needed)."""
    return not isinstance(obj, Dataset) and all(
        callable(getattr(obj, name, None)) for name in ("setup", "train_dataloader")
    )


def _check_batches(
    data: UserData, collate: Callable[[list[Any]], Any] | None, samples: list[Any]
) -> Any:
    """Two samples must batch with the collate the DataLoader will use: their batch."""
    try:
        return (collate or default_collate)(samples)
    except Exception as exc:  # noqa: BLE001 - the collate cannot batch these samples
        fix = (
            f"fix dataset.collate_fn={data.collate_fn}"
            if data.collate_fn
            else "pass dataset.collate_fn=module.function"
        )
        raise UsageError(
            f"dataset._target_={data.target}: its samples cannot be batched "
            f"({type(exc).__name__}: {one_line(exc)}): {fix}"
        ) from None


def _check_pickles(target: str, dataset: Dataset, *, to_trials: bool) -> None:
    """Workers started by spawn or forkserver get the Dataset pickled, fork does not; an
    object handed over goes pickled to every trial's process."""
    if multiprocessing.get_start_method() == "fork" and not to_trials:
        return
    try:
        pickle.dumps(dataset)
    except Exception as exc:  # noqa: BLE001 - whatever pickle refuses
        where = "the trials' processes" if to_trials else "DataLoader workers"
        raise UsageError(
            f"dataset._target_={target} cannot be pickled to {where} "
            f"({type(exc).__name__}: {one_line(exc)}): open files and handles lazily, in "
            "__getitem__"
        ) from None


# What a run reads: an image folder (decoded and augmented by the tuner, or as it is) or the
# user's own Dataset (as it is)
Data = Source | UserData

"""best.yaml, what a study hands the user: the one place it is written and read.

Two ways of applying a result, each measured against the same baseline (``baseline:``, in
words): ``loader_kwargs:``, the DataLoader arguments and thread count tuned for the user's
own Dataset as it is, with its ``measured:`` figures; and the whole tuned pipeline, a
``PipelineConfig`` (its ``loader:`` and ``pipeline:`` sections) with ``measured:``. Then
three plain sections: ``workload``, ``machine`` and ``study``, each read into its type.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autotune import machine
from autotune.errors import UsageError
from autotune.machine import MachineFacts
from autotune.pipeline.config import AS_IS, PipelineConfig

HEADER = (
    "# autotune: input pipelines measured on this machine, two ways to use them.\n"
    "# Your own Dataset as it is (loader_kwargs: also sets torch's threads to main_threads):\n"
    "#   DataLoader(dataset, shuffle=True, **autotune.loader_kwargs(this_file))\n"
    "# The whole tuned pipeline (loader, pipeline): its own decode, augment and transfer:\n"
    "#   autotune.build_loader(folder_or_dataset, this_file)\n"
    "# Settings per rank: `ranks` processes per node were measured together (DDP), each\n"
    "# with its own DataLoader of these settings (under torchrun, build_loader shards).\n"
)


@dataclass(frozen=True)
class Figures:
    """A pick's ``measured:`` section: its confirmed rate over an epoch, the IQR of its
    rounds, and its ratio to the baseline with the range its rounds measured (None where a
    file does not say)."""

    samples_per_s: float | None = None
    samples_per_s_iqr: list[float] | None = None
    speedup_vs_baseline: float | None = None
    speedup_vs_baseline_iqr: list[float] | None = None  # the IQR's ends over the baseline's
    picked: str | None = None  # the finalist's label

    @classmethod
    def from_dict(cls, section: dict[str, Any] | None) -> Figures:
        """The known keys of a section (one a later autotune added is left out)."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (section or {}).items() if k in known})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class PipelineFigures(Figures):
    """The whole pipeline's ``measured:``: its figures, and the references beside them."""

    steady_samples_per_s: float | None = None  # the search's rate, between epochs' ends
    baseline_samples_per_s: float | None = None
    ceiling_samples_per_s: float | None = None  # the step alone, fed from memory
    of_ceiling: float | None = None
    peak_memory_mb: float | None = None
    notes: list[str] = field(default_factory=list)
    worth: dict[str, Any] | None = None  # each setting changed back: report/export.py


@dataclass(frozen=True)
class MachineSection:
    """``machine:``: what the numbers were measured on (None where a file does not say)."""

    usable_cpus: int | None = None
    gpu: str | None = None
    gpus: int | None = None
    torch: str | None = None
    torchvision: str | None = None
    python: str | None = None
    platform: str | None = None

    @classmethod
    def of(cls, facts: MachineFacts) -> MachineSection:
        return cls(
            usable_cpus=facts.usable_cpus,
            gpu=facts.gpu.name if facts.gpu else None,
            gpus=facts.gpu_count,
            torch=facts.torch_version,
            torchvision=facts.torchvision_version,
            python=facts.python_version,
            platform=facts.platform,
        )

    @classmethod
    def from_dict(cls, section: dict[str, Any] | None) -> MachineSection | None:
        if not section:
            return None
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in section.items() if k in known})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Section:
    """A plain section read by its known keys (one a later autotune added is left out)."""

    @classmethod
    def from_dict(cls, section: dict[str, Any] | None) -> Any:
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in (section or {}).items() if k in known})

    def to_dict(self) -> dict[str, Any]:
        """Its keys, those that say nothing here (None) left out."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}  # type: ignore[call-overload]


@dataclass(frozen=True)
class WorkloadSection(_Section):
    """``workload:``: what the session measured (None where a file does not say)."""

    dataset: str | None = None
    model: str | None = None
    recipe: dict[str, Any] | None = None  # the recipe's settings: name, crop_size...
    device: str | None = None
    ranks: int = 1
    images: int | None = None
    skipped_files: int | None = None
    skipped: list[str] | None = None  # the first files the scan skipped, with why
    prepared_dir: str | None = None  # where build_loader finds (or makes) a prepared copy
    epochs: int | None = None  # planned (study.epochs)
    dataset_target: dict[str, Any] | None = None  # a Dataset of your own: its names
    data_fingerprint: str | None = None  # what mode=verify checks the data against


@dataclass(frozen=True)
class StudySection(_Section):
    """``study:``: where the study is, and what its trials came to."""

    name: str | None = None
    storage: str | None = None  # its password hidden
    trials: dict[str, int] | None = None  # by state
    interrupted: bool | None = None
    written: str | None = None  # when, ISO 8601
    kept_by: str | None = None  # ``autotune.DataLoader``: kept on a training run, not confirmed


@dataclass(frozen=True)
class BestFile:
    """The contents of a best.yaml."""

    config: PipelineConfig  # the whole tuned pipeline
    measured: PipelineFigures = field(default_factory=PipelineFigures)  # its figures
    # the user's pipeline as it is: the loader settings picked for it, and their figures;
    # None when no config of it was confirmed, or in a file of an older autotune (``older``)
    as_is: PipelineConfig | None = None
    as_is_measured: Figures = field(default_factory=Figures)
    baseline: str = ""  # what the speedups are ratios to, in words
    ranks: int = 1  # processes per node measured together; the settings are each one's
    older: bool = False  # read from a file written before both ways were tuned
    workload: WorkloadSection = field(default_factory=WorkloadSection)
    machine: MachineSection | None = None  # None in a file without one
    study: StudySection = field(default_factory=StudySection)


def write(path: Path, best: BestFile, header: str = HEADER) -> None:
    doc: dict[str, Any] = {"baseline": best.baseline, "ranks": best.ranks, "loader_kwargs": None}
    if best.as_is is not None:
        doc["loader_kwargs"] = {
            "loader": best.as_is.loader_kwargs(),
            "main_threads": best.as_is.main_threads,
            "measured": best.as_is_measured.to_dict(),
        }
    doc.update(best.config.to_dict())
    doc.update(
        measured=best.measured.to_dict(),
        workload=best.workload.to_dict(),
        machine=best.machine.to_dict() if best.machine else {},
        study=best.study.to_dict(),
    )
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=100))


def read(path: str | Path) -> BestFile:
    """Raises ``UsageError`` for a missing file or one that is not a best.yaml."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(
            f"{path} does not exist: pass the best.yaml that python -m autotune wrote"
        )
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or "loader" not in doc:
        raise UsageError(f"{path} has no `loader:` section: is it a best.yaml from autotune?")
    as_is = doc.get("loader_kwargs") or {}
    try:
        config = PipelineConfig.from_dict({k: doc[k] for k in ("loader", "pipeline") if k in doc})
        as_is_config = _as_is_config(as_is, path) if as_is else None
    except UsageError as e:
        raise UsageError(f"{path}: {e}") from None
    return BestFile(
        config=config,
        measured=PipelineFigures.from_dict(doc.get("measured")),
        as_is=as_is_config,
        as_is_measured=Figures.from_dict(as_is.get("measured")),
        baseline=doc.get("baseline") or "",
        ranks=int(doc.get("ranks") or 1),
        older="loader_kwargs" not in doc,
        workload=WorkloadSection.from_dict(doc.get("workload")),
        machine=MachineSection.from_dict(doc.get("machine")),
        study=StudySection.from_dict(doc.get("study")),
    )


def _as_is_config(section: dict[str, Any], path: Path) -> PipelineConfig:
    if not isinstance(section.get("loader"), dict):
        raise UsageError(
            f"{path}: loader_kwargs has no `loader:` mapping: rewrite it or tune again"
        )
    flat = {**section["loader"], "main_threads": section.get("main_threads"), "decoder": AS_IS}
    return PipelineConfig.from_dict(flat)


def as_is_of(best: BestFile, path: str | Path) -> PipelineConfig:
    """The loader settings tuned for the user's pipeline as it is; a file written before they
    were tuned is refused in one line."""
    if best.older:
        raise UsageError(
            f"{path} was written by an older autotune: it has no DataLoader arguments tuned "
            "for your own Dataset as it is (no `loader_kwargs:`); tune again under a new "
            "study.name, or use autotune.build_loader with this file"
        )
    if best.as_is is None:
        raise UsageError(
            f"{path} has no DataLoader arguments for your pipeline as it is: none of its "
            "configs finished the confirmation (see report.md for why); use "
            "autotune.build_loader with this file, or tune again"
        )
    return best.as_is


def machine_differences(measured_on: MachineSection | None, here: MachineFacts) -> list[str]:
    """What differs between a ``machine:`` section and this machine, in words: usable CPUs,
    GPU model and count, and torch version (what the section does not say is not compared)."""
    if measured_on is None:
        return []
    there, this = measured_on, MachineSection.of(here)
    differences = []
    if there.usable_cpus not in (None, this.usable_cpus):
        differences.append(f"{there.usable_cpus} usable CPUs there, {this.usable_cpus} here")
    if there.gpu != this.gpu and (there.gpu is not None or there.gpus is not None):
        differences.append(f"GPU {there.gpu} there, {this.gpu} here")
    if there.gpus not in (None, this.gpus):
        differences.append(f"{there.gpus} GPUs there, {this.gpus} here")
    if there.torch not in (None, this.torch):
        differences.append(f"torch {there.torch} there, {this.torch} here")
    return differences


_warned: set[str] = set()


def warn_if_other_ranks(ranks: int, path: str | Path) -> None:
    """Warns once per file when this job runs another number of ranks per node than the
    file was measured with (torchrun's ``LOCAL_WORLD_SIZE``; 1 outside torchrun)."""
    here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    key = f"{path} ranks"
    if here == ranks or key in _warned:
        return
    _warned.add(key)
    warnings.warn(
        f"{path} was measured with {ranks} rank(s) per node sharing its CPUs, and this job "
        f"runs {here}: its num_workers and threads are per rank, sized for {ranks}; tune "
        f"again with ranks={here}",
        stacklevel=3,
    )


def warn_if_other_machine(measured_on: MachineSection | None, path: str | Path) -> None:
    """Warns once per file when it was measured on a different machine (the warning points
    at the caller of the function that called this one)."""
    if measured_on is None or str(path) in _warned:
        return
    differences = machine_differences(measured_on, machine.detect(want_cuda=True))
    if differences:
        _warned.add(str(path))
        warnings.warn(
            f"{path} was measured on another machine ({'; '.join(differences)}): "
            "re-run python -m autotune here for settings that fit this one",
            stacklevel=3,
        )

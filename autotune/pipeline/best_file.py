"""best.yaml, what a study hands the user: the one place it is written and read.

The file is the tuned ``PipelineConfig`` (its ``loader:`` and ``pipeline:`` sections) and
four plain sections beside it: ``measured``, ``workload``, ``machine`` and ``study``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autotune import machine
from autotune.errors import UsageError
from autotune.machine import MachineFacts
from autotune.pipeline.config import PipelineConfig

HEADER = (
    "# autotune: the fastest input pipeline measured on this machine.\n"
    "# loader: torch.utils.data.DataLoader(dataset, **loader)\n"
    "# or: autotune.build_loader(source_or_dataset, this_file) for the whole pipeline\n"
)


@dataclass(frozen=True)
class BestFile:
    """The contents of a best.yaml."""

    config: PipelineConfig
    measured: dict[str, Any] = field(default_factory=dict)  # the winner's figures
    workload: dict[str, Any] = field(default_factory=dict)  # dataset, model, recipe, device
    machine: dict[str, Any] = field(default_factory=dict)  # machine_section()
    study: dict[str, Any] = field(default_factory=dict)  # name, storage, trial counts


def machine_section(facts: MachineFacts) -> dict[str, Any]:
    """best.yaml's ``machine:``: what the numbers were measured on."""
    return {
        "usable_cpus": facts.usable_cpus,
        "gpu": facts.gpu.name if facts.gpu else None,
        "torch": facts.torch_version,
        "torchvision": facts.torchvision_version,
        "python": facts.python_version,
        "platform": facts.platform,
    }


def write(path: Path, best: BestFile) -> None:
    doc = best.config.to_dict()
    doc.update(
        measured=best.measured, workload=best.workload, machine=best.machine, study=best.study
    )
    path.write_text(HEADER + yaml.safe_dump(doc, sort_keys=False))


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
    return BestFile(
        config=PipelineConfig.from_dict(doc),
        measured=doc.get("measured") or {},
        workload=doc.get("workload") or {},
        machine=doc.get("machine") or {},
        study=doc.get("study") or {},
    )


def machine_differences(measured_on: dict[str, Any], here: MachineFacts) -> list[str]:
    """What differs between a ``machine:`` section and this machine, in words: usable CPUs,
    GPU and torch version (a key missing from the section is not compared)."""
    gpu_here = here.gpu.name if here.gpu else None
    differences = []
    if measured_on.get("usable_cpus") not in (None, here.usable_cpus):
        differences.append(
            f"{measured_on['usable_cpus']} usable CPUs there, {here.usable_cpus} here"
        )
    if "gpu" in measured_on and measured_on["gpu"] != gpu_here:
        differences.append(f"GPU {measured_on['gpu']} there, {gpu_here} here")
    if measured_on.get("torch") not in (None, here.torch_version):
        differences.append(f"torch {measured_on['torch']} there, {here.torch_version} here")
    return differences


_warned: set[str] = set()


def warn_if_other_machine(measured_on: dict[str, Any], path: str | Path) -> None:
    """Warns once per file when it was measured on a different machine (the warning points
    at the caller of the function that called this one)."""
    if not measured_on or str(path) in _warned:
        return
    differences = machine_differences(measured_on, machine.detect(want_cuda=True))
    if differences:
        _warned.add(str(path))
        warnings.warn(
            f"{path} was measured on another machine ({'; '.join(differences)}): "
            "re-run python -m autotune here for settings that fit this one",
            stacklevel=3,
        )

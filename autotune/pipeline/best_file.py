"""best.yaml: the one place it is written and read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

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
    config: PipelineConfig
    measured: dict[str, Any] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    study: dict[str, Any] = field(default_factory=dict)


def machine_section(facts: MachineFacts) -> dict[str, Any]:
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
    path = Path(path)
    if not path.is_file():
        raise UsageError(
            f"{path} does not exist: pass the best.yaml that python -m autotune wrote"
        )
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or "loader" not in doc:
        raise UsageError(f"{path} has no `loader:` section: is it a best.yaml from autotune?")
    return BestFile(
        PipelineConfig.from_dict(doc),
        doc.get("measured") or {},
        doc.get("workload") or {},
        doc.get("machine") or {},
        doc.get("study") or {},
    )

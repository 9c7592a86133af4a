"""What a finished study hands back: ``best.yaml``, then ``report.md`` and the dashboard note."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any

import optuna

from autotune.machine import MachineFacts
from autotune.pipeline import best_file
from autotune.pipeline.config import PipelineConfig
from autotune.report import markdown
from autotune.tuner import storage
from autotune.tuner.result import Row, StudyResult, save_context


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def _figures(result: StudyResult, picked: Row) -> dict[str, Any]:
    """A pick's confirmed rate over an epoch, its IQR and its ratio to the baseline."""
    claimed = result.speedup_range_of(picked["label"])
    return {
        "samples_per_s": picked["samples_per_s"],
        "samples_per_s_iqr": list(picked["iqr"]),
        "speedup_vs_baseline": _round(result.speedup_of(picked["label"]), 2),
        # the IQR's ends over the baseline's median: the range the rounds measured
        "speedup_vs_baseline_iqr": [round(v, 2) for v in claimed] if claimed else None,
        "picked": picked["label"],
    }


def measured_section(result: StudyResult) -> best_file.PipelineFigures:
    """best.yaml's ``measured:``: the whole pipeline's confirmed figures beside the
    references."""
    winner, baseline = result.winner, result.baseline
    assert winner is not None
    ceiling = result.ceiling
    return best_file.PipelineFigures(
        **_figures(result, winner),
        steady_samples_per_s=winner["steady"],
        baseline_samples_per_s=baseline["samples_per_s"] if baseline else None,
        ceiling_samples_per_s=_round(ceiling),
        of_ceiling=_round(winner["steady"] / ceiling if ceiling else None, 2),
        peak_memory_mb=winner.get("peak_memory_mb"),
        notes=list(result.notes),
        worth=worth_section(result),
    )


def worth_section(result: StudyResult) -> dict[str, Any] | None:
    """best.yaml's ``measured.worth:``: per setting changed back (or decoder swapped), its
    samples/s beside the winner's in the same rounds, and the effect in words."""
    worth = result.worth
    if worth is None or not worth["rows"]:
        return None
    changed: dict[str, Any] = {}
    for row in worth["rows"]:
        changed[row["label"]] = {
            "samples_per_s": row["samples_per_s"],
            "vs_winner": row["ratio"],
            "effect": row["effect"],
        }
    return {"winner_samples_per_s": worth["winner"]["samples_per_s"], "changed": changed}


def export(
    result: StudyResult,
    facts: MachineFacts,
    workload: best_file.WorkloadSection,
    folder: Path,
    *,
    source_fingerprint: str,
) -> Path:
    """Writes ``best.yaml``, ``report.md`` and its plots into ``folder``, and the summary as the
    study's dashboard note; returns the best.yaml path.

    ``source_fingerprint`` (the session's) goes into ``workload:`` as ``data_fingerprint``: what
    ``mode=verify`` checks the data against before it measures.
    """
    assert result.best is not None
    as_is = result.as_is_winner
    workload = dataclasses.replace(workload, data_fingerprint=source_fingerprint)
    folder.mkdir(parents=True, exist_ok=True)
    machine = best_file.MachineSection.of(facts)
    path = folder / "best.yaml"
    best_file.write(
        path,
        best_file.BestFile(
            config=result.best,
            measured=measured_section(result),
            as_is=PipelineConfig.from_dict(as_is["pipeline"]) if as_is else None,
            as_is_measured=best_file.Figures(**_figures(result, as_is))
            if as_is
            else best_file.Figures(),
            baseline=result.baseline_text,
            ranks=workload.ranks,
            workload=workload,
            machine=machine,
            study=best_file.StudySection(
                name=result.study_name,
                storage=storage.shown(storage.located(result.storage)),
                trials=result.counts,
                interrupted=result.interrupted,
                written=datetime.datetime.now().isoformat(timespec="seconds"),
            ),
        ),
    )
    study = optuna.load_study(study_name=result.study_name, storage=result.storage)
    # the file list of skipped files stays in best.yaml; the study keeps their count
    save_context(study, dataclasses.replace(workload, skipped=None), machine)
    markdown.write_report(result.storage, result.study_name, folder)
    return path


def export_published(result: StudyResult, folder: Path) -> Path:
    """best.yaml as the host that confirmed a shared study wrote it, and report.md from the
    storage: every host of the study hands out the same file."""
    assert result.published is not None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "best.yaml"
    path.write_text(result.published)
    markdown.write_report(result.storage, result.study_name, folder)
    return path

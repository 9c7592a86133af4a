"""Warm start: a new study of a job that earlier studies in the same storage have tuned, on a
machine of the same kind, measures their picks first.

The job is what the figures are of: the data, model, step, batch size and device
(``session.fingerprints.of_job``); the kind of machine is what hosts sharing a study must
share (usable CPUs, GPU model and count, torch). A study that searches the same job again,
with another window, seed, search space, budget or name, then starts where the earlier ones
ended: their winners (each way's) run right after the baseline, so the search spends its
budget on finding better, and even a short study cannot end below an earlier long one's pick
by missing it. A pick that is not a point of this study's space is left out, with a line that
says so. ``study.warm_start=false`` starts cold: the benchmark's studies do, as their search is
what they measure.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.pipeline.best_file import MachineSection, machine_differences
from autotune.session import Session
from autotune.tuner import store
from autotune.tuner.result import StudyResult, trial_of_row
from autotune.tuner.store import BASELINE, StudyKey, TrialKey

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EarlierPick:
    """One way's winner of an earlier study of the job, as this study's trial params."""

    study: str
    trial_number: int
    way: str  # "build_loader" (any pipeline) or "loader_kwargs" (the pipeline as it is)
    params: dict[str, Any]

    @property
    def source(self) -> str:
        return f"trial {self.trial_number} of study {self.study!r}"


def earlier_picks(session: Session, study_name: str) -> list[EarlierPick]:
    """The winners of the other studies of ``session``'s job in its storage, measured on a
    machine of this kind, that are points of its space: each config once, in the order the
    storage lists the studies."""
    storage = session.conf.study.storage
    picks: list[EarlierPick] = []
    for name, job in store.attr_of_studies(storage, StudyKey.JOB):
        if job != session.job_fingerprint or name == study_name:
            continue
        earlier = optuna.load_study(study_name=name, storage=storage)
        machine = MachineSection.from_dict(store.study_attr(earlier, StudyKey.MACHINE))
        if machine is None or machine_differences(machine, session.facts):
            continue
        result = StudyResult.load(earlier, storage=storage)
        for way, row in (("build_loader", result.winner), ("loader_kwargs", result.as_is_winner)):
            if row is None or row["label"] == BASELINE:
                continue
            trial = trial_of_row(earlier, row)
            if trial is None or store.trial_attr(trial, TrialKey.PIPELINE) is None:
                continue
            params = session.space.params_of(store.pipeline_of(trial))
            pick = EarlierPick(name, trial.number, way, params or {})
            if params is None:
                log.info(
                    "warm start: %s (%s) is not a point of this search space: left out",
                    pick.source,
                    row["config"],
                )
            elif all(p.params != params for p in picks):
                picks.append(pick)
    return picks


def enqueue_earlier_picks(
    study: optuna.Study, session: Session, baseline_params: dict[str, Any]
) -> list[EarlierPick]:
    """Queues ``earlier_picks`` (but the baseline, queued already) as the study's next
    trials, each with its role and source; says which. Returns them."""
    picks = [p for p in earlier_picks(session, study.study_name) if p.params != baseline_params]
    for pick in picks:
        attrs = {TrialKey.ROLE: store.WARM_START, TrialKey.WARM_FROM: pick.source}
        store.enqueue(study, pick.params, attrs)
    if picks:
        log.info(
            "warm start: the picks of earlier studies of this job on this kind of machine run "
            "first: %s (study.warm_start=false starts cold)",
            "; ".join(f"{p.source} ({p.way})" for p in picks),
        )
    return picks

"""What a finished run stored on the study beside its trials: the confirmed rows, each way's
winner, the baseline in words, the notes, the workload and the machine. ``mode=report`` and
the dashboard note are rebuilt from these alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.tuner import store
from autotune.tuner.store import BASELINE, StudyKey, role_of


def trial_of_row(study: optuna.Study, row: dict[str, Any]) -> FrozenTrial | None:
    """The trial a confirmed row stands for: the baseline by its role, any other by its
    ``trial_number`` (rows stored before they carried one name it in their label)."""
    trials = study.get_trials(deepcopy=False)
    if row["label"] == BASELINE:
        return next((t for t in trials if role_of(t) == BASELINE), None)
    number = row.get("trial_number")
    if number is None:
        number = row["label"].removeprefix("trial ")
    return next((t for t in trials if str(t.number) == str(number)), None)


@dataclass(frozen=True)
class StoredResult:
    """What a finished run stored on the study: enough to rebuild its report."""

    confirmed: tuple[dict[str, Any], ...]  # Confirmed.to_dict() rows
    winner: str | None  # the winning row's label: the whole tuned pipeline
    winner_trial: FrozenTrial | None
    as_is_winner: str | None  # the row picked for the user's pipeline as it is
    baseline: str | None  # what the baseline runs, in one line
    ceiling: float | None
    cpu_work_bound: float | dict[str, float] | None
    notes: tuple[str, ...]
    workload: dict[str, Any] | None
    machine: dict[str, Any] | None
    worth: dict[str, Any] | None = None  # WorthTable.to_dict(): what each setting is worth


def save_result(
    study: optuna.Study,
    confirmed: list[dict[str, Any]],
    *,
    winner: str,
    as_is_winner: str | None,
    baseline: str,
    notes: list[str],
    worth: dict[str, Any] | None = None,
) -> None:
    store.set_study_attr(study, StudyKey.CONFIRMATION, confirmed)
    store.set_study_attr(study, StudyKey.WORTH, worth)
    store.set_study_attr(study, StudyKey.WINNER, winner)
    store.set_study_attr(study, StudyKey.AS_IS_WINNER, as_is_winner)
    store.set_study_attr(study, StudyKey.BASELINE, baseline)
    store.set_study_attr(study, StudyKey.NOTES, notes)


def save_context(study: optuna.Study, workload: dict[str, Any], machine: dict[str, Any]) -> None:
    """The workload and machine, so the report can be rebuilt from the storage alone."""
    store.set_study_attr(study, StudyKey.WORKLOAD, workload)
    store.set_study_attr(study, StudyKey.MACHINE, machine)


def load_result(study: optuna.Study) -> StoredResult:
    attrs = store.study_attrs(study)
    confirmed = tuple(attrs.get(StudyKey.CONFIRMATION, ()))
    winner = attrs.get(StudyKey.WINNER)
    if winner is None and confirmed:  # stored before the winner was: the fastest
        winner = max(confirmed, key=lambda r: r["samples_per_s"])["label"]
    row = next((r for r in confirmed if r["label"] == winner), None)
    return StoredResult(
        confirmed=confirmed,
        winner=winner,
        winner_trial=trial_of_row(study, row) if row else None,
        as_is_winner=attrs.get(StudyKey.AS_IS_WINNER),
        baseline=attrs.get(StudyKey.BASELINE),
        ceiling=attrs.get(StudyKey.CEILING),
        cpu_work_bound=attrs.get(StudyKey.CPU_WORK_BOUND),
        notes=tuple(attrs.get(StudyKey.NOTES, ())),
        workload=attrs.get(StudyKey.WORKLOAD),
        machine=attrs.get(StudyKey.MACHINE),
        worth=attrs.get(StudyKey.WORTH),
    )

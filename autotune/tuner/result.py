"""A study's outcome, in one type: built by the tuner at the end of a run, stored on the study
beside its trials and read back from the study alone (``mode=report``, a host that did not
confirm), printed by the summary and written by the export.

Example:
    >>> result = StudyResult.load(study, storage="sqlite:///studies/autotune.db")
    >>> result.winner["samples_per_s"], result.speedup   # (812.3, 1.96)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.pipeline.best_file import MachineSection, WorkloadSection
from autotune.pipeline.config import PipelineConfig
from autotune.tuner import store, study_trials
from autotune.tuner.metrics import speedup
from autotune.tuner.store import BASELINE, StudyKey, TrialKey, role_of

# a study's phases, in the order they run: the reference points (ceiling, stage profile), the
# search (TPE and polish), the confirmation of the finalists, the worth table
STUDY_PHASES = ("references", "search", "confirmation", "worth")

# A confirmed finalist as the study keeps it (``Confirmed.to_dict()``): label, trial_number,
# config (its label), pipeline, samples_per_s, steady, iqr, rounds, spread, peak_memory_mb
Row = dict[str, Any]


@dataclass(frozen=True)
class StudyResult:
    """What a study found, and what it cost: the finalists beside the baseline, each way's
    pick, the limits, the notes and the worth table."""

    study_name: str
    storage: str
    confirmed: tuple[Row, ...] = ()
    winner_label: str | None = None  # the whole tuned pipeline (build_loader); None: none
    as_is_label: str | None = None  # the pick for the user's pipeline as it is (loader_kwargs)
    best: PipelineConfig | None = None  # the winner's config
    best_params: dict[str, Any] | None = None  # the winning trial's params
    baseline_text: str | None = None  # what the baseline runs, in one line
    ceiling: float | None = None  # samples/s of the step on a batch already on the device
    # samples/s the loader's CPU work (decode + augment, or the user's own Dataset's read)
    # allows on all usable CPUs: one, or one per decoder
    cpu_work_bound: float | dict[str, float] | None = None
    notes: tuple[str, ...] = ()
    worth: dict[str, Any] | None = None  # what each setting is worth (WorthTable.to_dict())
    counts: dict[str, int] = field(default_factory=dict)  # measured trials by state
    failures: dict[str, int] = field(default_factory=dict)  # failure kind -> trials
    device: str | None = None
    workload: WorkloadSection | None = None
    machine: MachineSection | None = None
    # where this run's time went, in seconds: each of STUDY_PHASES that ran (a resumed study:
    # this run's share)
    time_split: dict[str, float] = field(default_factory=dict)
    interrupted: bool = False
    # another host sharing the study confirmed it: its best.yaml, as it wrote it
    published: str | None = None
    # autotune.DataLoader's study: the setting it kept on the run, and its samples/s there
    online_kept: PipelineConfig | None = None
    online_kept_rate: float | None = None

    def row(self, label: str | None) -> Row | None:
        return next((r for r in self.confirmed if r["label"] == label), None)

    @property
    def winner(self) -> Row | None:
        return self.row(self.winner_label)

    @property
    def baseline(self) -> Row | None:
        return self.row(BASELINE)

    @property
    def as_is_winner(self) -> Row | None:
        return self.row(self.as_is_label) if self.as_is_label else None

    def speedup_of(self, label: str | None) -> float | None:
        picked, base = self.row(label), self.baseline
        return speedup(
            picked["samples_per_s"] if picked else None, base["samples_per_s"] if base else None
        )

    def speedup_range_of(self, label: str | None) -> tuple[float, float] | None:
        """The range the claim's rounds measured: the pick's IQR over the baseline's median
        (as ``mode=verify`` states its own)."""
        picked, base = self.row(label), self.baseline
        if picked is None or base is None or not base["samples_per_s"]:
            return None
        low, high = picked["iqr"]
        return (low / base["samples_per_s"], high / base["samples_per_s"])

    @property
    def speedup(self) -> float | None:
        return self.speedup_of(self.winner_label)

    @property
    def search_wall_s(self) -> float:
        """This run's search (TPE and polish), not the confirmation."""
        return self.time_split.get("search", 0.0)

    @property
    def complete_trials(self) -> int:
        return self.counts.get("complete", 0)

    def save(self, study: optuna.Study) -> None:
        """What ``load`` rebuilds the result from, kept on the study."""
        store.set_study_attr(study, StudyKey.CONFIRMATION, list(self.confirmed))
        store.set_study_attr(study, StudyKey.WORTH, self.worth)
        store.set_study_attr(study, StudyKey.WINNER, self.winner_label)
        store.set_study_attr(study, StudyKey.AS_IS_WINNER, self.as_is_label)
        store.set_study_attr(study, StudyKey.BASELINE, self.baseline_text)
        store.set_study_attr(study, StudyKey.NOTES, list(self.notes))
        store.set_study_attr(study, StudyKey.TIME_SPLIT, self.time_split)

    @classmethod
    def load(cls, study: optuna.Study, *, storage: str) -> StudyResult:
        """The result as the study keeps it, with its trials' counts."""
        attrs = store.study_attrs(study)
        confirmed = tuple(attrs.get(StudyKey.CONFIRMATION, ()))
        winner = attrs.get(StudyKey.WINNER)
        if winner is None and confirmed:  # stored before the winner was: the fastest
            winner = max(confirmed, key=lambda r: r["samples_per_s"])["label"]
        row = next((r for r in confirmed if r["label"] == winner), None)
        trial = trial_of_row(study, row) if row else None
        trials = study.get_trials(deepcopy=False)
        stored = attrs.get(StudyKey.WORKLOAD)
        workload = WorkloadSection.from_dict(stored) if stored else None
        kept = attrs.get(StudyKey.ONLINE_KEPT)
        if trial is None and kept is not None:  # an online study's: the setting it kept
            trial = next((t for t in reversed(trials) if _of_kept(t, kept)), None)
        return cls(
            study_name=study.study_name,
            storage=storage,
            confirmed=confirmed,
            winner_label=winner,
            as_is_label=attrs.get(StudyKey.AS_IS_WINNER),
            best=store.pipeline_of(trial) if row and trial and _recorded(trial) else None,
            best_params=trial.params if trial else None,
            baseline_text=attrs.get(StudyKey.BASELINE),
            ceiling=attrs.get(StudyKey.CEILING),
            cpu_work_bound=attrs.get(StudyKey.CPU_WORK_BOUND),
            notes=tuple(attrs.get(StudyKey.NOTES, ())),
            worth=attrs.get(StudyKey.WORTH),
            counts=trial_counts(trials),
            failures=failure_counts(trials),
            device=workload.device if workload else None,
            workload=workload,
            machine=MachineSection.from_dict(attrs.get(StudyKey.MACHINE)),
            time_split=attrs.get(StudyKey.TIME_SPLIT) or {},
            online_kept=PipelineConfig.from_dict(kept) if kept else None,
            online_kept_rate=attrs.get(StudyKey.ONLINE_KEPT_RATE),
        )


def _of_kept(trial: FrozenTrial, kept: dict[str, Any]) -> bool:
    """Whether ``trial`` measured the setting an online run kept (``kept``, as stored)."""
    measured = trial.state == TrialState.COMPLETE
    return measured and store.trial_attr(trial, TrialKey.PIPELINE) == kept


def _recorded(trial: FrozenTrial) -> bool:
    return store.trial_attr(trial, store.TrialKey.PIPELINE) is not None


def save_context(study: optuna.Study, workload: WorkloadSection, machine: MachineSection) -> None:
    """The workload and machine, so the report can be rebuilt from the storage alone."""
    store.set_study_attr(study, StudyKey.WORKLOAD, workload.to_dict())
    store.set_study_attr(study, StudyKey.MACHINE, machine.to_dict())


def trial_of_row(study: optuna.Study, row: Row) -> FrozenTrial | None:
    """The trial a confirmed row stands for: the baseline by its role, any other by its
    ``trial_number`` (rows stored before they carried one name it in their label)."""
    trials = study.get_trials(deepcopy=False)
    if row["label"] == BASELINE:
        return next((t for t in trials if role_of(t) == BASELINE), None)
    number = row.get("trial_number")
    if number is None:
        number = row["label"].removeprefix("trial ")
    return next((t for t in trials if str(t.number) == str(number)), None)


def trial_counts(trials: list[FrozenTrial]) -> dict[str, int]:
    """Measured trials by state (complete, pruned, fail), and the repeats beside them."""
    own = study_trials.measured(trials)
    counts = Counter(t.state.name.lower() for t in own if t.state.is_finished())
    repeated = sum(t.state.is_finished() for t in trials) - counts.total()
    return {**counts, "repeated": repeated} if repeated else dict(counts)


def failure_counts(trials: list[FrozenTrial]) -> dict[str, int]:
    """Failed measured trials by their failure kind."""
    return dict(
        Counter(
            store.failure_kind(t).value
            for t in study_trials.measured(trials)
            if t.state == TrialState.FAIL and store.has_failure(t)
        )
    )

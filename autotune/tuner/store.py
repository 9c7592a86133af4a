"""The study store: the Optuna study in its storage, and the record kept on its trials (a
finished run's own record is in ``result``).

Every trial and study attribute the tool writes is named here, with the functions that write
and read it: the dashboard, ``mode=report`` and the report read what the search wrote through
this one module, so a renamed key cannot break one of them silently.
"""

from __future__ import annotations

import logging
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.pipeline.config import PipelineConfig
from autotune.runtime.failures import FailureKind
from autotune.runtime.trial import TrialOutcome
from autotune.tuner.lease import this_process

log = logging.getLogger(__name__)

METRIC = "samples_per_s"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


class TrialKey:
    """A trial's user attributes, with readable names (optuna-dashboard lists them)."""

    CONFIG = "config"  # the short label, e.g. "w2 pf4 persist torchvision t1 bs32"
    PIPELINE = "pipeline"  # PipelineConfig as best.yaml's loader and pipeline sections
    ROLE = "role"  # "baseline" (enqueued first), "warm_start" or "polish"; absent for TPE's
    WARM_FROM = "warm_start_from"  # a warm start's source: "trial N of study S"
    POLISHED = "polished_as_is"  # a polish step from the best of the pipeline as it is
    POLISH_KNOB = "polish_knob"  # the knob a polish step moves ("decoder swap": another decoder)
    POLISH_FROM = "polish_from"  # the trial number of the best it moves from
    WALL_S = "wall_s"
    HOST = "host"  # the host (and pid) that measured it: hosts may share a study
    PEAK_MEMORY_MB = "peak_memory_mb"
    EPOCH = "samples_per_s_epoch"  # the objective when study.epoch_aware
    STEADY = "samples_per_s_steady"
    PREDICTED = "samples_per_s_predicted"  # the rate model's, before the trial (``rate_model``)
    PREDICTED_BINDS = "predicted_binds"  # the part that binds in the model
    PREDICTED_BOUND = "predicted_bound"  # that part's limit, before the earlier trials scale it
    SUB_WINDOWS = "samples_per_s_sub_windows"
    SPREAD = "spread"
    DATA_WAIT = "data_wait_fraction"  # with several ranks: the slowest rank's
    RANK_RATES = "samples_per_s_ranks"  # several ranks: each rank's own rate
    RANK_DATA_WAITS = "data_wait_fraction_ranks"  # and its own data wait
    TIME_TO_FIRST_BATCH = "time_to_first_batch_s"
    EPOCH_START = "epoch_start_s"  # to a next epoch's first batch in hand
    EPOCH_OVERHEAD = "epoch_overhead_s"  # a whole epoch beyond its samples at the steady rate
    # each epoch's share of preparing the config's prepared copy (charged in its value)
    PREPARATION = "preparation_per_epoch_s"
    FIRST_STEP = "first_step_s"  # the run's first step: its warm-up (compiling, if asked)
    TIMED_COMPILES = "timed_compiles"  # graphs torch.compile built inside the timed windows
    WARMUP_BATCHES = "warmup_batches"
    GPU_PEAK_MEMORY_MB = "gpu_peak_memory_mb"
    GPU_UTILIZATION = "gpu_utilization_pct"
    PRUNED_AFTER = "pruned_after_sub_window"
    FAILURE = "failure"  # {kind, message, hint}
    SKIPPED = "skipped"  # why it was not run (it would not fit in memory; predicted to lose)
    PREDICTED_TO_LOSE = "predicted_to_lose"  # skipped as the rate model said (``prospects``)
    CONSTRAINT = "constraint"  # > 0: over study.memory_budget_gb by this many GB
    # an earlier finished trial's config (its number here): suggested again, not measured
    # twice, its outcome taken at no cost; or measured again (online), too close to call
    REPEAT_OF, LOOK_OF = "repeat_of", "second_look_of"


class StudyKey:
    """The study's user attributes: what ``mode=report`` rebuilds the report from."""

    FINGERPRINT = "fingerprint"
    JOB = "job_fingerprint"  # the job alone (session.fingerprints.of_job): for warm starts
    FORMAT = "format"  # STUDY_FORMAT of the autotune that made the study
    CEILING = "ceiling_samples_per_s"
    CPU_WORK_BOUND = "cpu_work_bound_samples_per_s"  # one figure, or one per decoder
    CONFIRMATION = "confirmation"  # the confirmed rows (Confirmed.to_dict())
    WINNER = "winner"  # the winning row's label: the whole tuned pipeline (build_loader)
    AS_IS_WINNER = "as_is_winner"  # the winner for the user's pipeline as it is (loader_kwargs)
    BASELINE = "baseline"  # what the baseline runs, in one line
    NOTES = "notes"
    WORTH = "worth"  # what each setting of the winner is worth (worth.WorthTable.to_dict())
    IMPORTANCES = "importances_fanova"  # report.md's importances, for the dashboard's list
    WORKLOAD = "workload"
    MACHINE = "machine"  # best_file.MachineSection: the hosts of the study are all alike
    BEST_FILE = "best_yaml"  # best.yaml as the host that confirmed wrote it, for every host
    VERIFY = "verify"  # mode=verify's verdict per claim (optuna-dashboard shows it)
    TIME_SPLIT = "time_split_s"  # the last run's seconds per phase (result.STUDY_PHASES)
    MODEL_ERROR = "rate_model_error"  # rate_model.ModelError: how far its predictions missed
    # autotune.DataLoader's: the setting kept (where the job's next run starts), its samples/s
    ONLINE_KEPT = "online_kept"
    ONLINE_KEPT_RATE = "online_kept_samples_per_s"
    ONLINE_START = "online_start"  # an offline study's as-is pick, for that loader's runs


BASELINE = "baseline"
POLISH = "polish"
WARM_START = "warm_start"  # an earlier study's pick, of the same job (``warm_start``)
INSTEAD_OF_REPEAT = "instead_of_repeat"  # a neighbour of the best, where TPE repeated itself
# What a study's trials mean: 2 since the baseline is the pipeline as it is and every epoch's
# start is measured. A study of another format resumes nothing: its figures are not these.
STUDY_FORMAT = 2
GRID = "grid"  # a point of the benchmark's exhaustive grid


# --- any attribute: this module is the only door to them ---------------------------------


def trial_attr(trial: FrozenTrial, key: str, default: Any = None) -> Any:
    """One of a trial's attributes (a ``TrialKey``), or ``default`` where it has none."""
    return trial.user_attrs.get(key, default)


def set_trial_attr(trial: optuna.Trial, key: str, value: Any) -> None:
    trial.set_user_attr(key, value)


def study_attr(study: optuna.Study, key: str, default: Any = None) -> Any:
    """One of the study's attributes (a ``StudyKey``), or ``default`` where it has none."""
    return study.user_attrs.get(key, default)


def attr_of_studies(storage: str, key: str) -> list[tuple[str, Any]]:
    """Each study in ``storage`` that has attribute ``key``: its name, and the value."""
    summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
    return [(s.study_name, s.user_attrs[key]) for s in summaries if key in s.user_attrs]


def study_attrs(study: optuna.Study) -> dict[str, Any]:
    """The study's attributes, read once (each read of a remote storage is a query)."""
    return dict(study.user_attrs)


def set_study_attr(study: optuna.Study, key: str, value: Any) -> None:
    study.set_user_attr(key, value)


def enqueue(study: optuna.Study, params: dict[str, Any], attrs: dict[str, Any]) -> None:
    """Queues ``params`` as the study's next trial, with its attributes (its role...)."""
    study.enqueue_trial(params, user_attrs=attrs)


def enqueued_params(trial: FrozenTrial) -> dict[str, Any]:
    """The params a trial was queued with (empty for one the sampler suggested)."""
    return dict(trial.system_attrs.get("fixed_params", {}))


# --- trials: written ----------------------------------------------------------------------


def record_outcome(trial: optuna.Trial, config: PipelineConfig, outcome: TrialOutcome) -> None:
    """Stores what one trial measured (or why it failed)."""
    attrs: dict[str, object] = {
        TrialKey.CONFIG: config.short(),
        TrialKey.PIPELINE: config.to_dict(),
        TrialKey.WALL_S: round(outcome.wall_s, 2),
        TrialKey.HOST: this_process(),
    }
    if outcome.peak_memory_bytes:
        attrs[TrialKey.PEAK_MEMORY_MB] = round(outcome.peak_memory_bytes / 2**20, 1)
    m = outcome.measurement
    if m is not None:
        attrs.update(
            {
                TrialKey.STEADY: round(m.samples_per_s, 1),
                TrialKey.SUB_WINDOWS: [round(v, 1) for v in m.sub_window_samples_per_s],
                TrialKey.SPREAD: round(m.spread, 3),
                TrialKey.DATA_WAIT: round(m.data_wait_fraction, 3),
                TrialKey.TIME_TO_FIRST_BATCH: round(m.time_to_first_batch_s, 3),
                TrialKey.WARMUP_BATCHES: m.warmup_batches,
            }
        )
        if m.rank_samples_per_s:
            attrs[TrialKey.RANK_RATES] = [round(v, 1) for v in m.rank_samples_per_s]
            attrs[TrialKey.RANK_DATA_WAITS] = [round(v, 3) for v in m.rank_data_wait_fraction]
        if m.epoch_start_s is not None:
            attrs[TrialKey.EPOCH_START] = round(m.epoch_start_s, 3)
        if m.epoch_overhead_s is not None:
            attrs[TrialKey.EPOCH_OVERHEAD] = round(m.epoch_overhead_s, 3)
        if m.first_step_s is not None:
            attrs[TrialKey.FIRST_STEP] = round(m.first_step_s, 3)
        if m.timed_compiles:
            attrs[TrialKey.TIMED_COMPILES] = m.timed_compiles
        if m.gpu_peak_memory_bytes is not None:
            attrs[TrialKey.GPU_PEAK_MEMORY_MB] = round(m.gpu_peak_memory_bytes / 2**20, 1)
        if m.gpu_utilization_pct is not None:  # None without a GPU
            attrs[TrialKey.GPU_UTILIZATION] = round(m.gpu_utilization_pct, 1)
    if outcome.status == "pruned":
        attrs[TrialKey.PRUNED_AFTER] = (outcome.pruned_at or 0) + 1
    if outcome.failure is not None:
        attrs[TrialKey.FAILURE] = outcome.failure.to_dict()
    for key, value in attrs.items():
        trial.set_user_attr(key, value)


def record_repeat(trial: optuna.Trial, config: PipelineConfig, earlier: FrozenTrial) -> None:
    trial.set_user_attr(TrialKey.CONFIG, config.short())
    trial.set_user_attr(TrialKey.PIPELINE, config.to_dict())
    trial.set_user_attr(TrialKey.REPEAT_OF, earlier.number)
    if TrialKey.CONSTRAINT in earlier.user_attrs:  # the sampler weighs it as it did the first
        trial.set_user_attr(TrialKey.CONSTRAINT, earlier.user_attrs[TrialKey.CONSTRAINT])


def record_skipped(trial: optuna.Trial, config: PipelineConfig, reason: str) -> None:
    trial.set_user_attr(TrialKey.CONFIG, config.short())
    trial.set_user_attr(TrialKey.SKIPPED, reason)


def finished_trial(
    params: dict[str, Any],
    distributions: dict[str, Any],
    attrs: dict[str, Any],
    value: float | None,
) -> FrozenTrial:
    """A trial measured without the sampler's asking (``study.add_trial`` takes it): complete
    with ``value``, or failed where it has none; ``attrs`` are ``TrialKey``'s."""
    return optuna.trial.create_trial(
        params=params, distributions=distributions, user_attrs=attrs,
        state=TrialState.COMPLETE if value is not None else TrialState.FAIL, value=value,
    )  # fmt: skip


# --- trials: read -------------------------------------------------------------------------


def pipeline_of(trial: FrozenTrial) -> PipelineConfig:
    return PipelineConfig.from_dict(trial.user_attrs[TrialKey.PIPELINE])


def setting_of(trial: FrozenTrial, name: str) -> Any:
    """One setting a trial ran with (``decoder``, ``num_workers``...), from its recorded
    pipeline, else its params; None where neither has it (a skipped or killed trial)."""
    recorded = trial.user_attrs.get(TrialKey.PIPELINE, {})
    flat = {**recorded.get("loader", {}), **recorded.get("pipeline", {})}
    return flat.get(name, trial.params.get(name))


def role_of(trial: FrozenTrial) -> str | None:
    return trial.user_attrs.get(TrialKey.ROLE)


def failure_kind(trial: FrozenTrial) -> FailureKind:
    return FailureKind.of(trial.user_attrs.get(TrialKey.FAILURE, {}).get("kind", "error"))


def has_failure(trial: FrozenTrial) -> bool:
    return TrialKey.FAILURE in trial.user_attrs


def is_skipped(trial: FrozenTrial) -> bool:
    return TrialKey.SKIPPED in trial.user_attrs


def is_predicted_to_lose(trial: FrozenTrial) -> bool:
    return TrialKey.PREDICTED_TO_LOSE in trial.user_attrs


def is_repeat(trial: FrozenTrial) -> bool:
    return TrialKey.REPEAT_OF in trial.user_attrs


def is_interrupted(trial: FrozenTrial) -> bool:
    """Whether a stop (Ctrl-C, SIGTERM; a run's loader collected) ended the trial: it
    measured nothing."""
    stopped = (FailureKind.INTERRUPTED, FailureKind.ABANDONED)
    return has_failure(trial) and failure_kind(trial) in stopped

"""A predicted rate for each point of the space, from what the study measures before it
searches: the ceiling (the step with its data in memory) and each decoder's CPU seconds per
sample (the stage profile behind the CPU-work bound).

A config's steady samples/s is the least of what its parts allow, Plumber's way:

- **the ceiling**: the step alone;
- **no workers**: the main process reads, decodes and augments each sample, then steps it,
  one after the other: 1 / (CPU s per sample + step s per sample);
- **workers**: each worker makes one sample at a time on a core of its own: workers / CPU s
  per sample;
- **the CPUs**: every usable CPU shared by the workers' work and, on a CPU device, the step's
  threads while it runs: CPUs / (CPU s per sample + step s per sample x step threads).

These are bounds, from parts measured alone on an idle core; a trial also pays for handing
batches from the workers to the main process, for processes and threads contending for the
cores, for the prefetch depth, pinning and memory bandwidth, which the model does not know.
So each prediction is scaled by what the study's earlier trials measured against the bound
that bound them (the median of measured / bound), and is made before its trial runs: the
error over the study (median and worst |predicted / measured - 1|, stored and reported) is
the error of predictions made without the trial's own figure. A config it has no profile for
(a prepared copy, a decoder on the device, another batch size; ranks sharing the CPUs) gets
no prediction; reads that wait on storage are not modelled.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.pipeline.config import PipelineConfig
from autotune.tuner import store, study_trials
from autotune.tuner.store import StudyKey, TrialKey


@dataclass(frozen=True)
class Prediction:
    samples_per_s: float  # the bound, scaled by what earlier trials measured against it
    binds: str  # "ceiling", "main process", "workers" or "CPUs"
    bound: float  # the least of the parts' limits, unscaled


@dataclass(frozen=True)
class RateModel:
    ceiling: float  # samples/s of the step alone
    cpu_s: Mapping[str, float]  # CPU seconds per sample of the loader's work, by decoder
    cpus: int  # usable CPUs (a rank's share)
    batch_size: int  # what the ceiling and the profile were measured at
    step_takes_cpus: bool = True  # the step runs on the CPU (not on a GPU)

    @classmethod
    def of(
        cls,
        ceiling: float | None,
        cpu_work_bound: float | Mapping[str, float] | None,
        *,
        cpus: int,
        batch_size: int,
        device: str,
        ranks: int = 1,
    ) -> RateModel | None:
        """From the study's stored reference points (``StudyKey.CEILING`` and
        ``StudyKey.CPU_WORK_BOUND``: ``cpus`` usable CPUs / CPU s per sample); None without
        them, or for ranks that share the CPUs (not modelled)."""
        if ranks > 1 or not ceiling or not isinstance(cpu_work_bound, Mapping):
            return None
        cpu_s = {name: cpus / bound for name, bound in cpu_work_bound.items() if bound > 0}
        if not cpu_s:
            return None
        return cls(ceiling, cpu_s, cpus, batch_size, step_takes_cpus=device == "cpu")

    def predict(
        self,
        config: PipelineConfig,
        earlier: Sequence[tuple[str, float, float]] = (),
    ) -> Prediction | None:
        """``config``'s steady samples/s, and which part binds; None where the model has no
        profile for it. ``earlier``: (binds, bound, measured) of the trials before, whose
        median measured / bound (of those the same part bound, else of all) scales it."""
        cpu = self.cpu_s.get(config.decoder)
        if cpu is None or config.cache != "none" or config.batch_size != self.batch_size:
            return None
        step = 1.0 / self.ceiling
        if config.num_workers == 0:
            limits = {"main process": 1.0 / (cpu + step)}
        else:
            threads = min(config.main_threads, self.cpus) if self.step_takes_cpus else 0
            limits = {
                "workers": config.num_workers / cpu,
                "CPUs": self.cpus / (cpu + step * threads),
            }
        limits["ceiling"] = self.ceiling
        binds = min(limits, key=lambda name: limits[name])
        ratios = [m / b for part, b, m in earlier if part == binds and b > 0]
        ratios = ratios or [m / b for _, b, m in earlier if b > 0]
        scale = statistics.median(ratios) if ratios else 1.0
        return Prediction(round(limits[binds] * scale, 1), binds, round(limits[binds], 1))


@dataclass(frozen=True)
class ModelError:
    """How far the predictions missed the measured steady rates: |predicted / measured - 1|."""

    median: float
    worst: float
    trials: int

    @classmethod
    def of(cls, pairs: list[tuple[float, float]]) -> ModelError | None:
        """From (predicted, measured) pairs; None without one."""
        errors = [abs(p / m - 1) for p, m in pairs if m > 0]
        if not errors:
            return None
        return cls(round(statistics.median(errors), 3), round(max(errors), 3), len(errors))

    def to_dict(self) -> dict[str, Any]:
        return {"median": self.median, "worst": self.worst, "trials": self.trials}

    def text(self) -> str:
        return (
            f"rate model: off by {self.median:.0%} at the median, {self.worst:.0%} at worst, "
            f"over {self.trials} measured trial(s)"
        )


def for_study(
    study: optuna.Study, *, cpus: int, batch_size: int, device: str, ranks: int
) -> RateModel | None:
    """The model of ``study``'s stored reference points (None before they are measured)."""
    return RateModel.of(
        store.study_attr(study, StudyKey.CEILING),
        store.study_attr(study, StudyKey.CPU_WORK_BOUND),
        cpus=cpus,
        batch_size=batch_size,
        device=device,
        ranks=ranks,
    )


def predicted_trials(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The complete, measured ``trials`` that carry a prediction and their steady rate."""
    complete = study_trials.measured([t for t in trials if t.state == TrialState.COMPLETE])
    keys = (TrialKey.PREDICTED, TrialKey.PREDICTED_BOUND, TrialKey.STEADY)
    return [t for t in complete if all(store.trial_attr(t, key) for key in keys)]


def error_over(predicted: list[FrozenTrial]) -> ModelError | None:
    """The model's error over ``predicted`` (``predicted_trials``); None without one."""
    return ModelError.of(
        [
            (store.trial_attr(t, TrialKey.PREDICTED), store.trial_attr(t, TrialKey.STEADY))
            for t in predicted
        ]
    )


def earlier(study: optuna.Study) -> list[tuple[str, float, float]]:
    """(binds, bound, measured steady rate) of the study's predicted trials so far."""
    return [
        (
            store.trial_attr(t, TrialKey.PREDICTED_BINDS),
            store.trial_attr(t, TrialKey.PREDICTED_BOUND),
            store.trial_attr(t, TrialKey.STEADY),
        )
        for t in predicted_trials(study.get_trials(deepcopy=False))
    ]


def record(trial: optuna.Trial, predicted: Prediction) -> None:
    store.set_trial_attr(trial, TrialKey.PREDICTED, predicted.samples_per_s)
    store.set_trial_attr(trial, TrialKey.PREDICTED_BINDS, predicted.binds)
    store.set_trial_attr(trial, TrialKey.PREDICTED_BOUND, predicted.bound)


def record_error(study: optuna.Study) -> str | None:
    """The model's error over the study's predicted trials, stored on the study
    (``StudyKey.MODEL_ERROR``); the note that says it, or None where nothing was predicted."""
    error = error_over(predicted_trials(study.get_trials(deepcopy=False)))
    if error is None:
        return None
    store.set_study_attr(study, StudyKey.MODEL_ERROR, error.to_dict())
    return error.text()

"""The study's trials taken together: which measured, which already ran a config, the budget
they spent and the best so far. Each trial is read through ``store``'s predicates."""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.pipeline.config import PipelineConfig
from autotune.tuner import store
from autotune.tuner.store import FINISHED, TrialKey


def measured(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that took a measurement of their own, or are taking it: not the repeats,
    nor those queued for a later run (the worth table's variant that beat the winner)."""
    return [t for t in trials if t.state != TrialState.WAITING and not store.is_repeat(t)]


def earlier_run(study: optuna.Study, config: PipelineConfig) -> FrozenTrial | None:
    """The finished trial that already ran ``config`` (on any host), if one did; one that
    Ctrl-C interrupted measured nothing and does not count."""
    wanted = config.to_dict()
    for t in study.get_trials(deepcopy=False, states=FINISHED):
        if store.is_repeat(t) or store.trial_attr(t, TrialKey.PIPELINE) != wanted:
            continue
        if not store.is_interrupted(t):
            return t
    return None


def spent(study: optuna.Study, *, free: int) -> int:
    """The budget the trials started on any host have spent: a repeat, or a point the rate
    model skipped, costs nothing while there have been no more than ``free`` of them (the
    sampler must still come to an end); nor does a trial a stop interrupted (resumed, the
    run measures the study's whole count)."""
    started = study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.RUNNING))
    started = [t for t in started if not store.is_interrupted(t)]
    costless = sum(store.is_repeat(t) or store.is_predicted_to_lose(t) for t in started)
    return len(started) - costless + max(0, costless - free)


def finished_count(study: optuna.Study) -> int:
    """The finished trials that took a measurement (repeats, points the model skipped and
    interrupted trials took none)."""
    finished = study.get_trials(deepcopy=False, states=FINISHED)
    return sum(
        not (store.is_repeat(t) or store.is_predicted_to_lose(t) or store.is_interrupted(t))
        for t in finished
    )


def best_value(study: optuna.Study) -> float | None:
    """The best objective of the complete trials so far (None before the first)."""
    values = [
        t.value
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.value is not None
    ]
    return max(values) if values else None

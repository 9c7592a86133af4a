"""The two ways a result is applied, searched side by side in one study: the user's pipeline
as it is (``decoder=as_is``: only the DataLoader's arguments and threads vary; what
``loader_kwargs`` hands back) and any pipeline (what ``build_loader`` builds).

The as-is configs are slower than the tuner's own decoders on most machines, so each way is
judged against its own kind: a trial is pruned only for losing to trials of its way, and a
share of the trials is spent on the as-is way whatever TPE would prefer.

(Optuna's PartialFixedSampler would fix the decoder too, but before Optuna 5 it breaks under
a multivariate, grouped TPE: an enqueued decoder does the same with any version.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.pipeline.config import AS_IS
from autotune.session import SearchSpace
from autotune.tuner import store
from autotune.tuner.metrics import feasible_complete


def searches_both(space: SearchSpace) -> bool:
    """Whether ``space`` searches both ways: decoders besides as_is (always one of them)."""
    return len(space.choices("decoder")) > 1


def is_as_is(params: Mapping[str, Any]) -> bool:
    """Whether trial params are the pipeline as it is (a space without a decoder knob tunes
    nothing else: every trial is)."""
    return params.get("decoder", AS_IS) == AS_IS


class _TrialsOfOneWay:
    """The study as a pruner sees it: only the trials of one way."""

    def __init__(self, study: optuna.Study, as_is: bool) -> None:
        self._study, self._as_is = study, as_is
        self.direction = study.direction

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> list[FrozenTrial]:
        trials = self._study.get_trials(deepcopy=deepcopy, states=states)
        return [t for t in trials if is_as_is(t.params) == self._as_is]


class SameWayPruner(optuna.pruners.BasePruner):
    """``pruner``, judging each trial against the trials of its own way only."""

    def __init__(self, pruner: optuna.pruners.BasePruner) -> None:
        self._pruner = pruner

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        view = _TrialsOfOneWay(study, is_as_is(trial.params))
        return self._pruner.prune(view, trial)  # type: ignore[arg-type]  # duck-typed study


# A rate so far that, this much higher, still stays below its way's best is clearly beaten:
# what the spans of one run are allowed to disagree by before they count as settled
# (``window.target_spread``'s default).
BEATEN_BY = 0.10


def beaten(rate: float, best: float) -> bool:
    """Whether ``rate``, even ``BEATEN_BY`` higher, stays below ``best``: clearly beaten."""
    return rate * (1 + BEATEN_BY) < best


class ClearlyBeaten(optuna.pruners.BasePruner):
    """Racing inside the search: a trial whose steady rate so far (all its timed samples
    over all their time), even ``BEATEN_BY`` higher, stays below the best epoch rate a
    complete feasible trial of its way has reached, is stopped: the rest of its window could
    not make it a finalist. An epoch's start and end lower a rate more often than not, so a
    config within reach of the best is measured to the end; ``BEATEN_BY`` covers a pass
    that runs faster than its sub-windows did."""

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step  # reported only where the rate so far is evidence
        if step is None:
            return False
        best = best_epoch_rate(study)
        return best is not None and beaten(trial.intermediate_values[step], best)


def best_epoch_rate(study: optuna.Study, params: Mapping[str, Any] | None = None) -> float | None:
    """The best value a complete feasible trial reached: of ``params``'s way, given them."""
    if params is not None:
        study = _TrialsOfOneWay(study, is_as_is(params))  # type: ignore[assignment]
    return max((t.value for t in feasible_complete(study) if t.value), default=None)


def make_pruner() -> optuna.pruners.BasePruner:
    """Prunes only the clear losers of their own way (``ClearlyBeaten``)."""
    return SameWayPruner(ClearlyBeaten())


def ask_for_as_is(study: optuna.Study) -> None:
    """The next trial is one of the pipeline as it is: its decoder is fixed, TPE picks the
    rest of the params (an enqueued value wins over any sampler's)."""
    store.enqueue(study, {"decoder": AS_IS}, {})


def as_is_is_due(finished: list[FrozenTrial], share: float) -> bool:
    """Whether the next trial should be one of the pipeline as it is, for the as-is way to
    have ``share`` of the ``finished`` trials (from storage: a resumed study keeps it)."""
    as_is = sum(is_as_is(t.params) for t in finished)
    return as_is < share * (len(finished) + 1)

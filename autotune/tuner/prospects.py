"""The rate model acting on the search: a point it predicts to lose is skipped, and the search
ends when no point left is predicted to win.

Both calls are made against the best measured so far of the way a point belongs to (the
whole pipeline, or the pipeline as it is: each way has its own winner), and only once the
model has been checked: ``MIN_CHECKED`` trials predicted before they ran and then measured.
Its error is that of its last ``RECENT`` predictions.

- **Skip**: a point TPE suggests whose prediction, raised by the model's worst error so far,
  stays below the way's best steady rate (a polish step, a warm start, the baseline and the
  worth table's queued variant, which beat the winner when measured, are always measured).
  The worst, not the median: a skip is a point never measured, so the model must be wrong by
  more than it has been lately for the skip to cost a winner.
- **Stop**: no unmeasured point is predicted to beat the way's best by more than the best's
  own spread. Not raised by the model's error: a point predicted to tie is as likely to
  measure below the best as above it, and a space holds many near-ties (one thread or two,
  three workers or four) that a raised prediction would keep open whatever was measured;
  they win little where they win at all. The model sees the workers, the threads and
  the decoder; the knobs it cannot see (prefetch depth, persistence, a prepared copy, a decoder
  on the device) are left to the polish that follows, which then moves only those
  (``polish.next_step``'s ``unseen_only``), each once in each way's polish.

How the model is kept honest: every ``CHECK_EVERY``-th trial is measured even where the model
says it loses (its error is then measured where it says no, not only where it says yes), its
error is re-read before each call, and it is stored and reported with the study.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

import optuna

from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.session import SearchSpace
from autotune.tuner import rate_model, store
from autotune.tuner.metrics import feasible_complete
from autotune.tuner.rate_model import ModelError, Prediction, RateModel
from autotune.tuner.store import TrialKey
from autotune.tuner.ways import is_as_is

MIN_CHECKED = 3  # predicted trials measured before the model may skip or stop anything
# its error is read over the last few predictions: each is scaled by the trials before it, so
# the first ones (the bounds alone, off by up to 2x) are not the model as it stands
RECENT = 6
CHECK_EVERY = 4  # every 4th trial is measured even where the model says it loses
MODEL_KNOBS = ("decoder", "cache", "num_workers", "main_threads")  # what it predicts from


@dataclass(frozen=True)
class Best:
    steady: float
    spread: float
    trial: int


@dataclass(frozen=True)
class Standing:
    """What the model's calls are made against: its error so far and each way's best."""

    error: ModelError
    best: dict[bool, Best]  # by way: True for the pipeline as it is, False for the whole

    @classmethod
    def of(cls, study: optuna.Study, both_ways: bool) -> Standing | None:
        """None until ``MIN_CHECKED`` predictions were measured."""
        predicted = rate_model.predicted_trials(study.get_trials(deepcopy=False))
        error = rate_model.error_over(predicted[-RECENT:])
        if error is None or error.trials < MIN_CHECKED:
            return None
        best = {}
        rated = [t for t in feasible_complete(study) if store.trial_attr(t, TrialKey.STEADY)]
        for as_is in (False, True) if both_ways else (False,):
            way = [t for t in rated if not as_is or is_as_is(t.params)]
            if way:
                top = max(way, key=lambda t: store.trial_attr(t, TrialKey.STEADY))
                steady = store.trial_attr(top, TrialKey.STEADY)
                best[as_is] = Best(steady, store.trial_attr(top, TrialKey.SPREAD, 0.0), top.number)
        if not both_ways and False in best:  # one way: the pipeline as it is is all of it
            best[True] = best[False]
        return cls(error, best)

    def ways_of(self, config: PipelineConfig) -> list[Best]:
        """The bests ``config`` is judged against: its way's (an as-is config is of both);
        none for an as-is config while its way has no best (it has nothing to lose to)."""
        if config.decoder != AS_IS:
            return [self.best[False]] if False in self.best else []
        return [self.best[w] for w in (False, True)] if True in self.best else []


def skip_reason(
    trial: optuna.Trial, config: PipelineConfig, predicted: Prediction | None, both_ways: bool
) -> str | None:
    """Why the model lets the search skip ``config``, TPE's suggestion (or the neighbour that
    stands in for its repeat), or None where it is measured."""
    if predicted is None or trial.number % CHECK_EVERY == CHECK_EVERY - 1:
        return None
    if store.trial_attr(trial, TrialKey.ROLE) not in (None, store.INSTEAD_OF_REPEAT):
        return None  # the baseline, a warm start, a polish step, a grid point: measured
    standing = Standing.of(trial.study, both_ways)
    if standing is None:
        return None
    bests = standing.ways_of(config)
    raised = predicted.samples_per_s * (1 + standing.error.worst)
    if not bests or any(raised >= best.steady for best in bests):
        return None
    best = max(bests, key=lambda b: b.steady)
    return (
        f"the rate model predicts {predicted.samples_per_s:.1f} samples/s "
        f"({predicted.binds} bind), under the best so far ({best.steady:.1f}, trial "
        f"{best.trial}) by more than its worst error ({standing.error.worst:.0%})"
    )


def nothing_left_to_win(
    study: optuna.Study,
    points: Iterable[PipelineConfig],
    model: RateModel | None,
    both_ways: bool,
) -> str | None:
    """Why the search can end now, or None: no unmeasured point of ``points``
    (``model_points``) is predicted to beat its way's best by more than the best's spread."""
    if model is None:
        return None
    standing = Standing.of(study, both_ways)
    if standing is None or not standing.best:
        return None
    trials = study.get_trials(deepcopy=False)
    seen = {_key(store.pipeline_of(t)) for t in trials if store.trial_attr(t, TrialKey.PIPELINE)}
    earlier = rate_model.earlier(study)
    left = 0
    for config in points:
        if _key(config) in seen:
            continue
        predicted = model.predict(config, earlier)
        if predicted is None:
            continue
        left += 1
        for best in standing.ways_of(config):
            if predicted.samples_per_s > best.steady * (1 + best.spread):
                return None
    error = standing.error
    return (
        f"nothing left to win: none of the {left} point(s) of the space not yet measured is "
        f"predicted to beat its way's best by more than the best's spread (the rate model "
        f"is off by {error.median:.0%} at the median over {error.trials} trials); the search "
        "ended, and a polish moves the knobs the model does not see"
    )


def _key(config: PipelineConfig) -> tuple:
    return tuple(getattr(config, name) for name in MODEL_KNOBS)


def model_points(space: SearchSpace) -> Iterable[PipelineConfig]:
    """One config of the space per combination of the knobs the model predicts from (the
    others at their first value): what it can tell apart."""
    names = [name for name in MODEL_KNOBS if space.choices(name)]
    seen = set()
    for combination in itertools.product(*(space.choices(name) for name in names)):
        config = space.config_at(dict(zip(names, combination, strict=True)))
        if _key(config) not in seen:
            seen.add(_key(config))
            yield config

"""The grid oracle: every point of a space measured once, in full, to judge the tuner by."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import optuna

from autotune.errors import UsageError
from autotune.pipeline.config import PipelineConfig
from autotune.tuner import store
from autotune.tuner.metrics import feasible_complete
from autotune.tuner.objective import Objective, TrialFailed

log = logging.getLogger(__name__)


def run_grid(objective: Objective, stop: threading.Event) -> tuple[optuna.Study, float]:
    """Every grid point of the session's space, one trial each, never pruned, in the study
    ``objective.session.conf.study`` names. Returns the study and its wall time."""
    study_conf = objective.session.conf.study
    study = optuna.create_study(
        study_name=study_conf.name,
        storage=study_conf.storage,
        direction="maximize",
        pruner=optuna.pruners.NopPruner(),  # the oracle measures every point in full
    )
    grid = objective.session.space.grid()
    for params in grid:
        store.enqueue(study, params, {store.TrialKey.ROLE: store.GRID})
    log.info("grid: %d configs, one trial each", len(grid))
    started = time.monotonic()
    study.optimize(
        objective,
        n_trials=len(grid),
        catch=(TrialFailed,),
        gc_after_trial=False,
        callbacks=[lambda study, trial: study.stop() if stop.is_set() else None],
    )
    return study, time.monotonic() - started


def grid_best(
    study: optuna.Study, where: Callable[[PipelineConfig], bool] = lambda config: True
) -> tuple[int, PipelineConfig]:
    """The grid's fastest feasible point (of those ``where`` accepts): its trial number and
    config."""
    complete = [t for t in feasible_complete(study) if where(store.pipeline_of(t))]
    if not complete:
        raise UsageError("no grid trial finished: see the failures in the dashboard")
    best = max(complete, key=lambda t: t.value or 0.0)
    return best.number, store.pipeline_of(best)

"""The search: TPE for most of the budget, then a polish of the best so far."""

from __future__ import annotations

import threading
import time
from typing import Any

import optuna

from autotune.session import SearchSpace
from autotune.tuner import store
from autotune.tuner.metrics import feasible_complete
from autotune.tuner.objective import Objective, TrialFailed
from autotune.tuner.progress import StudyProgress


def search(
    study: optuna.Study,
    objective: Objective,
    stop: threading.Event,
) -> None:
    """TPE for most of the budget, then a polish: the best so far's unmeasured one-knob
    neighbours, one at a time (a hill climb), so a step TPE missed is not left on the table."""
    cfg = objective.session.config.study
    space = objective.session.space
    deadline = time.monotonic() + cfg.timeout if cfg.timeout else None
    polish = round(cfg.n_trials * cfg.polish_fraction)

    def time_left() -> float | None:
        return None if deadline is None else deadline - time.monotonic()

    quiet = objective.session.config.quiet
    with StudyProgress(cfg.n_trials, store.finished_count(study), quiet=quiet) as progress:

        def run_trials(n: int) -> None:
            left = time_left()
            if n > 0 and not stop.is_set() and (left is None or left > 0):
                study.optimize(
                    objective,
                    n_trials=n,
                    timeout=left,
                    catch=(TrialFailed,),
                    gc_after_trial=False,
                    callbacks=[
                        progress,
                        lambda study, trial: study.stop() if stop.is_set() else None,
                    ],
                )

        run_trials(cfg.n_trials - polish - store.finished_count(study))
        while store.finished_count(study) < cfg.n_trials and not stop.is_set():
            left = time_left()
            if left is not None and left < 0:
                break
            step = next_neighbour(study, space)
            if step is not None:
                study.enqueue_trial(step, user_attrs={store.TrialKey.ROLE: store.POLISH})
            run_trials(1)


def next_neighbour(study: optuna.Study, space: SearchSpace) -> dict[str, Any] | None:
    """The best so far's next unmeasured one-knob neighbour, the knobs taken in turn: polish
    step i starts at knob i (mod the knobs), so a short polish moves every knob once rather
    than spending itself on the first knob's values whenever the best changes."""
    complete = feasible_complete(study)
    if not complete:
        return None
    best = max(complete, key=lambda t: t.value or 0.0)
    trials = study.get_trials(deepcopy=False)
    tried = [t.params for t in trials]
    per_knob = space.neighbours(best.params)
    if not per_knob:
        return None
    turn = sum(store.role_of(t) == store.POLISH for t in trials)  # from storage: resumable
    for shift in range(len(per_knob)):
        for point in per_knob[(turn + shift) % len(per_knob)]:
            if not any(point.items() <= params.items() for params in tried):
                return point
    return None  # every neighbour measured: the best is a local optimum; TPE goes on

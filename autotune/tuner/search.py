"""The search: TPE for most of the budget (a share of it on the pipeline as it is), then a
polish of each way's best so far."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.pipeline.config import AS_IS
from autotune.session import SearchSpace
from autotune.tuner import storage, store
from autotune.tuner.lease import Leases
from autotune.tuner.metrics import feasible_complete
from autotune.tuner.objective import Objective, TrialFailed
from autotune.tuner.progress import StudyProgress
from autotune.tuner.ways import as_is_is_due, ask_for_as_is, is_as_is

NEXT_TRIAL = "next trial"  # the lease that starts trials one at a time across hosts


def search(
    study: optuna.Study,
    objective: Objective,
    stop: threading.Event,
    leases: Leases,
) -> None:
    """TPE for most of the budget, ``study.as_is_share`` of its trials on the pipeline as it
    is; then a polish: each way's best so far's unmeasured one-knob neighbours, the ways in
    turn, one at a time (a hill climb), so a step TPE missed is not left on the table.

    Hosts sharing the study start their trials one at a time (``NEXT_TRIAL``): each counts
    the trials started anywhere, queues the next step and asks for its trial under the
    lease, so the study gets ``study.n_trials`` trials between them, none twice.

    A config TPE suggests again is not measured again (``Objective``): the repeat costs no
    budget, and the next trial is the best's nearest unmeasured neighbour instead.
    """
    cfg = objective.session.config.study
    space = objective.session.space
    deadline = time.monotonic() + cfg.timeout if cfg.timeout else None
    polish = round(cfg.n_trials * cfg.polish_fraction)
    decoders = space.choices("decoder")
    both_ways = len(decoders) > 1  # as_is is always one of them

    def time_left() -> float | None:
        return None if deadline is None else deadline - time.monotonic()

    def queue_tpe() -> None:
        if _waiting(study):
            return
        finished = study.get_trials(deepcopy=False, states=store.FINISHED)
        if (
            finished
            and store.is_repeat(finished[-1])
            and _enqueue_instead_of_repeat(
                study, space, as_is=both_ways and is_as_is(finished[-1].params)
            )
        ):
            return
        measured = [t for t in finished if not store.is_repeat(t)]
        if both_ways and as_is_is_due(measured, cfg.as_is_share):
            ask_for_as_is(study)

    def queue_polish() -> None:
        if not _waiting(study):
            _enqueue_polish_step(study, space, both_ways)

    quiet = objective.session.config.quiet
    with StudyProgress(cfg.n_trials, store.finished_count(study), quiet=quiet) as progress:

        def run_one(until: int, queue: Callable[[], None]) -> bool:
            left = time_left()
            if stop.is_set() or (left is not None and left <= 0):
                return False
            return _run_one(study, objective, leases, until, queue, left, stop, progress)

        while run_one(cfg.n_trials - polish, queue_tpe):
            pass
        while run_one(cfg.n_trials, queue_polish):
            pass


def _run_one(
    study: optuna.Study,
    objective: Objective,
    leases: Leases,
    until: int,
    queue: Callable[[], None],
    left: float | None,
    stop: threading.Event,
    progress: StudyProgress,
) -> bool:
    """One trial, if fewer than ``until`` have started on any host: counted, queued and
    asked for under the lease, measured after it is released."""
    with leases.one_at_a_time(NEXT_TRIAL):
        storage.fail_lost(study)  # a dead host's trial counts, failed, never twice
        n_trials = objective.session.config.study.n_trials
        if stop.is_set() or store.spent(study, free_repeats=n_trials) >= until:
            return False
        queue()

        def measure(trial: optuna.Trial) -> float:
            leases.release(NEXT_TRIAL)  # the trial is RUNNING: it counts; others go on
            return objective(trial)

        study.optimize(
            measure,
            n_trials=1,
            timeout=left,
            catch=(TrialFailed,),
            gc_after_trial=False,
            callbacks=[progress],
        )
    return True


def _waiting(study: optuna.Study) -> bool:
    """Whether a trial is already enqueued (a run stopped before it ran: it runs first)."""
    return bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def _enqueue_instead_of_repeat(study: optuna.Study, space: SearchSpace, *, as_is: bool) -> bool:
    """After TPE suggested a config it had measured, the next trial is the nearest unmeasured
    neighbour of the best of that way: TPE is settling there, so the step it would take
    next is taken for it (a repeat is not measured, but a sampler that keeps repeating
    would otherwise spend the search on nothing). False where none is left."""
    step = next_neighbour(study, space, as_is=as_is)
    if step is None:
        return False
    study.enqueue_trial(step, user_attrs={store.TrialKey.ROLE: store.INSTEAD_OF_REPEAT})
    return True


def _enqueue_polish_step(study: optuna.Study, space: SearchSpace, both_ways: bool) -> None:
    """The next polish step, the ways in turn (the whole pipeline's first); a way with no
    unmeasured neighbour left gives its turn to the other. None left in either: TPE's turn."""
    polished = [
        t
        for t in study.get_trials(deepcopy=False, states=store.FINISHED)
        if store.role_of(t) == store.POLISH
    ]
    as_is_turn = both_ways and len(polished) % 2 == 1
    for as_is in (as_is_turn, not as_is_turn) if both_ways else (False,):
        step = next_neighbour(study, space, as_is=as_is)
        if step is not None:
            attrs = {store.TrialKey.ROLE: store.POLISH, store.TrialKey.POLISHED: as_is}
            study.enqueue_trial(step, user_attrs=attrs)
            return


def next_neighbour(
    study: optuna.Study, space: SearchSpace, *, as_is: bool = False
) -> dict[str, Any] | None:
    """The next unmeasured one-knob neighbour of the best so far (``as_is``: of the best
    config of the pipeline as it is, staying as it is). For the whole pipeline, every other
    decoder at the best's settings comes first: a decoder's worth depends on the workers
    and threads it runs with, and TPE rarely tries each one there. Then the knobs in turn:
    polish step i starts at knob i (mod the knobs), so a short polish moves every knob once
    rather than spending itself on the first knob's values whenever the best changes."""
    complete = [t for t in feasible_complete(study) if not as_is or is_as_is(t.params)]
    if not complete:
        return None
    best = max(complete, key=lambda t: t.value or 0.0)
    trials = study.get_trials(deepcopy=False)
    # a step queued or running (on any host) has its params fixed but perhaps not yet set
    tried = [{**t.system_attrs.get("fixed_params", {}), **t.params} for t in trials]
    per_knob = [
        [p for p in points if not as_is or is_as_is(p)] for points in space.neighbours(best.params)
    ]
    per_knob = [points for points in per_knob if points]
    if not per_knob:
        return None

    def untried(point: dict[str, Any]) -> bool:
        return not any(point.items() <= params.items() for params in tried)

    if not as_is:
        decoder = best.params.get("decoder")
        swaps = [
            p
            for points in per_knob
            for p in points
            if p.get("decoder") not in (decoder, AS_IS) and decoder is not None
        ]
        swap = next((p for p in swaps if untried(p)), None)
        if swap is not None:
            return swap
    turn = sum(  # from storage: resumable
        store.role_of(t) == store.POLISH
        and t.user_attrs.get(store.TrialKey.POLISHED, False) == as_is
        for t in trials
    )
    for shift in range(len(per_knob)):
        for point in per_knob[(turn + shift) % len(per_knob)]:
            if untried(point):
                return point
    return None  # every neighbour measured: the best is a local optimum; TPE goes on

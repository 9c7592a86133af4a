"""The search: TPE for most of the budget (a share of it on the pipeline as it is), then a
polish of each way's best so far."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable

import optuna
from optuna.trial import TrialState

from autotune.pipeline.config import PipelineConfig
from autotune.schema import StudyConfig
from autotune.session import SearchSpace
from autotune.tuner import prospects, storage, store, study_trials
from autotune.tuner.lease import Leases
from autotune.tuner.objective import Objective, TrialFailed
from autotune.tuner.polish import enqueue_instead_of_repeat, enqueue_polish_step
from autotune.tuner.progress import StudyProgress
from autotune.tuner.store import TrialKey
from autotune.tuner.ways import as_is_is_due, ask_for_as_is, is_as_is, searches_both

log = logging.getLogger(__name__)

NEXT_TRIAL = "next trial"  # the lease that starts trials one at a time across hosts


def search(
    study: optuna.Study,
    objective: Objective,
    stop: threading.Event,
    leases: Leases,
) -> str | None:
    """TPE for most of the budget, ``study.as_is_share`` of its trials on the pipeline as it
    is; then a polish (``polish``): from each way's best so far, its unmeasured one-knob
    neighbours, the ways in turn, so a step TPE missed is not left on the table. Returns why
    TPE ended early (``step_binds``; ``prospects.nothing_left_to_win``), or None.

    Hosts sharing the study start their trials one at a time (``NEXT_TRIAL``): each counts
    the trials started anywhere, queues the next step and asks for its trial under the
    lease, so the study gets ``study.n_trials`` trials between them, none twice.

    A config TPE suggests again is not measured again (``Objective``): the repeat costs no
    budget, and the next trial is that way's next polish step instead.
    """
    study_conf = objective.session.conf.study
    space = objective.session.space
    deadline = time.monotonic() + study_conf.timeout if study_conf.timeout else None
    polish = round(study_conf.n_trials * study_conf.polish_fraction)
    both_ways = searches_both(space)

    def time_left() -> float | None:
        return None if deadline is None else deadline - time.monotonic()

    queue_tpe = functools.partial(_queue_tpe, study, space, both_ways, study_conf.as_is_share)
    queue_polish = functools.partial(_queue_polish, study, space, both_ways)
    quiet = objective.session.conf.quiet
    with StudyProgress(
        study_conf.n_trials, study_trials.finished_count(study), quiet=quiet
    ) as progress:

        def run_one(until: int, queue: Callable[[], bool]) -> bool:
            left = time_left()
            if stop.is_set() or (left is not None and left <= 0):
                return False
            return _run_one(study, objective, leases, until, queue, left, stop, progress)

        points = list(prospects.model_points(space))  # what the rate model tells apart
        ends = functools.partial(_why_tpe_ends, study, objective, points, both_ways)
        binds, modelled = ends()
        while binds is None and run_one(study_conf.n_trials - polish, queue_tpe):
            binds, modelled = ends()
        polish_until = study_conf.n_trials
        if binds is not None:
            log.info("%s", binds)
            if not modelled:  # ended early: the polish's share from here, not the rest
                spent = study_trials.spent(study, free=study_conf.n_trials)
                polish_until = min(polish_until, spent + polish)
        # the model judged the knobs it sees: the polish moves the others, until none is left
        while run_one(polish_until, functools.partial(queue_polish, unseen_only=modelled)):
            pass
    return binds


def _why_tpe_ends(
    study: optuna.Study, objective: Objective, points: list[PipelineConfig], both_ways: bool
) -> tuple[str | None, bool]:
    """Why TPE ends now (``step_binds``; ``prospects.nothing_left_to_win``), or None, and
    whether the rate model says so. Read from the storage before each trial: a resumed study,
    and the trials of the hosts sharing it, count."""
    study_conf = objective.session.conf.study
    binds = step_binds(study, study_conf)
    if binds is not None or not study_conf.stop_when_nothing_left:
        return binds, False
    said = prospects.nothing_left_to_win(study, points, objective.model(study), both_ways)
    return said, said is not None


def _queue_tpe(study: optuna.Study, space: SearchSpace, both_ways: bool, share: float) -> bool:
    """What TPE's next trial is, where it is not TPE's pick: the nearest unmeasured neighbour
    after a repeat, or a trial of the pipeline as it is when that way is due its ``share``.
    Always True: a trial follows, TPE's where nothing is queued."""
    if _waiting(study):
        return True
    finished = study.get_trials(deepcopy=False, states=store.FINISHED)
    if (
        finished
        and store.is_repeat(finished[-1])
        and enqueue_instead_of_repeat(
            study, space, as_is=both_ways and is_as_is(finished[-1].params)
        )
    ):
        return True
    if both_ways and as_is_is_due(study_trials.measured(finished), share):
        ask_for_as_is(study)
    return True


def _queue_polish(
    study: optuna.Study, space: SearchSpace, both_ways: bool, *, unseen_only: bool = False
) -> bool:
    """The next polish step; False where none is left and (``unseen_only``) none may follow."""
    if _waiting(study):
        return True
    return enqueue_polish_step(study, space, both_ways, unseen_only=unseen_only) or not unseen_only


def step_binds(study: optuna.Study, study_conf: StudyConfig) -> str | None:
    """Why TPE can end now, or None: after its random start, the best trial so far waits
    less than ``study.step_bound_wait`` of each step for data. The step binds: more workers
    or buffers give it little, as the loader already keeps up."""
    threshold = study_conf.step_bound_wait
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    measured = study_trials.measured(complete)
    if threshold <= 0 or len(measured) <= study_conf.n_startup_trials:
        return None
    best = max(measured, key=lambda t: t.value or 0.0)
    waited = store.trial_attr(best, TrialKey.DATA_WAIT)
    if waited is None or waited >= threshold:
        return None
    return (
        f"the step binds: the best so far, trial {best.number} "
        f"({store.trial_attr(best, TrialKey.CONFIG)}), waits {waited:.0%} of each step for "
        f"data (under study.step_bound_wait={threshold:.0%}): the loader has little left to "
        f"win, so the search ended after {len(measured)} of {study_conf.n_trials} trials and "
        "a polish"
    )


def _run_one(
    study: optuna.Study,
    objective: Objective,
    leases: Leases,
    until: int,
    queue: Callable[[], bool],
    left: float | None,
    stop: threading.Event,
    progress: StudyProgress,
) -> bool:
    """One trial, if fewer than ``until`` have started on any host and ``queue`` has one
    (False: none may follow): counted, queued and asked for under the lease, measured after
    it is released."""
    with leases.one_at_a_time(NEXT_TRIAL):
        n_trials = objective.session.conf.study.n_trials
        if stop.is_set() or study_trials.spent(study, free=n_trials) >= until:
            return False  # (a dead host's running trial counts: spent, failed or not)
        if not queue():
            return False
        # a dead host's trial is failed with its reason, and never counted twice; checked
        # last before the trial starts, as Optuna then checks too and fails what it finds
        # stale without a reason
        storage.fail_lost(study)

        def measure(trial: optuna.Trial) -> float:
            # released once the trial is known to measure (a repeat is recorded as one first,
            # or another host would count it as spent and start its polish early)
            return objective(trial, measuring=lambda: leases.release(NEXT_TRIAL))

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

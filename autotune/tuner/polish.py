"""The polish: a hill climb from the best so far, one knob at a time, the knobs that moved
the rate most first.

TPE samples broadly; on a small discrete space it can miss the one-step improvement next to
its best (one more worker, one thread fewer). From each best, the polish moves every knob
once, most important first (fANOVA over the way's complete trials), so a short polish spends
itself on the steps most likely to pay; a step that improves the best starts over from it.
For the whole pipeline, every other decoder at the best's settings comes first: a decoder's
worth depends on the workers and threads it runs with, and TPE rarely tries each one there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.pipeline.config import AS_IS
from autotune.session import SearchSpace
from autotune.tuner import importance, store
from autotune.tuner.metrics import feasible_complete
from autotune.tuner.prospects import MODEL_KNOBS
from autotune.tuner.store import TrialKey
from autotune.tuner.ways import is_as_is

SWAP = "decoder swap"  # a polish step's knob: another decoder at the best's settings
MIN_TRIALS_FOR_IMPORTANCE = 5  # fewer: the knobs in the order the space declares them


@dataclass(frozen=True)
class Step:
    """A polish step: the trial params, the knob it moves, and the best it moves from."""

    params: dict[str, Any]
    knob: str
    best: int  # the trial number of the best it starts from

    def attrs(self, role: str, *, as_is: bool) -> dict[str, Any]:
        return {
            TrialKey.ROLE: role,
            TrialKey.POLISHED: as_is,
            TrialKey.POLISH_KNOB: self.knob,
            TrialKey.POLISH_FROM: self.best,
        }


def next_step(
    study: optuna.Study, space: SearchSpace, *, as_is: bool = False, unseen_only: bool = False
) -> Step | None:
    """The next unmeasured one-knob neighbour of the best so far (``as_is``: of the best
    config of the pipeline as it is, staying as it is): for the whole pipeline the other
    decoders at its settings first; then, of the knobs not yet moved from this best, the
    most important with a neighbour left; every knob moved, the most important again.
    ``unseen_only``: the rate model ended the search, having judged every point of the
    knobs it sees (``prospects.MODEL_KNOBS``): only the knobs it cannot see are moved, each
    once in this way's polish, from its best at the time (a step that tops the best within
    noise would else start the same knob over from it, and leave the others unmoved). None
    where no such neighbour is left: the best is a local optimum."""
    complete = [t for t in feasible_complete(study) if not as_is or is_as_is(t.params)]
    if not complete:
        return None
    best = max(complete, key=lambda t: t.value or 0.0)
    trials = study.get_trials(deepcopy=False)
    # a step queued or running (on any host) has its params fixed but perhaps not yet set
    tried = [{**store.enqueued_params(t), **t.params} for t in trials]

    def untried(point: dict[str, Any]) -> bool:
        return not any(point.items() <= params.items() for params in tried)

    # a knob a step brings into play takes the value of the best trial that had it
    by_rate = sorted(complete, key=lambda t: t.value or 0.0)
    fill = {name: value for t in by_rate for name, value in t.params.items()}
    per_knob = {
        name: [p for p in points if untried(p) and (not as_is or is_as_is(p))]
        for name, points in space.neighbours(best.params, fill).items()
    }
    if not as_is and "decoder" in per_knob:
        # the decoder's steps are the swaps: the pipeline as it is has its own polish turns
        swaps = [p for p in per_knob.pop("decoder") if p["decoder"] != AS_IS]
        if swaps and not unseen_only:
            return Step(swaps[0], SWAP, best.number)
    moved = {
        store.trial_attr(t, TrialKey.POLISH_KNOB)
        for t in trials
        if store.trial_attr(t, TrialKey.POLISH_FROM) == best.number
        or (
            unseen_only  # this way's polish steps, not TPE's stand-ins for its repeats
            and store.role_of(t) == store.POLISH
            and store.trial_attr(t, TrialKey.POLISHED) == as_is
        )
    }
    ranked = [name for name in by_importance(complete, list(per_knob)) if per_knob[name]]
    fresh = [name for name in ranked if name not in moved]
    if unseen_only:
        fresh = ranked = [name for name in fresh if name not in MODEL_KNOBS]
    knob = next(iter(fresh or ranked), None)
    return Step(per_knob[knob][0], knob, best.number) if knob is not None else None


def by_importance(complete: list[FrozenTrial], names: list[str]) -> list[str]:
    """``names``, the knobs that explain most of the rate's variance across ``complete``
    first (fANOVA, seeded); in their given order where there are too few trials to say, and
    among knobs it cannot weigh (those only some trials have, such as prefetch_factor)."""
    if len(complete) < MIN_TRIALS_FOR_IMPORTANCE:
        return names
    view = optuna.create_study(direction="maximize")
    view.add_trials(complete)
    found = importance.shares(view)
    if found is None:
        return names
    return sorted(names, key=lambda name: -found.get(name, 0.0))  # stable: ties as given


def enqueue_step(study: optuna.Study, step: Step, role: str, *, as_is: bool) -> None:
    store.enqueue(study, step.params, step.attrs(role, as_is=as_is))


def enqueue_polish_step(
    study: optuna.Study, space: SearchSpace, both_ways: bool, *, unseen_only: bool = False
) -> bool:
    """The next polish step, the ways in turn: the whole pipeline twice for each step of the
    pipeline as it is (it has the decoders to swap besides the same knobs; ``unseen_only``:
    no swaps, the same knobs, one for one); a way with no unmeasured neighbour left gives
    its turn to the other. Returns whether a step was queued (none left in either: TPE's
    turn; ``unseen_only``, ``next_step``'s: the end)."""
    # every state: a step still running on another host has had its turn
    polished = [t for t in study.get_trials(deepcopy=False) if store.role_of(t) == store.POLISH]
    cycle = 2 if unseen_only else 3  # steps of both ways, the last the pipeline as it is
    as_is_turn = both_ways and len(polished) % cycle == cycle - 1
    for as_is in (as_is_turn, not as_is_turn) if both_ways else (False,):
        step = next_step(study, space, as_is=as_is, unseen_only=unseen_only)
        if step is not None:
            enqueue_step(study, step, store.POLISH, as_is=as_is)
            return True
    return False


def enqueue_instead_of_repeat(study: optuna.Study, space: SearchSpace, *, as_is: bool) -> bool:
    """After TPE suggested a config it had measured, the next trial is the next polish step
    of that way's best: TPE is settling there, so the step it would take next is taken for
    it (a repeat is not measured, but a sampler that keeps repeating would otherwise spend
    the search on nothing). False where none is left."""
    step = next_step(study, space, as_is=as_is)
    if step is None:
        return False
    enqueue_step(study, step, store.INSTEAD_OF_REPEAT, as_is=as_is)
    return True

"""The polish: other decoders at the best's settings first, then each knob once from the
best, the knobs that moved the rate most first; the pipeline as it is stays as it is."""

from __future__ import annotations

import dataclasses
from typing import Any

import optuna
import pytest
from helpers import ask
from optuna.distributions import BaseDistribution

from autotune import machine
from autotune.app.composition import compose, to_config
from autotune.session import SearchSpace
from autotune.tuner import store
from autotune.tuner.polish import SWAP, Step, enqueue_polish_step, next_step


def _default_space() -> SearchSpace:
    """The default space on a 4-CPU machine without CUDA."""
    facts = dataclasses.replace(machine.detect(want_cuda=False), usable_cpus=4)
    return SearchSpace.from_config(
        to_config(compose([])).search_space, facts, device="cpu", batch_size=32
    )


def _adder(study: optuna.Study, space: SearchSpace):
    dists: dict[str, BaseDistribution] = dict(
        ask(space, {"num_workers": 2, "decoder": "pil"}).distributions
    )

    def add(params: dict[str, Any], value: float, attrs: dict | None = None) -> None:
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions={k: dists[k] for k in params},
                value=value,
                user_attrs=attrs or {},
            )
        )

    return add


def _rate(params: dict[str, Any]) -> float:
    return 60.0 + 30.0 * (params["main_threads"] == 1) + 2.0 * params["num_workers"]


@pytest.mark.slow
def test_the_polish_moves_each_knob_once_the_one_that_mattered_most_first() -> None:
    """One torch thread is worth 1.5x across the search, a worker a little: after the other
    decoders at the best's settings, the thread count moves first, then the workers, then
    every other knob once before any moves again; never to the pipeline as it is."""
    space = _default_space()
    study = optuna.create_study(direction="maximize")
    add = _adder(study, space)
    searched = [
        (w, pf, persist, dec, t)
        for w, pf, persist, dec, t in [
            (1, 4, False, "pil", 2),
            (2, 2, True, "opencv", 2),
            (4, 6, False, "torchvision", 1),
            (1, 8, True, "pil_reduced", 1),
            (2, 3, False, "pil", 1),
            (3, 2, True, "opencv", 2),
            (4, 5, True, "torchvision", 2),
            (2, 2, True, "pil_reduced", 1),
        ]
    ]
    for w, pf, persist, dec, t in searched:
        params = {
            "num_workers": w,
            "prefetch_factor": pf,
            "persistent_workers": persist,
            "decoder": dec,
            "cache": "none",
            "main_threads": t,
        }
        add(params, _rate(params))
    best = study.best_trial
    assert best.params["main_threads"] == 1
    knobs = []
    for _ in range(9):
        step = next_step(study, space)
        assert step is not None and step.best == best.number
        knobs.append(step.knob)
        # what the rate says, a little under it: the best stays the best
        add(step.params, _rate(step.params) - 1.0, step.attrs("polish", as_is=False))
    assert knobs[:3] == [SWAP] * 3  # pil, opencv, torchvision at the best's settings
    assert knobs[3:5] == ["main_threads", "num_workers"]
    rest = {"prefetch_factor", "persistent_workers", "cache"}
    assert set(knobs[5:8]) == rest  # every knob once before any again
    assert "decoder" not in knobs  # its steps are the swaps; as it is has its own polish


def _one_best(persistent_workers: bool):
    """The default space, a study of one trial (the best, at 100 samples/s), and its adder."""
    space = _default_space()
    study = optuna.create_study(direction="maximize")
    add = _adder(study, space)
    best = {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": persistent_workers}
    best |= {"decoder": "pil", "cache": "none", "main_threads": 1}
    add(best, 100.0)
    return space, study, add


def test_a_better_step_starts_the_polish_over_from_it() -> None:
    space, study, add = _one_best(persistent_workers=True)
    step = next_step(study, space)
    assert step is not None and step.knob == SWAP
    add(step.params, 120.0, step.attrs("polish", as_is=False))  # better: the new best
    again = next_step(study, space)
    assert again is not None and again.best == study.best_trial.number != step.best


def test_after_the_rate_model_s_stop_only_the_knobs_it_cannot_see_move() -> None:
    """The model judged every decoder, worker and thread count before it ended the search:
    the prefetch depth, persistence and the like move, each once, and then the polish ends."""
    space, study, add = _one_best(persistent_workers=False)
    assert next_step(study, space).knob == SWAP  # type: ignore[union-attr]
    knobs = []
    while (step := next_step(study, space, unseen_only=True)) is not None:
        knobs.append(step.knob)
        add(step.params, 90.0, step.attrs("polish", as_is=False))  # the best stays the best
    assert sorted(knobs) == ["persistent_workers", "prefetch_factor"]
    # none left: nothing is queued, and the search ends there (TPE does not take the turn)
    assert not enqueue_polish_step(study, space, both_ways=False, unseen_only=True)
    assert not study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert enqueue_polish_step(study, space, both_ways=False)  # else the swaps remain


def test_after_the_model_s_stop_each_unseen_knob_moves_once_however_the_best_moves() -> None:
    """A step that tops the best by a hair (noise, as often as not) does not start the same
    knob over from it: each knob the model cannot see is moved once, then the polish ends."""
    space, study, add = _one_best(persistent_workers=False)
    # a step TPE's repeat took before the stop, from an earlier best: not the polish's
    earlier = {**study.best_trial.params, "prefetch_factor": 4}
    stand_in = Step(earlier, "prefetch_factor", best=99)  # from a best since beaten
    add(earlier, 50.0, stand_in.attrs("instead_of_repeat", as_is=False))
    knobs, rate = [], 100.0
    while (step := next_step(study, space, unseen_only=True)) is not None:
        knobs.append(step.knob)
        rate += 1.0  # each step the new best
        add(step.params, rate, step.attrs("polish", as_is=False))
    assert sorted(knobs) == ["persistent_workers", "prefetch_factor"]


def test_after_the_rate_model_s_stop_both_ways_move_their_unseen_knobs_in_turn() -> None:
    """The model's stop leaves each way's prefetch depth and persistence to the polish: the
    ways take one step each in turn (a step of the pipeline as it is is no cheaper to skip
    than the whole pipeline's), until each knob moved once from each way's best."""
    space, study, add = _one_best(persistent_workers=False)
    add({**study.best_trial.params, "decoder": "as_is", "main_threads": 2}, 60.0)
    ways = []
    while enqueue_polish_step(study, space, both_ways=True, unseen_only=True):
        (queued,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
        ways.append(store.enqueued_params(queued)["decoder"] == "as_is")
        # each step a little under its way's best: the bests stay
        study.optimize(lambda t: (space.suggest(t), 50.0 if ways[-1] else 90.0)[1], n_trials=1)
    assert ways == [False, True, False, True]  # persistence and prefetch depth, each way


def test_a_step_still_running_on_another_host_has_had_its_turn() -> None:
    """Hosts sharing a study queue their steps while others measure: the turn is counted
    from every polish step started, so the next host takes the other way's."""
    space, study, add = _one_best(persistent_workers=False)
    add({**study.best_trial.params, "decoder": "as_is", "main_threads": 2}, 60.0)
    assert enqueue_polish_step(study, space, both_ways=True, unseen_only=True)
    study.ask()  # another host took the step: measuring it
    (running,) = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert store.enqueued_params(running)["decoder"] != "as_is"
    assert enqueue_polish_step(study, space, both_ways=True, unseen_only=True)
    (queued,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert store.enqueued_params(queued)["decoder"] == "as_is"


def test_the_polish_of_the_pipeline_as_it_is_stays_as_it_is() -> None:
    space = _default_space()
    tuned = {
        "num_workers": 2,
        "prefetch_factor": 2,
        "persistent_workers": True,
        "decoder": "opencv",
        "main_threads": 1,
    }
    as_is = {**tuned, "decoder": "as_is", "main_threads": 2}
    dists = dict(ask(space, tuned).distributions)
    study = optuna.create_study(direction="maximize")
    for params, value in ((tuned, 800.0), (as_is, 400.0)):
        study.add_trial(
            optuna.trial.create_trial(
                params=params, distributions={k: dists[k] for k in params}, value=value
            )
        )
    steps = []
    for _ in range(4):
        step = next_step(study, space, as_is=True)
        assert step is not None and step.params["decoder"] == "as_is"  # never another decoder
        steps.append(step.params)
        study.enqueue_trial(step.params, user_attrs=step.attrs("polish", as_is=True))
        study.optimize(lambda t: (space.suggest(t), 100.0)[1], n_trials=1)
    assert steps[0]["main_threads"] == 2  # from the as-is best, not from the 800 one
    assert len({tuple(sorted(s.items())) for s in steps}) == 4  # each step a new point
    whole = next_step(study, space)  # the other way starts from the best of all,
    # another decoder at its settings first
    assert whole is not None and (whole.params["decoder"], whole.params["main_threads"]) == (
        "pil",
        1,
    )


@pytest.mark.slow
def test_a_step_to_workers_takes_the_worker_settings_of_the_best_with_workers() -> None:
    """The best has no workers; a one-worker trial without persistent workers lost. The step
    to one worker is still untried: it keeps workers alive, as the best trial with workers
    did, instead of counting any one-worker trial as that step."""
    space = _default_space()
    study = optuna.create_study(direction="maximize")
    add = _adder(study, space)
    at = {"decoder": "pil_reduced", "cache": "none", "main_threads": 1}
    add({"num_workers": 0, **at}, 100.0)
    add({"num_workers": 1, "prefetch_factor": 2, "persistent_workers": False, **at}, 60.0)
    add({"num_workers": 2, "prefetch_factor": 3, "persistent_workers": True, **at}, 90.0)
    add({"num_workers": 2, "prefetch_factor": 8, "persistent_workers": False, **at}, 70.0)
    steps = []
    while (step := next_step(study, space)) is not None:  # every neighbour of the best
        assert step.best == 0
        steps.append(step)
        add(step.params, 50.0, step.attrs("polish", as_is=False))
    one_worker = next(s.params for s in steps if s.knob == "num_workers")
    assert one_worker == {
        "num_workers": 1,
        "prefetch_factor": 3,
        "persistent_workers": True,
        **at,
    }

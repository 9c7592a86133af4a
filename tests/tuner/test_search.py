"""The search's polish: the best so far's one-knob neighbours, the knobs taken in turn."""

from __future__ import annotations

import dataclasses

import optuna
from helpers import ask
from optuna.distributions import BaseDistribution

from autotune import machine
from autotune.app.cli import compose, to_config
from autotune.session import SearchSpace
from autotune.tuner.search import next_neighbour


def test_the_polish_takes_the_knobs_in_turn() -> None:
    facts = dataclasses.replace(machine.detect(want_cuda=False), usable_cpus=4)
    space = SearchSpace.from_config(
        to_config(compose([])).search_space, facts, device="cpu", batch_size=32
    )
    best = {
        "num_workers": 2,
        "prefetch_factor": 2,
        "persistent_workers": True,
        "decoder": "pil_reduced",
        "main_threads": 2,
    }
    study = optuna.create_study(direction="maximize")
    dists: dict[str, BaseDistribution] = dict(ask(space, best).distributions)

    def add(params: dict, value: float, role: str | None = None) -> None:
        attrs = {"role": role} if role else {}
        trial = optuna.trial.create_trial(
            params=params,
            distributions={k: dists[k] for k in params},
            value=value,
            user_attrs=attrs,
        )
        study.add_trial(trial)

    add(best, 100.0)
    changed = []
    for _ in range(5):
        step = next_neighbour(study, space)
        assert step is not None
        changed.append(next(k for k in best if step.get(k) != best[k]))
        add(step, 50.0, role="polish")  # slower: the best stays
    # every knob moved once in five steps, in turn
    assert changed == [
        "num_workers",
        "prefetch_factor",
        "persistent_workers",
        "decoder",
        "main_threads",
    ]


def test_the_polish_of_the_pipeline_as_it_is_stays_as_it_is() -> None:
    facts = dataclasses.replace(machine.detect(want_cuda=False), usable_cpus=4)
    space = SearchSpace.from_config(
        to_config(compose([])).search_space, facts, device="cpu", batch_size=32
    )
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
        step = next_neighbour(study, space, as_is=True)
        assert step is not None and step["decoder"] == "as_is"  # never another decoder
        steps.append(step)
        study.enqueue_trial(step, user_attrs={"role": "polish", "polished_as_is": True})
        study.optimize(lambda t: (space.suggest(t), 100.0)[1], n_trials=1)
    assert steps[0]["main_threads"] == 2  # from the as-is best, not from the 800 one
    assert len({tuple(sorted(s.items())) for s in steps}) == 4  # each step a new point
    whole = next_neighbour(study, space)  # the other way starts from the best of all
    assert whole is not None and (whole["decoder"], whole["main_threads"]) == ("opencv", 1)

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

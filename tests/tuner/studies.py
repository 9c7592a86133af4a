"""Small in-memory Optuna studies for the tuner's tests: trials with the attributes given."""

from __future__ import annotations

import optuna
from optuna.distributions import IntDistribution


def study_with(*attrs: dict, params: dict | None = None) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for i, user_attrs in enumerate(attrs):
        study.add_trial(
            optuna.trial.create_trial(
                params=params or {"num_workers": 1},
                distributions={"num_workers": IntDistribution(0, 4)},
                value=float(i),
                user_attrs=user_attrs,
            )
        )
    return study

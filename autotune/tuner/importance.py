"""Which settings explain the rate's variance across trials: Optuna's fANOVA, seeded, in one
place for the polish (which knob to move first) and the report (its importance table and
plot)."""

from __future__ import annotations

import warnings

import optuna


def evaluator() -> optuna.importance.BaseImportanceEvaluator:
    """fANOVA: a random forest over every complete trial, and the share of the variance of
    samples/s each setting explains. Not Optuna's default PED-ANOVA, which compares the top
    trials with the rest: once TPE has settled on one decoder, every good trial uses it, and
    PED-ANOVA calls the decoder unimportant for exactly that reason. Seeded: a rebuilt report
    is identical, and so is the polish's order."""
    return optuna.importance.FanovaImportanceEvaluator(seed=0)


def shares(study: optuna.Study) -> dict[str, float] | None:
    """fANOVA's share per setting over ``study``'s complete trials; None where it cannot say:
    no parameter every trial has, or no variance to explain (two runs of one config, as a
    search whose other trials were pruned can leave)."""
    try:
        with warnings.catch_warnings():  # "experimental", "few trials": callers say so
            warnings.simplefilter("ignore")
            return optuna.importance.get_param_importances(study, evaluator=evaluator())
    except (RuntimeError, ValueError):
        return None

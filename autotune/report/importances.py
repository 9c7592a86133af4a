"""Which settings mattered: Optuna's fANOVA importances, drawn and tabled the same way."""

from __future__ import annotations

import warnings
from typing import Any

import optuna
from optuna.trial import TrialState


def evaluator() -> optuna.importance.BaseImportanceEvaluator:
    """fANOVA: a random forest over every complete trial, and the share of the variance of
    samples/s each setting explains. Not Optuna's default PED-ANOVA, which compares the top
    trials with the rest: once TPE has settled on one decoder, every good trial uses it, and
    PED-ANOVA calls the decoder unimportant for exactly that reason. Seeded: a rebuilt report
    is identical."""
    return optuna.importance.FanovaImportanceEvaluator(seed=0)


def markdown(study: optuna.Study, best_params: dict[str, Any] | None) -> str:
    """The table under report.md's heading: settings that mattered."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 2:
        return "Not computed: importances need at least two complete trials.\n"
    with warnings.catch_warnings():  # "experimental", "few trials": the text says so
        warnings.simplefilter("ignore")
        importances = optuna.importance.get_param_importances(study, evaluator=evaluator())
    lines = ["| setting | importance | best's value | values tried |", "|---|---:|---|---|"]
    # ties (often all zeros) in a fixed order, so a rebuilt report is identical
    for name, share in sorted(importances.items(), key=lambda kv: (-round(kv[1], 2), kv[0])):
        tried = sorted({t.params[name] for t in complete if name in t.params}, key=str)
        value = best_params.get(name, "(not used)") if best_params is not None else ""
        lines.append(f"| `{name}` | {share:.2f} | {value} | {', '.join(map(str, tried))} |")
    lines.append(
        f"\nOptuna's fANOVA importances over {len(complete)} complete trials: the share of the "
        "variance of samples/s that each setting explains (rough with few trials; settings "
        "that only some trials have, such as prefetch_factor, are left out).\n"
    )
    return "\n".join(lines)

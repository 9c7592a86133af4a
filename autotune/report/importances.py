"""Which settings mattered: Optuna's fANOVA importances, drawn and tabled the same way."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.tuner import importance


def compute(study: optuna.Study) -> dict[str, float] | None:
    """fANOVA's share per setting (``importance.shares``), rounded; None under two complete
    trials, or where fANOVA cannot say."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 2:
        return None
    found = importance.shares(study)
    if found is None:
        return None
    return {name: round(share, 3) for name, share in found.items()}


def markdown(
    study: optuna.Study, best_params: dict[str, Any] | None, importances: dict[str, float] | None
) -> str:
    """The table under report.md's heading, of ``importances`` (``compute``'s)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if importances is None:
        return "Not computed: importances need at least two complete trials.\n"
    lines = ["| setting | importance | best's value | values tried |", "|---|---:|---|---|"]
    # ties (often all zeros) in a fixed order, so a rebuilt report is identical
    for name, share in sorted(importances.items(), key=lambda kv: (-round(kv[1], 2), kv[0])):
        tried = sorted({t.params[name] for t in complete if name in t.params}, key=str)
        value = best_params.get(name, "(not used)") if best_params is not None else ""
        lines.append(f"| `{name}` | {share:.2f} | {value} | {', '.join(map(str, tried))} |")
    lines.append(
        f"\nOptuna's fANOVA importances over {len(complete)} complete trials: the share of the "
        "variance of samples/s that each setting explains across the search (rough with few "
        "trials; settings that only some trials have, such as prefetch_factor, are left out). "
        "optuna-dashboard's own importance panel uses PED-ANOVA, which asks another question "
        "(which settings set the top trials apart from the rest); these are the ones stored "
        "on the study (`importances_fanova`) and shown in its note. What each setting of the "
        "winner is worth is measured directly in the summary's last table.\n"
    )
    return "\n".join(lines)

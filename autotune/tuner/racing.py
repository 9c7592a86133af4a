"""Racing the finalists (F-Race's idea, on this study's own noise): after each confirmation
round but the last, a finalist clearly slower than the leader of every way it could be picked
for is measured no more, so that the rounds left go to the configs still close.

"Clearly" is read against how far two runs of one config differ here: the rounds' own range
where a config has two, and each finalist's confirmed rate against its search trial (a run of
the same config, earlier) — the larger. A finalist is out where, raised by that noise, it
stays below the leader lowered by it, and by more than the margin within which the cheaper
of two configs is picked (``SAME_SPEED``): a config that could still win on cost stays. The
baseline always stays: every claim is against it.

Before the first round, the search's own trials are round 0: a finalist that the search
already measured clearly below its way's best (the pruner's rule, ``ways.BEATEN_BY``) is not
confirmed at all (``within_reach``).
"""

from __future__ import annotations

import statistics
from typing import TypeVar

from autotune.pipeline.config import PipelineConfig
from autotune.tuner.metrics import SAME_SPEED, Confirmed, run_to_run
from autotune.tuner.store import BASELINE
from autotune.tuner.ways import BEATEN_BY, beaten

F = TypeVar("F", bound=tuple[str, int | None, PipelineConfig])  # confirm.Finalist


def noise(confirmed: list[Confirmed], searched: dict[str, float]) -> float | None:
    """How far two runs of one config differ here (a share of the rate): the larger of the
    rounds' own range (``run_to_run``) and the median of each finalist's confirmed rate
    against its search trial's (``searched``: label -> that trial's rate). None where
    neither was measured: then nothing is out."""
    against_search = [
        abs(c.median / searched[c.label] - 1)
        for c in confirmed
        if searched.get(c.label, 0) > 0 and c.median > 0
    ]
    rounds = run_to_run(confirmed)
    if not against_search and not any(len(c.round_rates) >= 2 for c in confirmed):
        return None
    return max(rounds, statistics.median(against_search) if against_search else 0.0)


def clearly_beaten(
    confirmed: list[Confirmed], allowance: float
) -> list[tuple[Confirmed, Confirmed]]:
    """(finalist, the leader it is clearly slower than) for each finalist out of the race.
    Its ways: any config is a ``build_loader`` pick; an as-is config is also a
    ``loader_kwargs`` pick, where it races the as-is configs only."""
    overall = max(confirmed, key=lambda c: c.median)
    as_is = [c for c in confirmed if c.config.as_is]
    as_is_leader = max(as_is, key=lambda c: c.median) if as_is else None
    out = []
    for c in confirmed:
        leader = as_is_leader if c.config.as_is else overall
        if c.label == BASELINE or leader is None or c is leader:
            continue
        best_plausible = c.median * (1 + allowance)
        leader_worst = leader.median * (1 - allowance) * (1 - SAME_SPEED)
        if best_plausible < leader_worst:
            out.append((c, leader))
    return out


def within_reach(picked: list[F], searched: dict[str, float]) -> tuple[list[F], str | None]:
    """``picked`` (label, trial number, config; the baseline first) less the finalists whose
    search rate (``searched``: label -> rate), even ``BEATEN_BY`` higher, stays below the best
    search rate of the way they could be picked for (an as-is config: the as-is finalists';
    any other: all of them), and a note naming those left out (None: none was)."""

    def rate(finalist: F) -> float:
        return searched.get(finalist[0], 0.0)

    best = max((rate(f) for f in picked), default=0.0)
    best_as_is = max((rate(f) for f in picked if f[2].as_is), default=0.0)
    kept, out = [], []
    for finalist in picked:
        leader = best_as_is if finalist[2].as_is else best
        if finalist[0] != BASELINE and rate(finalist) > 0 and beaten(rate(finalist), leader):
            out.append(f"{finalist[0]} ({rate(finalist):.1f} against {leader:.1f})")
        else:
            kept.append(finalist)
    if not out:
        return kept, None
    return kept, (
        f"not confirmed: {', '.join(out)}: the search measured each, even "
        f"{round(100 * BEATEN_BY)}% higher, below its way's best"
    )

"""Racing the finalists: how noisy runs are here, and who is clearly beaten."""

from __future__ import annotations

import pytest

from autotune.pipeline.config import PipelineConfig
from autotune.tuner.metrics import Confirmed
from autotune.tuner.racing import clearly_beaten, noise, within_reach

AS_IS = PipelineConfig(decoder="as_is")


def _row(label: str, rate: float, config: PipelineConfig, rounds: tuple[float, ...] = ()):
    return Confirmed(label, None, config, (rate,), rounds=len(rounds) or 1, round_rates=rounds)


def _tuned(workers: int) -> PipelineConfig:
    return PipelineConfig(
        num_workers=workers, prefetch_factor=2 if workers else None, decoder="pil"
    )


def test_noise_is_the_larger_of_the_rounds_range_and_the_search_against_the_confirmation():
    rows = [_row("baseline", 100.0, AS_IS), _row("trial 3", 300.0, _tuned(2))]
    # one round each: each confirmed rate against its own search trial's
    assert noise(rows, {"baseline": 104.0, "trial 3": 300.0}) == pytest.approx((4 / 104 + 0) / 2)
    assert noise(rows, {}) is None  # nothing measured twice: nobody is out
    two_rounds = [_row("trial 3", 300.0, _tuned(2), (290.0, 310.0))]
    assert noise(two_rounds, {"trial 3": 300.0}) == pytest.approx(20 / 300)


def test_only_a_finalist_clearly_below_its_way_s_leader_leaves():
    rows = [
        _row("baseline", 100.0, AS_IS),
        _row("trial 1", 400.0, _tuned(2)),  # the leader of build_loader
        _row("trial 2", 380.0, _tuned(1)),  # 5% behind: within 5% noise, stays
        _row("trial 3", 250.0, _tuned(0)),  # far behind: out
        _row("trial 4", 200.0, PipelineConfig(num_workers=2, prefetch_factor=2, decoder="as_is")),
        _row("trial 5", 120.0, PipelineConfig(num_workers=1, prefetch_factor=2, decoder="as_is")),
    ]
    out = {c.label: leader.label for c, leader in clearly_beaten(rows, 0.05)}
    # trial 4 leads the as-is way, far slower than trial 1 as it is: it stays for its way;
    # trial 5 races it there. The baseline stays, however slow: every claim is against it.
    assert out == {"trial 3": "trial 1", "trial 5": "trial 4"}
    assert clearly_beaten(rows, 0.5) == []  # runs that differ by half: nobody is clearly out


def test_a_finalist_within_the_same_speed_margin_is_not_out_even_without_noise():
    # 1% behind with no noise: the cheaper config may still be picked among the same speed
    rows = [_row("trial 1", 400.0, _tuned(2)), _row("trial 2", 396.0, _tuned(1))]
    assert clearly_beaten(rows, 0.0) == []
    assert [
        c.label for c, _ in clearly_beaten([*rows, _row("trial 3", 380.0, _tuned(0))], 0.0)
    ] == ["trial 3"]


def test_a_finalist_the_search_measured_clearly_beaten_is_not_confirmed():
    """Round 0 is the search: within 10 % of its way's best a finalist is raced; further
    behind it is left out, named; the baseline stays however slow."""
    as_is = PipelineConfig(num_workers=1, prefetch_factor=2, decoder="as_is")
    picked = [
        ("baseline", None, AS_IS),
        ("trial 1", 1, _tuned(2)),
        ("trial 2", 2, _tuned(1)),
        ("trial 3", 3, _tuned(0)),
        ("trial 4", 4, as_is),
    ]
    searched = {"baseline": 90.0, "trial 1": 300.0, "trial 2": 275.0, "trial 3": 200.0}
    # an as-is config races the as-is finalists only (trial 4 leads them at 150); the
    # baseline's 90 is far below that, and it stays
    kept, note = within_reach(picked, {**searched, "trial 4": 150.0})
    assert [f[0] for f in kept] == ["baseline", "trial 1", "trial 2", "trial 4"]
    assert note == (
        "not confirmed: trial 3 (200.0 against 300.0): the search measured each, even 10% "
        "higher, below its way's best"
    )
    kept, _ = within_reach(picked, searched)
    assert "trial 4" in [f[0] for f in kept]  # not measured in the search: kept
    assert within_reach(picked[:2], searched) == (picked[:2], None)

"""The figures configs are judged by: the epoch rate and the winner among finalists."""

from __future__ import annotations

import pytest

from autotune.pipeline.config import PipelineConfig
from autotune.tuner.metrics import (
    Confirmed,
    epoch_rate,
    pick_each_way,
    pick_winner,
    run_to_run,
    startup_per_epoch,
    ties,
)


def test_epoch_rate_charges_the_epoch_start_once_per_epoch():
    assert epoch_rate(100.0, 1.0, epoch_samples=100) == pytest.approx(50.0)
    assert epoch_rate(100.0, 1.0, epoch_samples=None) == 100.0  # the steady rate alone


def test_an_epoch_start_measured_at_a_boundary_is_charged_to_every_loader():
    """Persistent workers are not respawned, but a new epoch starts them with an empty buffer:
    the refill is what the boundary measured, and it is charged like any start."""
    persistent = PipelineConfig(num_workers=2, persistent_workers=True, batch_size=10)
    charge = startup_per_epoch(
        persistent, steady=100.0, epoch_start_s=0.5, time_to_first_batch_s=2.0
    )
    assert charge == pytest.approx(0.5 - 10 / 100.0)  # beyond one batch at the steady rate
    in_process = PipelineConfig(num_workers=0, batch_size=10)  # one batch read: no extra
    assert (
        startup_per_epoch(in_process, steady=100.0, epoch_start_s=0.08, time_to_first_batch_s=0.08)
        == 0.0
    )


def test_a_whole_epoch_timed_is_charged_what_it_took_beyond_its_samples():
    """More than its start: what a whole epoch took beyond its samples at the steady rate
    (the trial timed it), and a prepared copy's share on top."""
    persistent = PipelineConfig(num_workers=2, persistent_workers=True, batch_size=10)
    figures = {"steady": 100.0, "epoch_start_s": 0.5, "time_to_first_batch_s": 2.0}
    assert startup_per_epoch(persistent, **figures, epoch_overhead_s=0.7) == pytest.approx(0.7)
    assert startup_per_epoch(
        persistent, **figures, epoch_overhead_s=0.0, preparation_s=0.25
    ) == pytest.approx(0.25)
    # a pass faster than the steady rate (noise): the epoch rate is that pass's, above steady
    in_process = PipelineConfig(num_workers=0, batch_size=10)
    charge = startup_per_epoch(in_process, **figures, epoch_overhead_s=-0.05)
    assert charge == pytest.approx(-0.05)
    assert epoch_rate(100.0, charge, epoch_samples=100) == pytest.approx(100 / 0.95)


def test_without_a_boundary_only_workers_that_restart_pay_the_first_start():
    """DALI's own loader, or a trial stored by an older autotune: no boundary was timed."""
    plain = PipelineConfig(num_workers=2, batch_size=10)
    persistent = PipelineConfig(num_workers=2, persistent_workers=True, batch_size=10)
    first = {"steady": 100.0, "epoch_start_s": None, "time_to_first_batch_s": 1.1}
    assert startup_per_epoch(plain, **first) == pytest.approx(1.0)
    assert startup_per_epoch(persistent, **first) == 0.0
    assert startup_per_epoch(PipelineConfig(num_workers=0), **first) == 0.0
    # DALI's own loader resets and refills its queue each epoch: it pays its first start
    dali = PipelineConfig(decoder="dali", batch_size=10)
    assert startup_per_epoch(dali, **first) == pytest.approx(1.0)


def _confirmed(label: str, workers: int, rates: tuple[float, ...]) -> Confirmed:
    config = PipelineConfig(num_workers=workers, prefetch_factor=2 if workers else None)
    return Confirmed(label, None, config, rates)


def test_within_two_percent_the_cheaper_config_wins():
    big = _confirmed("trial 1", 4, (500.0, 502.0, 498.0))
    small = _confirmed("trial 2", 2, (495.0, 494.0, 496.0))
    winner, notes = pick_winner([big, small])
    assert winner is small and "the pick among the finalists within 2%" in notes[0]


def test_overlapping_intervals_are_ties_not_ranks():
    a = _confirmed("trial 1", 2, (400.0, 520.0, 470.0, 480.0))
    b = _confirmed("trial 2", 1, (450.0, 455.0, 452.0, 451.0))
    clear = _confirmed("trial 3", 1, (300.0, 301.0, 299.0))
    winner, notes = pick_winner([a, b, clear])
    assert winner is a and not notes  # no sentence ranks configs of several differences
    rows = [(c.label, c.median, c.iqr) for c in (clear, b, a)]
    assert ties(rows) == {"trial 1": "=1", "trial 2": "=1", "trial 3": "3"}
    apart = [("x", 500.0, (495.0, 505.0)), ("y", 400.0, (395.0, 405.0))]
    assert ties(apart) == {"x": "1", "y": "2"}


def test_the_interquartile_range_stays_inside_what_was_measured():
    two = _confirmed("trial 1", 2, (100.0, 110.0))
    assert 100.0 <= two.iqr[0] <= two.iqr[1] <= 110.0
    assert two.iqr == pytest.approx((102.5, 107.5))


def _as_is(label: str, workers: int, rates: tuple[float, ...]) -> Confirmed:
    config = PipelineConfig(
        num_workers=workers, prefetch_factor=2 if workers else None, decoder="as_is"
    )
    return Confirmed(label, None, config, rates)


def test_each_way_has_its_pick_and_loader_kwargs_never_lose_to_the_baseline():
    base = _as_is("baseline", 0, (200.0, 200.0))
    tuned = _confirmed("trial 1", 2, (500.0, 505.0))
    as_is = _as_is("trial 2", 2, (300.0, 310.0))
    winner, as_is_winner, _ = pick_each_way([base, tuned, as_is])
    assert (winner, as_is_winner) == (tuned, as_is)
    slower = _as_is("trial 3", 1, (150.0, 160.0))  # as it is, workers made it slower
    winner, as_is_winner, notes = pick_each_way([base, tuned, slower])
    assert (winner, as_is_winner) == (tuned, base)
    assert "loader_kwargs: nothing beat the baseline here: it was the fastest" in notes[0], notes
    level = _as_is("trial 4", 2, (201.0, 203.0))  # as fast: the baseline needs no workers
    winner, as_is_winner, notes = pick_each_way([base, tuned, level])
    assert (winner, as_is_winner) == (tuned, base)
    assert any(n.startswith("loader_kwargs: baseline is the pick") for n in notes), notes
    assert pick_each_way([tuned])[1] is None  # no as-is config confirmed: no pick


def test_a_pick_that_ties_with_the_baseline_keeps_the_baseline():
    base = _as_is("baseline", 0, (180.0, 200.0, 220.0, 240.0))
    tied = _as_is("trial 5", 2, (200.0, 230.0, 240.0, 260.0))  # faster median, IQRs overlap
    winner, as_is_winner, notes = pick_each_way([base, tied])
    assert winner is base and as_is_winner is base
    assert any("beyond the spread" in n for n in notes), notes
    clear = _as_is("trial 6", 2, (300.0, 310.0, 305.0, 320.0))
    assert pick_each_way([base, clear])[0] is clear


def test_run_to_run_is_how_far_two_rounds_of_one_config_differed():
    """The finalists' median of their rounds' range over their median; a config confirmed
    in one round says nothing of it."""
    config = PipelineConfig()
    confirmed = [
        Confirmed("a", 1, config, (100.0,), round_rates=(100.0, 110.0, 105.0)),  # 10/105
        Confirmed("b", 2, config, (200.0,), round_rates=(200.0, 200.0)),  # 0
        Confirmed("c", 3, config, (50.0,), round_rates=(50.0,)),  # one round
        Confirmed("d", 4, config, (80.0,), round_rates=(80.0, 100.0)),  # 20/90
    ]
    assert run_to_run(confirmed) == pytest.approx(10.0 / 105.0)
    assert run_to_run(confirmed[2:3]) == 0.0

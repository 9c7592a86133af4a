"""The figures configs are judged by: the epoch rate and the winner among finalists."""

from __future__ import annotations

import pytest

from autotune.pipeline.config import PipelineConfig
from autotune.tuner.metrics import Confirmed, epoch_rate, pick_winner


def test_epoch_rate_charges_startup_unless_workers_persist():
    plain = PipelineConfig(num_workers=2)
    assert epoch_rate(100.0, 1.0, config=plain, epoch_samples=100) == pytest.approx(50.0)
    persistent = PipelineConfig(num_workers=2, persistent_workers=True)
    assert epoch_rate(100.0, 1.0, config=persistent, epoch_samples=100) == 100.0
    assert epoch_rate(100.0, 1.0, config=plain, epoch_samples=None) == 100.0


def _confirmed(label: str, workers: int, rates: tuple[float, ...]) -> Confirmed:
    config = PipelineConfig(num_workers=workers, prefetch_factor=2 if workers else None)
    return Confirmed(label, None, config, rates)


def test_within_two_percent_the_cheaper_config_wins():
    big = _confirmed("trial 1", 4, (500.0, 502.0, 498.0))
    small = _confirmed("trial 2", 2, (495.0, 494.0, 496.0))
    winner, notes = pick_winner([big, small])
    assert winner is small and "within 2%" in notes[0]


def test_a_lead_inside_the_spread_is_said():
    a = _confirmed("trial 1", 2, (400.0, 520.0, 470.0, 480.0))
    b = _confirmed("trial 2", 1, (450.0, 455.0, 452.0, 451.0))
    winner, notes = pick_winner([a, b])
    assert winner is a and "inside the winner's spread" in notes[0]
    clear = _confirmed("trial 3", 1, (300.0, 301.0, 299.0))
    winner, notes = pick_winner([a, clear])
    assert winner is a and not notes

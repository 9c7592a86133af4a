"""The summary printed at the end of a study: each claim with its range, and where the
study's time went."""

from __future__ import annotations

import pytest

from autotune.report.summary import Summary, time_line
from autotune.tuner.result import StudyResult


def test_the_time_split_is_each_phase_that_ran_in_minutes_in_order() -> None:
    split = {"worth": 90.0, "search": 408.0, "references": 42.0, "confirmation": 462.0}
    assert time_line(split) == (
        "time: references 0.7, search 6.8, confirmation 7.7, worth 1.5 min; 16.7 min in all"
    )
    # stopped during the search: what ran
    assert time_line({"references": 30.0, "search": 90.0}) == (
        "time: references 0.5, search 1.5 min; 2.0 min in all"
    )
    assert time_line({}) == ""  # a result from before the split was kept


def test_each_claim_is_stated_with_the_range_its_rounds_measured() -> None:
    rows = (
        {"label": "baseline", "samples_per_s": 200.0, "iqr": [190.0, 210.0]},
        {"label": "trial 4", "samples_per_s": 260.0, "iqr": [242.0, 278.0]},
    )
    result = StudyResult("s", "mem", rows, winner_label="trial 4", as_is_label="baseline")
    assert result.speedup_range_of("trial 4") == pytest.approx((1.21, 1.39))
    lines = Summary(result).ways()
    assert (
        "build_loader(best.yaml), the whole tuned pipeline (trial 4): 1.30x the baseline "
        "(IQR 1.21-1.39)" in lines
    )
    assert (
        "loader_kwargs(best.yaml), your pipeline as it is (baseline): 1.00x the baseline "
        "(IQR 0.95-1.05)" in lines
    )
    assert StudyResult("s", "mem", rows[1:]).speedup_range_of("trial 4") is None  # no baseline


def test_a_finalist_that_left_the_race_is_marked_in_the_table() -> None:
    rows = (
        {"label": "baseline", "samples_per_s": 200.0, "iqr": [190.0, 210.0], "config": "w0"},
        {"label": "trial 4", "samples_per_s": 260.0, "iqr": [242.0, 278.0], "config": "w2"},
        {"label": "trial 7", "samples_per_s": 120.0, "iqr": [118.0, 121.0], "config": "w1"},
    )
    raced = ({**rows[2], "raced_out": 1},)
    result = StudyResult("s", "mem", rows[:2] + raced, winner_label="trial 4")
    marks = {row[1]: row[5] for row in Summary(result).rows()}
    assert marks["trial 7"] == "left the race after round 1"
    assert marks["trial 4"] and "race" not in marks["trial 4"]

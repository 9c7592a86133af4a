"""The summary printed at the end of a study: here, where its time went."""

from __future__ import annotations

from autotune.report.summary import time_line


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

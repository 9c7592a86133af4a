"""fANOVA's shares, one evaluator for the polish and the report: seeded, and none where the
trials cannot say."""

from __future__ import annotations

import pytest
from helpers import workers_and_decoder_study as _study

from autotune.tuner import importance, polish

# fANOVA imports scikit-learn: seconds of each test process
pytestmark = pytest.mark.slow

# five: the polish ranks knobs from polish.MIN_TRIALS_FOR_IMPORTANCE trials on
MOVED_BY_WORKERS = (
    (0, "pil", 100.0),
    (2, "pil", 300.0),
    (0, "cv", 110.0),
    (2, "cv", 310.0),
    (1, "pil", 200.0),
)


def test_the_setting_that_moved_the_rate_gets_the_larger_share_the_same_each_time():
    found = importance.shares(_study(*MOVED_BY_WORKERS))
    assert found is not None and found["num_workers"] > found["decoder"]
    assert importance.shares(_study(*MOVED_BY_WORKERS)) == found  # seeded


def test_no_variance_to_explain_is_none_and_the_polish_keeps_its_order():
    same = _study(*[(2, "pil", 300.0)] * len(MOVED_BY_WORKERS))
    assert importance.shares(same) is None
    assert polish.by_importance(same.trials, ["decoder", "num_workers"]) == [
        "decoder",
        "num_workers",
    ]
    moved = _study(*MOVED_BY_WORKERS)
    assert polish.by_importance(moved.trials, ["decoder", "num_workers"]) == [
        "num_workers",
        "decoder",
    ]

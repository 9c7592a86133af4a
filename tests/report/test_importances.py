"""Which settings mattered: fANOVA's shares, and none where the trials cannot say."""

from __future__ import annotations

import pytest
from helpers import workers_and_decoder_study as _study

from autotune.report import importances

# fANOVA imports scikit-learn: seconds of each test process
pytestmark = pytest.mark.slow


def test_the_settings_that_moved_the_rate_get_the_shares():
    study = _study((0, "pil", 100.0), (2, "pil", 300.0), (0, "cv", 110.0), (2, "cv", 310.0))
    found = importances.compute(study)
    assert found is not None and found["num_workers"] > found["decoder"]


def test_trials_without_variance_to_explain_have_no_importances():
    """Two runs of one config (the search pruned every other trial): nothing, not a crash."""
    assert importances.compute(_study((2, "pil", 300.0), (2, "pil", 300.0))) is None
    assert importances.compute(_study((2, "pil", 300.0))) is None  # under two trials

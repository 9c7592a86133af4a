"""Tests for autotune.tuner.result: a study's result saved on the study and read back from
it alone, each way's pick and the ratios between them."""

from __future__ import annotations

import dataclasses

from autotune.pipeline.config import PipelineConfig
from autotune.tuner import store
from autotune.tuner.result import StudyResult, trial_of_row
from autotune.tuner.store import StudyKey, TrialKey
from studies import study_with

PICKED = PipelineConfig(num_workers=1, prefetch_factor=2, decoder="pil")


def test_the_winner_is_found_by_its_trial_number_or_its_older_label() -> None:
    study = study_with({TrialKey.ROLE: store.BASELINE}, {}, {})
    rows = [
        {"label": "baseline", "trial_number": None, "samples_per_s": 100.0},
        {"label": "trial 2", "trial_number": 2, "samples_per_s": 300.0},
    ]
    assert trial_of_row(study, rows[0]).number == 0
    assert trial_of_row(study, rows[1]).number == 2
    older = {"label": "trial 1"}  # stored before rows carried their trial numbers
    assert trial_of_row(study, older).number == 1
    assert trial_of_row(study, {"label": "oracle"}) is None


def test_a_result_saved_on_the_study_reads_back_the_same() -> None:
    study = study_with({TrialKey.ROLE: store.BASELINE}, {}, {TrialKey.PIPELINE: PICKED.to_dict()})
    rows = (
        {"label": "baseline", "trial_number": None, "samples_per_s": 100.0},
        {"label": "trial 2", "trial_number": 2, "samples_per_s": 300.0},
    )
    spent = {"references": 40.0, "search": 400.0, "confirmation": 460.0}
    saved = StudyResult(
        "s", "mem", rows, "trial 2", "baseline", PICKED, baseline_text="tutorial", notes=("n",)
    )
    saved = dataclasses.replace(saved, time_split=spent)
    saved.save(study)
    loaded = StudyResult.load(study, storage="mem")
    assert loaded.time_split == spent and loaded.search_wall_s == 400.0
    assert loaded.confirmed == rows and loaded.best == PICKED
    assert (loaded.winner_label, loaded.as_is_label) == ("trial 2", "baseline")
    assert (loaded.baseline_text, loaded.notes) == ("tutorial", ("n",))
    assert loaded.best_params == {"num_workers": 1} and loaded.speedup == saved.speedup == 3.0
    assert loaded.counts == {"complete": 3} and loaded.complete_trials == 3


def test_a_result_stored_before_the_winner_was_names_the_fastest() -> None:
    study = study_with({}, {})
    study.set_user_attr(
        StudyKey.CONFIRMATION,
        [{"label": "trial 0", "samples_per_s": 50.0}, {"label": "trial 1", "samples_per_s": 90.0}],
    )
    assert StudyResult.load(study, storage="mem").winner_label == "trial 1"

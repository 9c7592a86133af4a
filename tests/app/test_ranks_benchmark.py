"""The benchmark's ranks scenario: tuned at one rank and at two, measured at two."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from helpers import BENCHMARK_TINY, run_benchmark
from optuna.trial import TrialState

from autotune.tuner import study_trials


@pytest.mark.slow
def test_the_ranks_scenario_tunes_both_ways_and_measures_them_at_two_ranks(
    tmp_path: Path,
) -> None:
    args = ["--scenario", "ranks", "--rounds", "1", *BENCHMARK_TINY, "study.n_trials=2"]
    result = run_benchmark(args, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    folder = tmp_path / "studies" / "benchmark" / "ranks"
    results = json.loads((folder / "results.json").read_text())
    assert results["ranks"] == 2
    labels = [c["label"] for c in results["contenders"]]
    assert labels == [
        "ranks=1 pick, copied",
        "ranks=2 pick",
        "defaults",
        "torchrun defaults",
        "lightning",
    ]
    assert all(c["samples_per_s"] > 0 for c in results["contenders"])
    assert set(results["ratios"]) == {
        "vs_ranks_1_pick_copied",
        "vs_defaults",
        "vs_torchrun_defaults",
        "vs_lightning",
    }
    # both studies stored, their trials run at 1 and at 2 ranks
    storage = f"sqlite:///{folder / 'benchmark.db'}"
    names = sorted(s.study_name for s in optuna.get_all_study_summaries(storage))
    assert [n.rsplit("-", 2)[0] for n in names] == ["ranks-1", "ranks-2"]
    two = optuna.load_study(study_name=names[1], storage=storage)
    done = study_trials.measured(two.get_trials(states=(TrialState.COMPLETE,)))
    assert done and all(len(t.user_attrs["samples_per_s_ranks"]) == 2 for t in done)
    assert "against ranks 1 pick copied" in (folder / "results.md").read_text()

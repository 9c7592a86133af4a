"""The benchmark's scenarios on other data: slow storage (a study's, and a training script's
whole runs) and a planned run of many epochs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
import pytest
from helpers import BENCHMARK_TINY, ONLINE_BENCHMARK_TINY, run_benchmark

from autotune.app import slow_storage


@pytest.mark.slow
@pytest.mark.skipif(slow_storage.unavailable_reason() is not None, reason="no FUSE here")
def test_the_storage_scenario_reads_through_slow_storage_against_the_best_capped_config(
    tmp_path: Path,
) -> None:
    # 4: past 2 cores, as waiting reads ask; 0: the baseline's, and the best within the cores;
    # the pipeline as it is only: a grid of 2
    workers = [
        "search_space.knobs.num_workers.type=choice",
        "search_space.knobs.num_workers.choices=[0,4]",
        "search_space.knobs.decoder.choices=[as_is]",
    ]
    # reads still wait (the baseline's data wait is most of its time), at a tenth of the cost
    late = ["--latency-ms", "2"]
    args = ["--scenario", "storage", "--rounds", "1", *late, *BENCHMARK_TINY, *workers]
    result = run_benchmark(args, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "studies/benchmark/storage/results.json").read_text())
    assert "behind 2 ms of added latency" in results["about"]
    rival = results["head_to_head"]["grid best, workers <= cores"]
    cores = results["machine"]["usable_cpus"]
    assert int(rival["config"].split()[0].removeprefix("w")) <= cores
    assert results["ratios"]["tuner_vs_capped_at_cores"] > 0
    assert "(FUSE)" in results["about"]
    # half the grid's trials: the search-time target is for a quarter, so none is shown
    assert re.search(r"\| search_time_fraction \| [\d.]+ \| \|", result.stdout)


@pytest.mark.slow
@pytest.mark.skipif(slow_storage.unavailable_reason() is not None, reason="no FUSE here")
def test_the_online_storage_scenario_runs_the_study_and_the_script_behind_slow_storage(
    tmp_path: Path,
) -> None:
    late = ["--latency-ms", "1"]
    tiny = ["--rounds", "1", "--epochs", "2", *ONLINE_BENCHMARK_TINY]
    args = ["--scenario", "online_storage", *late, *tiny]
    result = run_benchmark([*args, "study.n_trials=3"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    folder = tmp_path / "studies/benchmark/online_storage"
    results = json.loads((folder / "results.json").read_text())
    assert "behind 1 ms of added latency" in results["about"]
    # the tutorial script's runs read the mount, and so did the offline study
    assert Path(results["read_from"]).name.startswith("autotune-slow-")
    assert all(len(runs) == 1 for runs in results["runs"].values())
    (best,) = (folder / "studies").glob("offline-*/best.yaml")
    assert "dataset: slow" in best.read_text()


@pytest.mark.slow
def test_the_cached_scenario_plans_90_epochs_against_the_best_config_without_a_copy(
    tmp_path: Path,
) -> None:
    small = [
        "search_space.knobs.num_workers.high=1",
        "search_space.knobs.main_threads.high=1",
        "search_space.knobs.prefetch_factor.high=2",  # a grid of 4: copy or not, w0 or w1
    ]
    # the scenario's own space, made small
    space = [a for a in BENCHMARK_TINY if a != "search_space=quick"]
    result = run_benchmark(["--scenario", "cached", "--rounds", "1", *space, *small], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "studies/benchmark/cached/results.json").read_text())
    grid = optuna.load_study(
        study_name=results["studies"]["grid"], storage=results["studies"]["storage"]
    )
    configs = [t.user_attrs["config"] for t in grid.trials]
    assert len(configs) == len(set(configs))  # on decoded pixels, every decoder is one config
    assert any("decoded" in c for c in configs)
    assert "resized" not in " ".join(configs)
    assert "decoded" not in results["head_to_head"]["grid best, no copy"]["config"]
    assert re.search(r"\| tuner_vs_uncached \| [\d.]+ \| >= 1.5 (met|MISSED) \|", result.stdout)

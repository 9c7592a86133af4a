"""The benchmark's online scenario: the tutorial script untouched, tuning online, and at an
offline study's pick."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from helpers import ONLINE_BENCHMARK_TINY, run_benchmark


@pytest.mark.slow
def test_the_online_scenario_runs_the_tutorial_script_each_way_after_an_offline_study(
    tmp_path: Path,
) -> None:
    tiny = ["--rounds", "1", "--epochs", "2", *ONLINE_BENCHMARK_TINY, "study.n_trials=3"]
    args = ["--scenario", "online", *tiny]
    result = run_benchmark(args, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    folder = tmp_path / "studies" / "benchmark" / "online"
    results = json.loads((folder / "results.json").read_text())
    assert list(results["arms"]) == [
        "untouched",
        "online, first run",
        "online, second run",
        "offline pick",
    ]
    assert all(
        len(runs) == 1 and len(runs[0]["epochs_s"]) == 2 for runs in results["runs"].values()
    )
    assert results["offline_study_s"] > 0
    # the offline study is a real one, and the online runs recorded theirs beside it
    (best,) = (folder / "studies").glob("offline-*/best.yaml")
    assert "loader_kwargs" in best.read_text()
    second = results["runs"]["online, second run"][0]
    assert second["kept"] == results["runs"]["online, first run"][0]["kept"]
    (round_storage,) = folder.glob("online-*-round-0.db")
    assert optuna.get_all_study_summaries(f"sqlite:///{round_storage}")
    assert "| first_run_vs_offline_pick |" in result.stdout


def test_the_tutorial_script_refuses_loader_kwargs_without_a_best_yaml(tmp_path: Path) -> None:
    from autotune.app import tutorial_train

    with pytest.raises(SystemExit) as refused:
        tutorial_train.main(["--root", str(tmp_path), "--loader", "loader_kwargs"])
    assert refused.value.code == 2


def test_an_offline_best_yaml_without_its_study_is_refused_in_one_line(tmp_path: Path) -> None:
    from autotune.app import online_benchmark
    from autotune.errors import UsageError
    from autotune.pipeline import best_file
    from autotune.pipeline.config import PipelineConfig

    path = tmp_path / "best.yaml"
    best_file.write(path, best_file.BestFile(PipelineConfig()))  # no study: section
    with pytest.raises(UsageError, match="does not say which study wrote it"):
        online_benchmark.measure(None, [], tmp_path, 1, 1, offline_best=path)  # type: ignore[arg-type]


def test_an_offline_best_yaml_whose_storage_cannot_be_read_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    from autotune.app import online_benchmark
    from autotune.errors import UsageError
    from autotune.pipeline import best_file
    from autotune.pipeline.config import PipelineConfig

    path = tmp_path / "best.yaml"
    elsewhere = best_file.StudySection(name="s", storage=f"sqlite:///{tmp_path}/not/here.db")
    best_file.write(path, best_file.BestFile(PipelineConfig(), study=elsewhere))
    with pytest.raises(UsageError, match="cannot be read \\(no such file\\)"):
        online_benchmark.measure(None, [], tmp_path, 1, 1, offline_best=path)  # type: ignore[arg-type]
    assert not (tmp_path / "not").exists()  # nothing made where it looked
    optuna.create_study(study_name="other", storage=f"sqlite:///{tmp_path / 'a.db'}")
    there = best_file.StudySection(name="s", storage=f"sqlite:///{tmp_path / 'a.db'}")
    best_file.write(path, best_file.BestFile(PipelineConfig(), study=there))
    with pytest.raises(UsageError, match="which cannot be read .*Record does not exist"):
        online_benchmark.measure(None, [], tmp_path, 1, 1, offline_best=path)  # type: ignore[arg-type]

"""``python -m autotune.benchmark``: a real, tiny run of the small scenario, and the benchmark's
bad input. Each other scenario is tested beside the module that measures it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
import pytest
from helpers import BENCHMARK_TINY, run_benchmark
from optuna.trial import TrialState

from autotune.app import benchmark
from autotune.tuner import study_trials


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("benchmark")
    result = run_benchmark(["--scenario", "small", "--rounds", "1", *BENCHMARK_TINY], cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| tuner_vs_oracle |" in result.stdout
    return cwd / "studies" / "benchmark" / "small"


@pytest.mark.slow
def test_results_json_has_every_figure(tiny_run: Path) -> None:
    results = json.loads((tiny_run / "results.json").read_text())
    ratios = results["ratios"]
    for key in ("tuner_vs_oracle", "tuner_vs_defaults", "tuner_vs_recipe", "tuner_vs_cpu_bound"):
        assert isinstance(ratios[key], float) and ratios[key] > 0, key
    assert results["search_time_fraction"] > 0
    assert set(results["head_to_head"]) == {"oracle", "tuner", "defaults", "recipe", "heuristic"}
    assert all(row["rounds"] == 1 for row in results["head_to_head"].values())
    # quick space, Pillow beside the pipeline as it is: 2 decoders x 3 worker counts
    assert results["trials"] == {"grid": 6, "tuner": 2}
    recipe = results["head_to_head"]["recipe"]["config"]
    assert recipe.startswith(f"w{min(8, results['machine']['usable_cpus'])} pf4 persist")
    table = (tiny_run / "results.md").read_text()
    for key, target in (("tuner_vs_oracle", ">= 0.97"), ("search_time_fraction", "<= 0.15")):
        assert re.search(rf"\| {key} \| [\d.]+ \| {target} (met|MISSED) \|", table), key


@pytest.mark.slow
def test_the_grid_measures_every_config_in_full(tiny_run: Path) -> None:
    results = json.loads((tiny_run / "results.json").read_text())
    storage = results["studies"]["storage"]
    grid = optuna.load_study(study_name=results["studies"]["grid"], storage=storage)
    trials = grid.get_trials(deepcopy=False)
    assert len(trials) == 6
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials)  # no pruning
    configs = {t.user_attrs["config"] for t in trials}
    assert len(configs) == 6  # every point once
    tuner = optuna.load_study(study_name=results["studies"]["tuner"], storage=storage)
    complete = tuner.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    assert len(study_trials.measured(complete)) <= 2  # its budget; a repeat is not measured


def test_gpu_scenario_skips_without_cuda(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is usable here: the scenario would run")
    assert benchmark.main(["--scenario", "gpu", "--out", str(tmp_path / "out")]) == 0
    assert "skipped" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--scenario", "huge"], "invalid choice: 'huge'"),
        (["--scenario", "small", "datset=synthetic"], "datset"),
        (["--scenario", "small", "--rounds", "0"], "--rounds"),
        (["--scenario", "storage", "--latency-ms", "0"], "--latency-ms must be > 0"),
        (["--scenario", "small", "--latency-ms", "5"], "--latency-ms is for a scenario"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], named: str
) -> None:
    try:
        code = benchmark.main([*args, "--out", str(tmp_path / "out")])
    except SystemExit as exc:  # argparse's own checks exit
        code = exc.code
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], lines
    assert not (tmp_path / "out" / "small" / "results.json").exists()

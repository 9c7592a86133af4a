"""``python -m autotune.benchmark``: a real, tiny run of every stage, and its bad input.

The run is shrunk with Hydra overrides (6 grid configs, short windows): it checks what is
measured and written, not the figures, which come from full runs (the README has them).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.app import benchmark, slow_storage
from autotune.tuner import store

TINY = [
    "search_space=quick",
    "window=quick",
    "window.sub_windows=2",
    "search_space.knobs.decoder.choices=[pil]",
    "dataset.count=32",
    "dataset.num_classes=2",
    "recipe.crop_size=48",
    "batch_size=8",
    "study.n_startup_trials=1",
    "study.confirm_top_k=1",
    "study.confirm_rounds=1",
    "study.worth_budget=0",  # the worth table is tune's, tested there
    "diagnose.shards=false",  # files against shards: tested in tests/diagnose
]


def _benchmark(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autotune.benchmark", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("benchmark")
    result = _benchmark(["--scenario", "small", "--rounds", "1", *TINY], cwd)
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
    for key, target in (("tuner_vs_oracle", ">= 0.97"), ("search_time_fraction", "<= 0.3")):
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
    assert len(store.measured(complete)) <= 2  # its budget; a repeat is not measured


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


@pytest.mark.slow
def test_the_ranks_scenario_tunes_both_ways_and_measures_them_at_two_ranks(
    tmp_path: Path,
) -> None:
    args = ["--scenario", "ranks", "--rounds", "1", *TINY, "study.n_trials=3"]
    result = _benchmark(args, tmp_path)
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
    done = store.measured(two.get_trials(states=(TrialState.COMPLETE,)))
    assert done and all(len(t.user_attrs["samples_per_s_ranks"]) == 2 for t in done)
    assert "against ranks 1 pick copied" in (folder / "results.md").read_text()


@pytest.mark.slow
@pytest.mark.skipif(slow_storage.unavailable_reason() is not None, reason="no FUSE here")
def test_the_storage_scenario_reads_through_slow_storage_against_the_best_capped_config(
    tmp_path: Path,
) -> None:
    # 4: past 2 cores, as waiting reads ask; 0: the baseline's
    workers = [
        "search_space.knobs.num_workers.type=choice",
        "search_space.knobs.num_workers.choices=[0,1,4]",
    ]
    # reads still wait (the baseline's data wait is most of its time), at a quarter of the cost
    late = ["--latency-ms", "5"]
    args = ["--scenario", "storage", "--rounds", "1", *late, *TINY, *workers]
    result = _benchmark(args, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "studies/benchmark/storage/results.json").read_text())
    assert "behind 5 ms of added latency" in results["about"]
    rival = results["head_to_head"]["grid best, workers <= cores"]
    cores = results["machine"]["usable_cpus"]
    assert int(rival["config"].split()[0].removeprefix("w")) <= cores
    assert results["ratios"]["tuner_vs_capped_at_cores"] > 0
    assert "(FUSE)" in results["about"]
    # half the grid's trials: the search-time target is for a quarter, so none is shown
    assert re.search(r"\| search_time_fraction \| [\d.]+ \| \|", result.stdout)


@pytest.mark.slow
def test_the_cached_scenario_plans_90_epochs_against_the_best_config_without_a_copy(
    tmp_path: Path,
) -> None:
    small = [
        "search_space.knobs.num_workers.high=1",
        "search_space.knobs.main_threads.high=1",
        "search_space.knobs.prefetch_factor.high=2",  # a grid of 4: copy or not, w0 or w1
    ]
    space = [a for a in TINY if a != "search_space=quick"]  # the scenario's own, made small
    result = _benchmark(["--scenario", "cached", "--rounds", "1", *space, *small], tmp_path)
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


@pytest.mark.slow
def test_the_online_scenario_runs_the_tutorial_script_each_way_after_an_offline_study(
    tmp_path: Path,
) -> None:
    tiny = [a for a in TINY if not a.startswith(("diagnose.", "search_space.knobs"))]
    args = ["--scenario", "online", "--rounds", "1", "--epochs", "2", *tiny, "study.n_trials=3"]
    result = _benchmark(args, tmp_path)
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

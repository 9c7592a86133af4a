"""report.md and its plots: after a real study, rebuilt from storage alone (``mode=report``),
and for the studies that go wrong (only failures, pruned trials, one decoder, no ceiling)."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import optuna
import pytest
import yaml
from helpers import run_cli
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial
from PIL import Image, ImageStat

from autotune.app import cli
from autotune.report import markdown as report
from autotune.report.summary import Summary
from autotune.tuner.result import StudyResult

PLOTS = {
    "optimization_history.png",
    "param_importances.png",
    "throughput_vs_workers.png",
    "data_wait_vs_throughput.png",
}


def linked_images(report_md: Path) -> list[Path]:
    return [
        report_md.parent / name
        for name in re.findall(r"!\[[^]]*]\(([^)]+)\)", report_md.read_text())
    ]


def assert_a_real_chart(png: Path) -> None:
    """Decodes, is large enough to read, and is not blank (a chart has many shades)."""
    with Image.open(png) as image:
        image.load()
        assert image.format == "PNG"
        width, height = image.size
        assert width >= 600 and height >= 400, image.size
        rgb = image.convert("RGB")
        assert len(rgb.getcolors(maxcolors=1 << 20) or []) > 50  # text, axes, markers
        assert max(ImageStat.Stat(rgb.convert("L")).stddev) > 10  # not one flat colour


@pytest.mark.slow
def test_a_study_writes_report_md_linking_legible_plots(quick_study):
    cwd, result = quick_study
    report_md = cwd / "studies" / "synthetic-tiny" / "report.md"
    text = report_md.read_text()
    assert "report:      studies/synthetic-tiny/report.md" in result.stdout
    for heading in ("## Summary", "## Trials", "## Settings that mattered", "## Plots"):
        assert heading in text
    # the baseline row ("**baseline (loader_kwargs)**: ..." where it is that way's pick)
    assert "your pipeline, PyTorch's defaults |" in text and "| ceiling |" in text
    assert "- baseline: ImageFolder(root) with its PIL loader" in text
    assert "x the baseline" in text and "spread of the best: IQR" in text
    # each way's pick is marked in the table, and each has its speedup line
    assert "(build_loader)**" in text or "(build_loader + loader_kwargs)**" in text
    assert "loader_kwargs)**" in text
    assert "- build_loader(best.yaml), the whole tuned pipeline" in text
    assert "- loader_kwargs(best.yaml), your pipeline as it is" in text
    assert "No trial failed." in text
    assert "| `num_workers` |" in text  # an importance row per searched setting
    images = linked_images(report_md)
    assert {p.name for p in images} == PLOTS
    for png in images:
        assert_a_real_chart(png)


@pytest.mark.slow
def test_mode_report_rebuilds_the_same_report_from_storage_alone(quick_study, tmp_path):
    cwd, _ = quick_study
    (tmp_path / "studies").mkdir()
    shutil.copy(cwd / "studies" / "autotune.db", tmp_path / "studies" / "autotune.db")
    rebuilt = run_cli(["mode=report"], tmp_path, timeout=120)
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    assert "report:    studies/synthetic-tiny/report.md" in rebuilt.stdout
    folder = tmp_path / "studies" / "synthetic-tiny"
    original = cwd / "studies" / "synthetic-tiny" / "report.md"
    assert (folder / "report.md").read_text() == original.read_text()
    assert {p.name for p in folder.glob("*.png")} == PLOTS
    assert not (folder / "best.yaml").exists()  # the report only: best.yaml needs the run


@pytest.mark.slow
def test_mode_report_of_an_unknown_study_names_those_there(
    quick_study, tmp_path, monkeypatch, capsys
):
    cwd, _ = quick_study
    (tmp_path / "studies").mkdir()
    shutil.copy(cwd / "studies" / "autotune.db", tmp_path / "studies" / "autotune.db")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["mode=report", "study.name=nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'nope'" in err and "synthetic-tiny" in err
    assert sorted(p.name for p in (tmp_path / "studies").iterdir()) == ["autotune.db"]


def test_mode_report_without_storage_is_one_line_and_creates_nothing(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["mode=report"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "run python -m autotune first" in err
    assert not list(tmp_path.iterdir())


SPACE = {
    "num_workers": IntDistribution(0, 2),
    "decoder": CategoricalDistribution(["pil", "opencv"]),
}


def stored_study(tmp_path: Path, trials: list, **attrs) -> str:
    """A study in SQLite holding ``trials`` as a run would have left them."""
    storage = f"sqlite:///{tmp_path}/studies/autotune.db"
    (tmp_path / "studies").mkdir(exist_ok=True)
    study = optuna.create_study(study_name="made", storage=storage, direction="maximize")
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    study.add_trials(trials)
    return storage


def measured(workers: int, decoder: str, rate: float, **kw) -> optuna.trial.FrozenTrial:
    state = kw.pop("state", TrialState.COMPLETE)
    params = {"num_workers": workers, "decoder": decoder}
    attrs = {
        "config": f"w{workers} {decoder}",
        "pipeline": {"num_workers": workers, "decoder": decoder, "batch_size": 8},
        "data_wait_fraction": kw.pop("wait", 0.5),
        **kw.pop("attrs", {}),
    }
    return create_trial(
        state=state,
        value=rate if state == TrialState.COMPLETE else None,
        params=params,
        distributions=SPACE,
        user_attrs=attrs,
        intermediate_values=kw.pop("steps", {0: rate, 1: rate}),
    )


def failed(workers: int, kind: str, message: str) -> optuna.trial.FrozenTrial:
    hint = f"hint for {kind}"
    return measured(
        workers,
        "pil",
        0.0,
        state=TrialState.FAIL,
        steps={},
        attrs={"failure": {"kind": kind, "message": message, "hint": hint}},
    )


@pytest.mark.slow
def test_a_study_with_only_failed_trials_reports_its_failures_without_plots(tmp_path):
    storage = stored_study(
        tmp_path,
        [
            failed(0, "worker_died", "DataLoader worker (pid 7) is killed"),
            failed(2, "shm_exhausted", "No space left | on /dev/shm"),
        ],
    )
    path = report.write_report(storage, "made", tmp_path / "studies" / "made")
    text = path.read_text()
    assert "No trial finished: there is no best config." in text
    assert (
        "| worker_died | 1: 0 | DataLoader worker (pid 7) is killed | hint for worker_died |"
        in text
    )
    assert "No space left \\| on /dev/shm" in text  # a | in a message does not break the table
    assert "Not computed: importances need at least two complete trials" in text
    assert text.count("Not drawn:") == 4 and not linked_images(path)
    assert not list(path.parent.glob("*.png"))


@pytest.mark.slow
def test_pruned_trials_one_decoder_and_no_ceiling_still_plot(tmp_path):
    trials = [
        measured(0, "pil", 200.0, wait=0.8),
        measured(1, "pil", 320.0, wait=0.6),
        measured(2, "pil", 410.0, wait=0.3),
        measured(2, "pil", 0.0, state=TrialState.PRUNED, steps={0: 150.0, 1: 140.0}),
        measured(1, "pil", 0.0, state=TrialState.PRUNED, steps={}, attrs={"skipped": "shm"}),
    ]
    confirmation = [
        {
            "label": "trial 2",
            "config": "w2 pil",
            "samples_per_s": 400.0,
            "steady": 400.0,
            "iqr": [390.0, 420.0],
            "rounds": 1,
        },
        {
            "label": "baseline",
            "config": "w0 pil",
            "samples_per_s": 200.0,
            "steady": 200.0,
            "iqr": [195.0, 205.0],
            "rounds": 1,
        },
    ]
    storage = stored_study(
        tmp_path,
        trials,
        confirmation=confirmation,
        winner="trial 2",
        cpu_work_bound_samples_per_s={"pil": 450.0},
    )
    path = report.write_report(storage, "made", tmp_path / "studies" / "made")
    text = path.read_text()
    assert "| ceiling |" not in text and "/ ceiling" not in text  # none measured: none shown
    assert "| CPU-work bound (pil) | 450.0 |" in text
    assert "best (steady) / CPU-work bound: 0.89" in text
    assert (
        "- build_loader(best.yaml), the whole tuned pipeline (trial 2): 2.00x the baseline" in text
    )
    assert "5 trials: 3 complete, 2 pruned, 0 failed (1 of the pruned skipped" in text
    assert "| skipped (would not fit) | 1: 4 | shm |" in text
    images = linked_images(path)
    assert {p.name for p in images} == PLOTS
    for png in images:
        assert_a_real_chart(png)


@pytest.mark.slow
@pytest.mark.parametrize("bound", [380.5, None])
def test_the_cpu_work_bound_is_shown_only_when_stored(tmp_path, bound):
    trials = [measured(0, "pil", 200.0), measured(2, "opencv", 300.0)]
    attrs = {"ceiling_samples_per_s": 900.0}
    if bound is not None:
        attrs["cpu_work_bound_samples_per_s"] = bound
    storage = stored_study(tmp_path, trials, **attrs)
    text = report.write_report(storage, "made", tmp_path / "studies" / "made").read_text()
    assert ("| CPU-work bound | 380.5 |" in text) == (bound is not None)
    assert ("CPU-work bound" in text) == (bound is not None)
    assert "| ceiling | 900.0 |" in text  # limits are shown before any confirmation


RATIO = re.compile(r"(\d+\.\d\d)x")


def comparative_lines(text: str) -> list[str]:
    """The report's sentences that state a ratio (``1.23x``): the list items and notes."""
    return [line for line in text.splitlines() if line.startswith("- ") and RATIO.search(line)]


def assert_every_comparison_is_controlled(text: str, worth: dict) -> None:
    """Each sentence with a ratio is a headline speedup over the baseline (the whole result)
    or a ratio of a worth row: the winner against itself with one setting changed."""
    winner = worth["winner"]["samples_per_s"]
    one_setting = {
        f"{winner / r['samples_per_s']:.2f}" for r in worth["rows"] if r["samples_per_s"]
    } | {f"{r['samples_per_s'] / winner:.2f}" for r in worth["rows"]}
    for line in comparative_lines(text):
        if line.startswith(("- build_loader(best.yaml)", "- loader_kwargs(best.yaml)")):
            assert re.search(r"x the baseline \(IQR [\d.]+-[\d.]+\)$", line), line
            continue
        for ratio in RATIO.findall(line):
            assert ratio in one_setting, f"not a one-setting comparison: {line}"


@pytest.mark.slow
def test_the_notes_compare_only_configs_one_setting_apart(tmp_path):
    trials = [
        measured(0, "pil", 200.0),
        measured(2, "opencv", 300.0),
        measured(1, "opencv", 290.0),
    ]
    worth = {
        "winner": {"label": "winner", "samples_per_s": 310.0, "iqr": [300.0, 320.0], "rounds": 2},
        "rows": [
            {
                "label": "decoder=pil",
                "knob": "decoder",
                "winner_value": "pil_reduced",
                "value": "pil",
                "also_changed": [],
                "config": "w2 pf2 pil t1 bs8",
                "samples_per_s": 200.0,
                "iqr": [195.0, 205.0],
                "winner_samples_per_s": 310.0,
                "ratio": 0.645,
                "verdict": "worth",
                "effect": "the winner's decoder is worth 1.55x",
            },
            {
                "label": "main_threads=2",
                "knob": "main_threads",
                "winner_value": 1,
                "value": 2,
                "also_changed": [],
                "config": "w2 pf2 pil_reduced t2 bs8",
                "samples_per_s": 305.0,
                "iqr": [298.0, 312.0],
                "winner_samples_per_s": 310.0,
                "ratio": 0.984,
                "verdict": "none",
                "effect": "no measurable effect here",
            },
        ],
        "left_out": ["num_workers=0"],
        "seconds": 30.0,
        "search_seconds": 200.0,
        "budget": 0.25,
    }
    notes = [
        "reduced decode (pil_reduced) is 1.55x the winner at full decode (pil, nothing else "
        "changed)"
    ]
    confirmation = [
        {
            "label": "baseline",
            "trial_number": 0,
            "config": "w0 as_is t2 bs8",
            "samples_per_s": 150.0,
            "steady": 150.0,
            "iqr": [140.0, 160.0],
            "rounds": 2,
        },
        {
            "label": "trial 1",
            "trial_number": 1,
            "config": "w2 pf2 pil_reduced t1 bs8",
            "samples_per_s": 310.0,
            "steady": 310.0,
            "iqr": [300.0, 320.0],
            "rounds": 2,
        },
        {
            "label": "trial 2",
            "trial_number": 2,
            "config": "w1 pf2 pil_reduced t1 bs8",
            "samples_per_s": 305.0,
            "steady": 305.0,
            "iqr": [296.0, 315.0],
            "rounds": 2,
        },
    ]
    storage = stored_study(
        tmp_path,
        trials,
        worth=worth,
        notes=notes,
        confirmation=confirmation,
        winner="trial 1",
        ceiling_samples_per_s=900.0,
        workload={"device": "cpu", "dataset": "made"},
        machine={"usable_cpus": 2},
        cpu_work_bound_samples_per_s={"pil_reduced": 1600.0},
    )
    text = report.write_report(storage, "made", tmp_path / "studies" / "made").read_text()
    assert "### What each setting is worth" in text
    assert (
        "| decoder | pil_reduced | pil | 200.0 | 0.65 | 195-205 | "
        "the winner's decoder is worth 1.55x |" in text
    )
    assert "no measurable effect here (inside the spread): main_threads=2" in text
    assert "left out by the budget: num_workers=0" in text
    assert "in 2 rounds, in 30 s: 15% of the search's 200 s" in text
    # trials 1 and 2 overlap: a tie, not ranked
    assert "| =1 | **trial 1 (build_loader)** |" in text and "| =1 | trial 2 |" in text
    # far below the loader's own bound on a CPU device: the cores are what is shared
    assert "the shared cores limit" in text and "the input pipeline limits" not in text
    assert_every_comparison_is_controlled(text, worth)
    bad = text + "\n- note: trial 2 is 1.42x trial 1\n"
    with pytest.raises(AssertionError, match="not a one-setting comparison"):
        assert_every_comparison_is_controlled(bad, worth)


@pytest.mark.slow
def test_a_real_study_reports_what_each_setting_is_worth(quick_study):
    cwd, result = quick_study
    text = (cwd / "studies" / "synthetic-tiny" / "report.md").read_text()
    study = optuna.load_study(
        study_name="synthetic-tiny", storage=f"sqlite:///{cwd}/studies/autotune.db"
    )
    worth = study.user_attrs["worth"]
    if study.user_attrs["winner"] == "baseline":  # nothing beat it beyond the spread: no
        assert worth is None and "nothing beat the baseline" in text  # winner to take apart
        return
    assert worth["rows"], worth  # the quick study's budget covers its variants
    assert "### What each setting is worth" in text
    assert "what each setting of the winner is worth:" in result.stdout
    assert_every_comparison_is_controlled(text, worth)
    best = yaml.safe_load((cwd / "studies" / "synthetic-tiny" / "best.yaml").read_text())
    changed = best["measured"]["worth"]["changed"]
    assert set(changed) == {r["label"] for r in worth["rows"]}


def test_one_round_s_table_says_the_run_to_run_variation_it_was_read_against():
    row = {"label": "main_threads=2", "verdict": "none"}
    worth = {
        "winner": {"samples_per_s": 310.0, "rounds": 1},
        "rows": [row],
        "left_out": [],
        "seconds": 30.0,
        "search_seconds": 200.0,
        "budget": 0.25,
        "run_to_run": 0.12,
    }
    summary = Summary(StudyResult("made", "mem", winner_label="trial 1", worth=worth))
    lines = summary.worth_lines()
    assert lines[1] == (
        "one round each: a change no larger than two runs of one config differed by in the "
        "confirmation (12%, the finalists' median) is no measurable effect"
    )
    assert lines[2] == (
        "no measurable effect here (inside the spread or the runs' variation): main_threads=2"
    )
    two_rounds = {**worth, "winner": {"samples_per_s": 310.0, "rounds": 2}}
    lines = Summary(dataclasses.replace(summary.result, worth=two_rounds)).worth_lines()
    assert lines[1] == "no measurable effect here (inside the spread): main_threads=2"


def test_the_trial_count_names_repeats_and_a_queued_trial_apart():
    dist = {"num_workers": IntDistribution(0, 2)}
    trials = [
        create_trial(params={"num_workers": 1}, distributions=dist, value=1.0),
        create_trial(
            params={"num_workers": 1},
            distributions=dist,
            value=1.0,
            user_attrs={"repeat_of": 0},
        ),
        create_trial(state=TrialState.WAITING),
    ]
    assert report._counts_line(trials) == (
        "1 trials: 1 complete, 0 pruned, 0 failed; 1 more repeated a config already measured "
        "and took its outcome, not measured again; 1 queued, which a run with more "
        "study.n_trials measures first.\n"
    )


def test_rows_taken_from_the_confirmation_are_named():
    reused = {"label": "decoder=pil", "verdict": "worth", "from_confirmation": True}
    worth = {
        "winner": {"samples_per_s": 310.0, "rounds": 2},
        "rows": [reused, {"label": "main_threads=2", "verdict": "worth"}],
        "left_out": [],
        "seconds": 20.0,
        "search_seconds": 200.0,
        "budget": 0.25,
    }
    lines = Summary(StudyResult("made", "mem", winner_label="trial 1", worth=worth)).worth_lines()
    assert lines[1] == (
        "from the confirmation, not run again (finalists, interleaved with the winner there): "
        "decoder=pil"
    )

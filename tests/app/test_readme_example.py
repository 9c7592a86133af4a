"""The documented project of the user's own (its Dataset, collate, model and loss: the page
docs/own-dataset.md, which the README points to), written out as its fenced blocks say and
run as a user runs it: the command line, the training script with best.yaml's
loader_kwargs, and ``autotune.tune`` from a script."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import QUICK_WINDOW, run_cli, run_python

PAGE = Path(__file__).resolve().parents[2] / "docs" / "own-dataset.md"
SECTION = "# Your own Dataset, collate, model and loss\n"
# small and quick, as the tests' other studies are
QUICK = [
    *QUICK_WINDOW,
    "study.n_trials=3",  # the documented commands run through, not a search worth its figures
    "study.n_startup_trials=2",
    "study.confirm_top_k=1",
    "study.confirm_rounds=1",
    "study.worth_budget=0",  # the worth table: the tests' quick study has it
]


SMALL = [*QUICK, "dataset.kwargs.count=64"]


def _section() -> str:
    """The page from its title to its first ``## `` heading (or its end)."""
    text = PAGE.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start)
    return text[start : end if end >= 0 else len(text)]


def _write_project(folder: Path) -> None:
    """Every block fenced as ```LANG PATH is a file of the project."""
    for path, body in re.findall(r"```\w+ (\S+)\n(.*?)```", _section(), flags=re.S):
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(body)


def _commands() -> list[list[str]]:
    """The overrides of each ``python -m autotune`` command of the page's bash blocks."""
    blocks = re.findall(r"```bash\n(python -m autotune .*?)```", _section(), flags=re.S)
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [shlex.split(line)[3:] for line in lines]


def _command(mode: str = "") -> list[str]:
    """The page's command of ``mode=MODE`` (""): the tune."""
    found = [
        c
        for c in _commands()
        if (f"mode={mode}" in c if mode else not any("mode=" in a for a in c))
    ]
    assert len(found) == 1, _commands()
    return found[0]


def _python(script: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return run_python([script], folder)


def test_the_readme_project_s_files_and_command_are_there() -> None:
    assert _command()[:2] == ["dataset=clips", "model._target_=spectro.SpecNet"]
    for mode in ("verify", "diagnose"):  # the same overrides, and the mode
        assert _command(mode) == [*_command(), f"mode={mode}"]
    files = re.findall(r"```\w+ (\S+)\n", _section())
    assert files == ["spectro.py", "conf/dataset/clips.yaml", "train.py", "tune_clips.py"]


@pytest.mark.slow
def test_the_readme_project_is_tuned_and_its_result_trains(tmp_path) -> None:
    _write_project(tmp_path)
    result = run_cli([*_command(), *SMALL], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    best = yaml.safe_load((tmp_path / "studies" / "clips-specnet" / "best.yaml").read_text())
    assert best["workload"]["dataset_target"]["_target_"] == "spectro.Clips"
    assert best["loader_kwargs"]["measured"]["speedup_vs_baseline"] >= 1.0
    # the training script, with best.yaml's kwargs, over the study's 64 clips (not 512)
    train = tmp_path / "train.py"
    assert "spectro.Clips()" in train.read_text()
    train.write_text(train.read_text().replace("spectro.Clips()", "spectro.Clips(count=64)"))
    trained = _python("train.py", tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    # the claim checked in real epochs on the same study (mode=diagnose of a Dataset of the
    # user's own is run end to end by tests/app/test_own_dataset.py)
    verify = [*_command("verify"), *SMALL, "verify.rounds=1", "verify.epochs=1"]
    verified = run_cli(verify, tmp_path)
    assert verified.returncode == 0, verified.stderr[-3000:]
    assert re.search(r"^- loader_kwargs: (holds|differs): best.yaml claims", verified.stdout, re.M)

    script = tmp_path / "tune_clips.py"
    # the script's way in, not the figures (the command's study above has them): the least
    # study, its baseline alone, figures from the search
    least = [*QUICK, "study.n_startup_trials=1", "study.confirm_top_k=0"]
    quick = f'dataset_kwargs={{"count": 64}}, study_name="clips-api", overrides={least!r},'
    script.write_text(script.read_text().replace("n_trials=20,", f"n_trials=1, {quick}"))
    tuned = _python("tune_clips.py", tmp_path)
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    assert "x the baseline: {" in tuned.stdout  # the DataLoader arguments, in any order
    assert "'batch_size': 32" in tuned.stdout
    assert (tmp_path / "studies" / "clips-api" / "best.yaml").is_file()

"""Faults through the real CLI: bad files in the data, Ctrl-C mid-study, a second run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import psutil
import pytest
import yaml
from helpers import QUICK, interrupt_cli, run_cli, zygote_pid
from PIL import Image

from autotune.runtime.lock import host_lock
from autotune.tuner import store, study_trials


def _folder_with_bad_files(root: Path) -> Path:
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        for i in range(10):
            Image.new("RGB", (96, 72), (20 * i, 60, 120)).save(root / cls / f"{i}.jpg", quality=90)
    good = (root / "a" / "0.jpg").read_bytes()
    (root / "a" / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (root / "b" / "notes.jpg").write_text("this is not an image")
    (root / "b" / "empty.png").write_bytes(b"")
    (root / "b" / "README.txt").write_text("ignored: not an image extension")
    # CMYK and grayscale JPEGs are fine images: every decoder must take them
    Image.new("CMYK", (96, 72), (10, 200, 30, 0)).save(root / "a" / "cmyk.jpg")
    Image.new("L", (96, 72), 128).save(root / "b" / "gray.jpg")
    return root


@pytest.mark.slow
def test_own_image_folder_with_bad_files_and_a_torchvision_model(tmp_path):
    """A folder of the user's own: its bad files skipped, counted and named; the model one
    of torchvision's (mobilenet_v3_small: resnet18's step takes 3.5 times as long here)."""
    data = _folder_with_bad_files(tmp_path / "data")
    args = [
        *QUICK,
        "dataset=mine",
        f"dataset.root={data}",
        "model=mobilenet_v3_small",
        "study.n_trials=3",
        "recipe.crop_size=32",
        "batch_size=4",
        "search_space.knobs.decoder.choices=[pil,opencv,torchvision,pil_reduced]",
    ]
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "skipped 3 unreadable files" in result.stdout
    best = yaml.safe_load(
        (tmp_path / "studies" / "mine-mobilenet_v3_small" / "best.yaml").read_text()
    )
    assert best["workload"]["images"] == 22 and best["workload"]["skipped_files"] == 3
    assert best["workload"]["model"] == "mobilenet_v3_small"
    reasons = "\n".join(best["workload"]["skipped"])
    assert "truncated.jpg: truncated JPEG" in reasons
    assert "notes.jpg: not an image" in reasons and "empty.png: empty file" in reasons


@pytest.mark.slow
def test_ctrl_c_keeps_the_study_and_a_rerun_resumes(tmp_path):
    # no confirmation: what is checked is which trials run
    args = [*QUICK, "study.n_trials=3", "study.confirm_top_k=0", "study.name=interrupted"]
    # wait until two trials are done, then press Ctrl-C
    code, before, after = interrupt_cli(args, tmp_path, after="[ 2/3]")
    assert code == 130, before + after
    assert "interrupted" in after
    storage = f"sqlite:///{tmp_path}/studies/autotune.db"
    study = optuna.load_study(study_name="interrupted", storage=storage)
    states = [t.state for t in study.trials]
    assert optuna.trial.TrialState.RUNNING not in states
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    assert sum(state in finished for state in states) >= 2  # a clear loser is pruned
    assert optuna.trial.TrialState.COMPLETE in states
    assert (tmp_path / "studies" / "interrupted" / "best.yaml").exists()  # best so far
    assert not [p for p in psutil_children() if p.status() != "zombie"]  # the CLI is gone

    again = run_cli(args, tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    study = optuna.load_study(study_name="interrupted", storage=storage)
    # resumed up to n_trials, not restarted; a trial the stop interrupted cost nothing
    measured = [t for t in study_trials.measured(study.trials) if not store.is_interrupted(t)]
    assert len(measured) == 3
    assert study.trials[0].params["num_workers"] == 0  # the baseline, from the first run


def psutil_children():
    """This test's descendants, less the fork server an earlier in-process trial may have
    started and the zygote an earlier command started (both outlive them by design)."""
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(proc.cmdline())
        except psutil.NoSuchProcess:
            continue
        ours = "forkserver" in cmdline or "resource_tracker" in cmdline
        if not ours and proc.pid != zygote_pid():
            out.append(proc)
    return out


@pytest.mark.slow
def test_a_second_run_waits_for_the_host_lock(tmp_path, caplog):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path\n"
            "from autotune.runtime.lock import host_lock\n"
            f"with host_lock(Path({str(tmp_path)!r})):\n"
            "    print('held', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(TimeoutError, match="autotune pid"), host_lock(tmp_path, wait_s=1):
            pass
        assert "is measuring on this host" in caplog.text
    finally:
        holder.kill()
        holder.wait()
    with host_lock(tmp_path, wait_s=5):  # released when its holder died
        pass

"""Storage that makes reads wait: a real FUSE mount of a folder whose opens and reads are
answered late, concurrently for concurrent readers, with the folder's bytes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from helpers import QUICK, run_cli

from autotune.app.slow_storage import mounted, unavailable_reason
from autotune.pipeline import sources

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"FUSE: {unavailable_reason()}"),
]


@pytest.fixture(scope="module")
def images() -> sources.Source:
    return sources.synthetic(count=24, num_classes=3)


def _read(files: list[Path]) -> float:
    started = time.perf_counter()
    for f in files:
        f.read_bytes()
    return time.perf_counter() - started


def test_reads_wait_each_reader_on_its_own_and_return_the_same_bytes(images):
    with mounted(images.root, latency_ms=150) as mount:
        files = sorted(mount.rglob("*.jpg"))
        assert len(files) == len(images)
        for f in files[:3]:
            assert f.read_bytes() == (images.root / f.relative_to(mount)).read_bytes()
        # one file: an open and a read, each answered after the latency
        assert _read(files[3:4]) >= 0.3
        # eight readers at once wait side by side, as on a networked store
        readers = [threading.Thread(target=_read, args=([f],)) for f in files[4:12]]
        started = time.perf_counter()
        for r in readers:
            r.start()
        for r in readers:
            r.join()
        assert time.perf_counter() - started < 8 * 0.3 / 2
    assert not mount.exists()  # unmounted and removed


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args in ([], [str(tmp_path / "missing"), str(tmp_path)], [str(tmp_path)] * 2 + ["x=1"]):
        done = subprocess.run(
            [sys.executable, "-m", "autotune.slow_storage", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2
        assert len(done.stderr.strip().splitlines()) == 1


def test_a_study_on_storage_that_waits_searches_workers_beyond_the_cpus(images, tmp_path):
    with mounted(images.root, latency_ms=10) as mount:
        args = [
            *QUICK,
            "search_space=default",
            "study.n_trials=3",
            "study.confirm_top_k=0",  # the space is what is checked: no confirmation
            "study.worth_budget=0",
            "dataset=imagefolder",
            f"dataset.root={mount}",
            "dataset.name=slow",
        ]
        done = run_cli(args, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    cpus = len(os.sched_getaffinity(0))
    assert f"beyond the {cpus} usable CPUs" in done.stdout
    study = optuna.load_study(
        study_name="slow-tiny", storage=f"sqlite:///{tmp_path}/studies/autotune.db"
    )
    highs = {t.distributions["num_workers"].high for t in study.trials if t.distributions}
    assert highs and min(highs) > cpus

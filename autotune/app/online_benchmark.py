"""The benchmark's ``online`` scenario: does tuning inside the run pay, in one run?

The PyTorch tutorial's training script (``app.tutorial_train``) over the scenario's image
folder, whole runs in fresh processes, interleaved over ``--rounds`` rounds (drift on a shared
machine hits every arm alike):

1. **untouched**: ``DataLoader(dataset, batch_size, shuffle=True)``;
2. **online, first run**: the same line as ``autotune.DataLoader``, on an empty storage (a
   new one each round): it explores while it trains;
3. **online, second run**: the same again on the first run's storage: it starts at what the
   first run kept;
4. **offline pick**: ``DataLoader(dataset, shuffle=True, **loader_kwargs(best.yaml))`` of an
   offline study (``python -m autotune``, run once before the rounds, its wall time counted
   against it).
"""

from __future__ import annotations

import datetime
import json
import logging
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy

from autotune.errors import UsageError
from autotune.pipeline import best_file
from autotune.report.online_results import ARMS, OFFLINE, UNTOUCHED, results
from autotune.runtime.failures import first_line
from autotune.runtime.lock import host_lock
from autotune.session import Session
from autotune.tuner.result import StudyResult
from autotune.tuner.storage import sqlite_file

log = logging.getLogger("autotune.benchmark")


@dataclass(frozen=True)
class Script:
    """How each run of the tutorial script is started."""

    root: Path
    epochs: int
    batch_size: int
    crop: int
    best: Path

    def argv(self, arm: str, storage: str) -> list[str]:
        loader = {UNTOUCHED: "torch", OFFLINE: "loader_kwargs"}.get(arm, "autotune")
        return [
            sys.executable,
            "-m",
            "autotune.app.tutorial_train",
            f"--root={self.root}",
            f"--loader={loader}",
            f"--epochs={self.epochs}",
            f"--batch-size={self.batch_size}",
            f"--crop={self.crop}",
            f"--best={self.best}",
            f"--storage={storage}",
        ]


def _run(argv: list[str], log_path: Path) -> tuple[str, float]:
    """Runs ``argv`` to its end, its stderr to ``log_path``; (its stdout, its wall seconds).
    A stop (Ctrl-C, SIGTERM) is passed on to it, and it is waited for."""
    started = time.monotonic()
    with log_path.open("a") as stderr:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            out, _ = process.communicate()
        except BaseException:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
            raise
    if process.returncode != 0:
        raise UsageError(f"{' '.join(argv[2:4])} exited {process.returncode}: see {log_path}")
    return out, time.monotonic() - started


def _offline_study(overrides: list[str], folder: Path) -> tuple[Path, float]:
    """``python -m autotune`` as a user runs it, timed whole; its best.yaml."""
    name = "offline-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    studies = folder / "studies"
    argv = [
        sys.executable,
        "-m",
        "autotune",
        *overrides,
        f"study.name={name}",
        f"studies_dir={studies}",
        "study.warm_start=false",  # what a first study costs, as the online run's first run
        "quiet=true",
    ]
    log.info("the offline study: %s", " ".join(argv[1:]))
    _, seconds = _run(argv, folder / "offline-study.log")
    return studies / name / "best.yaml", seconds


def _earlier_offline_study(best: Path) -> tuple[Path, float]:
    """An offline study run before, of the same job: its best.yaml, and the time its phases
    took as it recorded them (references, search, confirmation, worth)."""
    section = best_file.read(best).study
    if not section.name or not section.storage:
        raise UsageError(f"{best} does not say which study wrote it: pass one that tune wrote")
    unread = f"{best} names study {section.name} in {section.storage}, which cannot be read"
    database = sqlite_file(section.storage)
    if database is not None and not database.is_file():  # load_study would make an empty one
        raise UsageError(f"{unread} (no such file): run from the folder the study ran in")
    try:
        study = optuna.load_study(study_name=section.name, storage=section.storage)
    except (KeyError, sqlalchemy.exc.SQLAlchemyError) as exc:
        raise UsageError(f"{unread} ({first_line(exc)})") from exc
    spent = StudyResult.load(study, storage=section.storage).time_split
    if not spent:
        raise UsageError(f"the study of {best} recorded no time split: run the offline study here")
    return best, sum(spent.values())


def measure(
    session: Session,
    overrides: list[str],
    folder: Path,
    rounds: int,
    epochs: int,
    offline_best: Path | None = None,
) -> dict[str, Any]:
    """The offline study (or ``offline_best``'s, run before), then the rounds of the four
    arms; what results.json holds."""
    if offline_best is None:
        best, study_s = _offline_study(overrides, folder)
    else:
        best, study_s = _earlier_offline_study(offline_best)
    log.info("offline study: %.0f s", study_s)
    script = Script(
        root=session.source.root,
        epochs=epochs,
        batch_size=session.conf.batch_size,
        crop=session.conf.recipe.crop_size,
        best=best,
    )
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    # two measuring runs on one host would disturb both (the study above took it itself)
    with host_lock(Path(session.conf.studies_dir)):
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        for round_index in range(rounds):
            # each round's first run on a storage of its own, empty (and its note with it)
            fresh = folder / f"online-{stamp}-round-{round_index}.db"
            storage = f"sqlite:///{fresh.resolve()}"
            for arm in ARMS:
                out, wall_s = _run(script.argv(arm, storage), folder / "runs.log")
                run = {**json.loads(out.strip().splitlines()[-1]), "wall_s": round(wall_s, 2)}
                runs[arm].append(run)
                log.info(
                    "round %d/%d  %-19s %6.1f s%s",
                    round_index + 1,
                    rounds,
                    arm,
                    wall_s,
                    f"  kept {run['kept']}, {run['tried']} tried" if "kept" in run else "",
                )
    return results(runs, study_s=study_s, epochs=epochs, rounds=rounds)

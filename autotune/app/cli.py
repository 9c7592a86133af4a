"""``python -m autotune [overrides]``: compose the config, run the mode, map errors to exit codes.

Exit codes: 0 done; 1 no trial finished; 2 bad input (one line on stderr, nothing run or lost);
130 interrupted by Ctrl-C, 143 by SIGTERM (the study is saved: run it again to resume).

The config is composed with Hydra's compose API rather than ``@hydra.main``: Hydra's runner
reports a bad override as a multi-line trace with exit code 1 and creates output folders; here
a bad override is one line and exit code 2, and only ``studies/`` is written.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from importlib import resources
from pathlib import Path

import optuna
from omegaconf import OmegaConf

from autotune.app.composition import compose, to_config
from autotune.app.exit_codes import exit_code
from autotune.diagnose.measure import pipeline_to_diagnose
from autotune.diagnose.measure import run as run_diagnosis
from autotune.pipeline.best_file import WorkloadSection
from autotune.pipeline.user_data import UserData
from autotune.report import dashboard, markdown, summary
from autotune.report.export import export, export_published
from autotune.runtime.lock import host_lock
from autotune.runtime.stop import exit_status
from autotune.schema import AutotuneConfig
from autotune.session import Session
from autotune.session.session import prepared_root
from autotune.tuner.result import StudyResult
from autotune.tuner.tune import tune
from autotune.verify.command import run as run_verify

log = logging.getLogger("autotune")

USAGE = """\
usage: python -m autotune [key=value ...]

Tunes the input pipeline of a training job on this machine and writes
studies/<study.name>/best.yaml. Config groups (pick one with group=option):
{groups}
Common overrides: study.n_trials=N study.timeout=SECONDS study.name=NAME
  study.storage=URL dataset.root=PATH recipe.crop_size=N batch_size=N device=auto|cpu|cuda
  --cfg  print the composed config and exit
"""


def _groups() -> str:
    conf = resources.files("autotune.conf")
    lines = []
    for group in sorted(
        p.name for p in conf.iterdir() if p.is_dir() and not p.name.startswith("_")
    ):
        options = sorted(
            p.name[:-5] for p in conf.joinpath(group).iterdir() if p.name.endswith(".yaml")
        )
        lines.append(f"  {group:<13} {', '.join(options)}")
    return "\n".join(lines)


def run(conf: AutotuneConfig) -> int:
    """Runs ``conf.mode``; returns the exit code."""
    if conf.mode == "report":  # from the storage alone: no session to build
        return markdown.rebuild(conf)
    if conf.mode == "diagnose":
        pipeline = pipeline_to_diagnose(conf)
        conf = dataclasses.replace(conf, batch_size=pipeline.batch_size)
        return run_diagnosis(Session.build(conf), pipeline)
    with progress_silenced(conf.quiet):
        if conf.mode == "verify":  # takes the host lock as tune does: it measures
            return run_verify(Session.build(conf))
        return run_tune(Session.build(conf))


@contextmanager
def progress_silenced(quiet: bool) -> Iterator[None]:
    """``quiet=true``: results and warnings only; the per-trial lines are INFO."""
    logger = logging.getLogger("autotune")
    level = logger.level
    if quiet:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def _describe(session: Session) -> None:
    conf, source = session.conf, session.source
    for note in session.space.notes:
        log.info("search space: %s", note)
    if session.device == "cpu":
        log.info("device cpu: pin_memory and other CUDA-only knobs are not searched")
    what = (
        f"{len(source)} samples of {source.describe()}"
        if isinstance(source, UserData)
        else f"{len(source)} images in {len(source.classes)} classes"
    )
    log.info(
        "study %s: %s, model %s, %d usable CPUs, device %s",
        conf.study.name,
        what,
        conf.model.name,
        session.facts.usable_cpus,
        session.device,
    )


def run_tune(session: Session) -> int:
    """``mode=tune``: the study, then best.yaml, report.md and the summary printed."""
    result, best = tune_and_export(session)
    folder = Path(session.conf.studies_dir) / result.study_name
    if best is None:
        _say(f"no trial of study {result.study_name} finished: nothing to export")
        _say(summary.failures_text(result))
        _say(f"report:      {markdown.write_report(result.storage, result.study_name, folder)}")
        return exit_status() if result.interrupted else 1
    _say(summary.table(result))
    if result.failures:
        _say(summary.failures_text(result))
    if session.source.skipped:
        _say(f"skipped {len(session.source.skipped)} unreadable files (listed in {best})")
    _say(f"best config: {best}")
    _say(f"report:      {folder / 'report.md'}")
    _say(f"dashboard:   {dashboard.command(result.storage)}")
    return exit_status() if result.interrupted else 0


def tune_and_export(session: Session) -> tuple[StudyResult, Path | None]:
    """The study (under the host lock), then best.yaml and report.md written: the result
    and best.yaml's path (None when no trial finished)."""
    _describe(session)
    with host_lock(Path(session.conf.studies_dir)):
        return tune(session, export=functools.partial(_export, session))


def _export(session: Session, result: StudyResult) -> Path | None:
    """best.yaml and report.md into ``studies/<study>/``; None when no trial finished."""
    if result.best is None:
        return None
    conf, source = session.conf, session.source
    folder = Path(conf.studies_dir) / result.study_name
    if result.published is not None:  # another host sharing the study confirmed it
        return export_published(result, folder)
    own = isinstance(source, UserData)  # its names, never its contents
    workload = WorkloadSection(
        dataset=conf.dataset.name,
        model=conf.model.name,
        recipe=asdict(conf.recipe),
        device=session.device,
        ranks=session.ranks,
        images=len(source),
        skipped_files=len(source.skipped),
        skipped=[f"{path}: {reason}" for path, reason in source.skipped[:20]],
        prepared_dir=str(prepared_root(conf)),
        epochs=conf.study.epochs,
        dataset_target=(
            {"_target_": source.target, "kwargs": source.kwargs, "collate_fn": source.collate_fn}
            if own
            else None
        ),
    )
    return export(
        result, session.facts, workload, folder, source_fingerprint=session.source_fingerprint
    )


def _say(text: str) -> None:
    print(text, flush=True)  # results are output, flushed beside the progress log


def start_logging() -> None:
    """Progress is output (stdout); stderr carries only what went wrong."""
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stdout,
    )
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # our progress lines say more


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print(USAGE.format(groups=_groups()))
        return 0
    print_cfg = "--cfg" in args
    overrides = [a for a in args if a != "--cfg"]
    start_logging()

    def body() -> int:
        cfg = compose(overrides)
        if print_cfg:
            print(OmegaConf.to_yaml(cfg, resolve=True))
            return 0
        return run(to_config(cfg))

    return exit_code("autotune", body)

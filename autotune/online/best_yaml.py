"""best.yaml of a run that explored: the setting ``autotune.DataLoader`` kept and the rates it
read, written where the command writes a study's (``<the SQLite storage's folder>/<study>/``,
so ``studies/`` by default; ``studies/`` under the working folder for a server's storage).

The file is read as an offline study's is (``pipeline.best_file``): ``autotune.loader_kwargs``
hands the kept setting to torch's own DataLoader, for a run that should not tune (the batches'
own arguments, ``drop_last`` and ``in_order``, stay the caller's). Its figures
are readings of the run, each setting read once over spans of the loop (twice, pooled, where
one was too close to call: its second look); ``study.kept_by``
says so, and ``mode=verify``, which repeats an offline study's claims in real epochs of its
own job, refuses the file.
"""

from __future__ import annotations

import datetime
import logging
from pathlib import Path

import optuna
import torch

from autotune.machine import MachineFacts
from autotune.online.explorer import Explorer
from autotune.online.job_record import JobRecord
from autotune.online.reading import Reading
from autotune.online.record import not_recorded
from autotune.online.space import trains_on_cuda
from autotune.pipeline import best_file
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.loader_job import LoaderJob
from autotune.tuner import storage as study_storage
from autotune.tuner.result import trial_counts

log = logging.getLogger("autotune.online.loader")

KEPT_BY = "autotune.DataLoader"
HEADER = (
    "# autotune.DataLoader: the DataLoader settings it kept on your training run, read there.\n"
    "# A later run of the same job starts at them by itself. For torch's own DataLoader:\n"
    "#   DataLoader(dataset, shuffle=True, **autotune.loader_kwargs(this_file))\n"
    "# (your own sampler or shuffle, drop_last and in_order, as the run had them).\n"
    "# Settings per rank: `ranks` processes per node read them together.\n"
)


def folder(storage: str, study: str) -> Path:
    """Where the run's best.yaml goes: the study's folder beside an SQLite storage, else under
    ``studies/``."""
    database = study_storage.sqlite_file(storage)
    on_disk = database is not None and not study_storage.in_memory(storage)
    return (database.parent if on_disk else Path("studies")) / study  # type: ignore[union-attr]


def kept_on_run(
    loader: torch.utils.data.DataLoader,
    explorer: Explorer,
    job: JobRecord,
    *,
    started_from: str,
    ranks: int,
    facts: MachineFacts,
) -> Path | None:
    """``write`` for ``loader``'s run (``ranks`` of them on this node): the setting the
    ``explorer`` kept, where it is the fastest it measured, in ``job``'s study; its path
    logged; one warning where it cannot be written, and the training goes on. None written
    for a loader batched by your ``batch_sampler``, or not at all (``batch_size=None``):
    its kwargs would batch."""
    kept, study = explorer.best, job.study
    if study is None or kept is None or kept.settings != explorer.current:
        return None
    if loader.batch_size is None:
        why = "batch_size=None" if loader.batch_sampler is None else "your batch_sampler batches"
        log.info("autotune.DataLoader: kept %s (no best.yaml: %s)", kept.settings.short(), why)
        return None
    what = LoaderJob.of(loader)
    length = f" of {what.length} samples" if what.length is not None else ""
    device = "cuda" if trains_on_cuda() else "cpu"
    workload = best_file.WorkloadSection(
        dataset=f"{what.dataset}{length}", device=device, ranks=ranks
    )
    try:
        path = write(
            study, job.job.storage, kept=kept, start=explorer.start_reading,
            started_from=started_from, picked=explorer.proposals.trial_of(kept.settings),
            workload=workload, facts=facts,
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the training goes on, its best.yaml unwritten
        not_recorded("best.yaml", exc)
        return None
    log.info("autotune.DataLoader: kept %s; %s", kept.settings.short(), path)
    return path


def write(
    study: optuna.Study,
    storage: str,
    *,
    kept: Reading,
    start: Reading | None,
    started_from: str,
    picked: int | None,
    workload: best_file.WorkloadSection,
    facts: MachineFacts,
) -> Path:
    """Writes the study's best.yaml: ``kept``'s settings and rate beside ``start``'s, the
    reading of the setting the run started at (``started_from`` says where that came from),
    ``picked``: the kept setting's trial. Returns its path."""
    figures = dict(
        samples_per_s=round(kept.samples_per_s, 1),
        speedup_vs_baseline=_speedup(kept, start),
        picked=f"trial {picked}" if picked is not None else None,
    )
    path = folder(storage, study.study_name) / "best.yaml"
    if path.exists() and best_file.read(path).study.kept_by != KEPT_BY:
        raise FileExistsError(f"{path} is the study's of python -m autotune: name another study=")
    path.parent.mkdir(parents=True, exist_ok=True)
    best = best_file.BestFile(
        config=kept.settings,
        measured=best_file.PipelineFigures(
            **figures,
            baseline_samples_per_s=round(start.samples_per_s, 1) if start else None,
            notes=_notes(kept, start),
        ),
        as_is=kept.settings,
        as_is_measured=best_file.Figures(**figures),
        baseline=_baseline(start.settings if start else None, started_from),
        ranks=workload.ranks,
        workload=workload,
        machine=best_file.MachineSection.of(facts),
        study=best_file.StudySection(
            name=study.study_name,
            storage=study_storage.shown(study_storage.located(storage)),
            trials=trial_counts(study.get_trials(deepcopy=False)),
            written=datetime.datetime.now().isoformat(timespec="seconds"),
            kept_by=KEPT_BY,
        ),
    )
    best_file.write(path, best, header=HEADER)
    return path


def _speedup(kept: Reading, start: Reading | None) -> float | None:
    if start is None or start.samples_per_s <= 0:
        return None
    return round(kept.samples_per_s / start.samples_per_s, 2)


def _baseline(start: PipelineConfig | None, started_from: str) -> str:
    if start is None:
        return f"the setting the run started at ({started_from}), not read"
    return f"the setting the run started at ({started_from}): {start.short()}, read on the run"


def _notes(kept: Reading, start: Reading | None) -> list[str]:
    """What the figures are, in words."""
    notes = [
        "read by autotune.DataLoader on the training run itself: samples/s of the loop (your "
        "step inside) over spans between epochs' ends, after a warm-up; each setting read "
        "once, on its share of the run (twice, pooled, where the first was too close to "
        "call), with no confirmation rounds"
    ]
    waits = f"the loop waited for data {kept.data_wait:.0%} of its time with the kept setting"
    if start is not None and start.settings != kept.settings:
        waits += f", {start.data_wait:.0%} with the one it started at"
    return [*notes, waits]

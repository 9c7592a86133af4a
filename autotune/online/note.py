"""A note, on this host, of the setting a job's run kept: the next run reads it before its first
batch and starts there at once.

The study's storage is where the kept setting is recorded (``record``); opening it costs about
a second the first time in a process (Optuna's storage imports SQLAlchemy and Alembic), which
would land in the first epoch of a run that has nothing left to explore (opened on a thread
beside the training, it still made that epoch about a second longer on a 2-core machine). With
a note, that run starts at the kept setting and opens the storage when it ends
(the loader collected, or the process exiting), outside the training's time: where the storage
kept another setting, the note follows it, and where it kept none (the study was deleted), the
note is dropped; the next run starts from there. The note sits beside an SQLite storage
(``.online-kept/<file>/`` in its folder: deleting the folder deletes both), else under
autotune's cache folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from pathlib import Path
from typing import NamedTuple

from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.synthetic_images import default_cache_dir
from autotune.tuner.storage import in_memory, sqlite_file

log = logging.getLogger("autotune.online.loader")

FOLDER = ".online-kept"


class Kept(NamedTuple):
    """A setting a run kept, and the samples/s it was kept at (None: not measured on a run,
    such as an offline study's pick)."""

    settings: PipelineConfig
    samples_per_s: float | None = None


def rate_of(value: object) -> float | None:
    """A kept rate as read back (a note's, a study's): a finite samples/s above 0; anything
    else (a newer autotune's, a hand-edited ``inf``) is none, and the setting still stands."""
    try:
        rate = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return rate if 0 < rate < math.inf else None


def path(storage: str, name: str) -> Path:
    """Where the note of study ``name`` in ``storage`` is kept on this host."""
    database = sqlite_file(storage)
    if database is not None:  # by the file's name: one folder may hold several
        base = database.parent / FOLDER / database.name
    else:  # a server's storage: this host's notes of it, apart from any other's
        base = default_cache_dir() / FOLDER / hashlib.sha256(storage.encode()).hexdigest()[:16]
    return base / f"{name}.json"


def read(storage: str, name: str, fingerprint: str) -> Kept | None:
    """The setting noted for this job; None where there is no note, or one of another job
    (a study name given by hand, reused for another job) or unreadable, or the storage is
    in memory (what it kept ended with its process: no note of it is written or read)."""
    if in_memory(storage):
        return None
    try:
        found = json.loads(path(storage, name).read_text())
        if found["fingerprint"] != fingerprint:
            return None
        return Kept(PipelineConfig.from_dict(found["kept"]), rate_of(found.get("samples_per_s")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write(storage: str, name: str, fingerprint: str, kept: Kept) -> None:
    """Notes the kept setting (a note that cannot be written is no note: the next run reads
    the storage instead)."""
    if in_memory(storage):
        return
    where = path(storage, name)
    found = {"fingerprint": fingerprint, "kept": kept.settings.to_dict()}
    text = json.dumps({**found, "samples_per_s": kept.samples_per_s}, indent=1)
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        partial = where.with_suffix(".partial")
        partial.write_text(text)
        partial.replace(where)  # whole or not at all: a run reading it meanwhile
    except OSError as exc:
        log.debug("autotune.DataLoader: no note of the kept setting at %s (%s)", where, exc)


def forget(storage: str, name: str) -> None:
    """Removes a note the storage no longer agrees with."""
    path(storage, name).unlink(missing_ok=True)

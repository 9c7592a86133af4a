"""What a study's figures depend on, as short digests: the whole study's (a study resumed must
match it) and its job's (studies of one job, however they search, can start from each other's
picks: ``tuner.warm_start``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

from autotune.schema import AutotuneConfig


def of_study(conf: AutotuneConfig, job: dict[str, Any], space: str) -> str:
    """The job (``job_parts``), and how the study searches it: its space, window and seed."""
    return _digest({**job, "space": space, "window": asdict(conf.window), "seed": conf.seed})


def of_job(job: dict[str, Any]) -> str:
    return _digest(job)


def job_parts(conf: AutotuneConfig, source: str, device: str, ranks: int) -> dict[str, Any]:
    """The job alone: its data (``source``: the data's own fingerprint), model, step, batch
    size, device and ranks."""
    parts: dict[str, Any] = {
        "source": source,
        "device": device,
        "model": asdict(conf.model),
        "recipe": asdict(conf.recipe),
        "batch_size": conf.batch_size,
        "optimizer": asdict(conf.optimizer),
        "precision": conf.precision,
        "step": asdict(conf.step),
        "compile": conf.compile,
    }
    if ranks > 1:  # one rank's studies keep the fingerprint they had
        parts["ranks"] = ranks
    return parts


def _digest(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]

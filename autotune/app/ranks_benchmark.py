"""The benchmark's ``ranks`` scenario: settings tuned per rank, with every rank running,
against the settings people copy to their ranks.

One run measures, on this machine and in this order:

1. the tuner at ``ranks=1``: one process, what a single-GPU run (or a tutorial) tunes;
2. the tuner at ``ranks=N``: every trial runs the N ranks at once (DDP, gloo on the CPU);
3. the **head-to-head at N ranks**, interleaved for ``--rounds`` rounds: the ranks=1 pick
   copied to every rank, the ranks=N pick, PyTorch's defaults as ``mp.spawn`` leaves them (no
   workers, torch's threads = every usable CPU in every rank), torchrun's defaults (no
   workers, ``OMP_NUM_THREADS=1``) and Lightning's suggestion under torchrun
   (``max(1, cpus // N - 1)`` workers, 1 thread).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from pathlib import Path
from typing import Any

from autotune.errors import UsageError
from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.report.benchmark_results import ranks_results
from autotune.runtime.lock import host_lock
from autotune.runtime.stop import stoppable
from autotune.session import Session
from autotune.session.session import Run
from autotune.tuner.confirm import Finalist, confirm
from autotune.tuner.tune import tune

log = logging.getLogger("autotune.benchmark")


def contenders(session: Session) -> dict[str, PipelineConfig]:
    """The hand-set per-rank configs of a node of ``session.ranks`` ranks."""
    batch_size = dict(session.space.defaults)["batch_size"]
    cpus, ranks = session.facts.usable_cpus, session.ranks
    plain = {"batch_size": batch_size, "decoder": AS_IS}
    return {
        "defaults": PipelineConfig(**plain, main_threads=cpus),
        "torchrun defaults": PipelineConfig(**plain, main_threads=1),
        "lightning": PipelineConfig(
            **plain, num_workers=max(1, cpus // ranks - 1), prefetch_factor=2, main_threads=1
        ),
    }


def _tuned(session: Session, name: str, storage: str) -> PipelineConfig:
    study = dataclasses.replace(session.conf.study, name=name, storage=storage, warm_start=False)
    result, _ = tune(session.with_conf(dataclasses.replace(session.conf, study=study)))
    if result.interrupted:
        raise KeyboardInterrupt
    if result.best is None:
        raise UsageError(f"no trial of {name} finished: see its failures in the study")
    return result.best


def measure(
    alone: Session, together: Session, folder: Path, rounds: int, run_one: Run
) -> dict[str, Any]:
    """The two studies and the head-to-head at ``together.ranks`` ranks; what results.json
    holds."""
    storage = f"sqlite:///{(folder / 'benchmark.db').resolve()}"
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    with host_lock(Path(alone.conf.studies_dir)), stoppable(run_one) as (stop, run_one):
        copied = _tuned(alone, f"ranks-1-{stamp}", storage)
        per_rank = _tuned(together, f"ranks-{together.ranks}-{stamp}", storage)
        picked: list[Finalist] = [
            ("ranks=1 pick, copied", None, copied),
            (f"ranks={together.ranks} pick", None, per_rank),
            *((name, None, c) for name, c in contenders(together).items()),
        ]
        log.info("head-to-head at %d ranks: %d rounds", together.ranks, rounds)
        confirmed = confirm(together, picked, rounds=rounds, run=run_one)
        if stop.is_set():
            raise KeyboardInterrupt
    return ranks_results(together, confirmed, rounds=rounds, storage=storage)

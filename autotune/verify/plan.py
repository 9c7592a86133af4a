"""The three arms of ``mode=verify`` and how big an epoch is.

Epochs run over every sample unless that would make verify take more than about five minutes
at the epoch rates best.yaml measured (the baseline's, ``loader_kwargs``' and the whole
pipeline's): then over a seeded subset that fits. ``verify.samples`` sets the size instead.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

from autotune.pipeline import best_file
from autotune.pipeline.best_file import BestFile
from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.runtime.job import EpochRun, TrialJob
from autotune.session import Session
from autotune.verify.checks import Checked

BUDGET_S = 300.0  # what verify may take in all, when it sizes the epochs itself
RUN_OVERHEAD_S = 5.0  # a fresh process, the model and the loader built, per run
MIN_BATCHES = 8  # the smallest epoch it sizes, in batches
FALLBACK_SAMPLES = 2048  # per epoch, when best.yaml has no rates to size it from
FALLBACK_RATE = 50.0  # samples/s assumed for the run timeout without a measured rate
TIMEOUT_MARGIN = 3.0  # a run may take this many times its estimate


@dataclass(frozen=True)
class Arm:
    name: str
    what: str  # what the user's script does, in one line of markdown
    config: PipelineConfig  # the loader settings it runs with
    job: TrialJob


@dataclass(frozen=True)
class Plan:
    arms: tuple[Arm, ...]
    rounds: int
    epochs: int
    samples: int  # per epoch, before a loader with drop_last drops the last partial batch
    dataset_samples: int
    timeout_s: float  # per run
    estimate_s: float | None  # the whole verify, from best.yaml's rates
    sizing: str  # how the epoch size was chosen, in words


def seconds_per_sample(best: BestFile) -> tuple[float, ...] | None:
    """Each arm's seconds per sample at best.yaml's measured epoch rates; None without a
    rate."""
    measured = best.measured
    baseline = measured.get("baseline_samples_per_s") or measured.get("samples_per_s")
    as_is = best.as_is_measured.get("samples_per_s") or baseline
    tuned = measured.get("samples_per_s") or baseline
    if not baseline or not as_is or not tuned:
        return None
    return (1 / baseline, 1 / as_is, 1 / tuned)


def estimate_s(samples: int, rounds: int, epochs: int, per_sample: float) -> float:
    """Seconds the whole verify takes (``per_sample``: the arms' seconds per sample, summed)."""
    return rounds * (3 * RUN_OVERHEAD_S + epochs * samples * per_sample)


def epoch_size(
    total: int, rounds: int, epochs: int, per_sample: float | None, batch_size: int
) -> tuple[int, str]:
    """Samples per epoch when ``verify.samples`` is not set, and why (``per_sample``: the
    arms' seconds per sample, summed)."""
    if per_sample is None:
        size = min(total, FALLBACK_SAMPLES)
        return size, f"best.yaml has no measured rates: at most {FALLBACK_SAMPLES} samples"
    budget = BUDGET_S - rounds * 3 * RUN_OVERHEAD_S
    fits = int(budget / (rounds * epochs * per_sample)) // batch_size * batch_size
    if fits >= total:
        return total, "all samples"
    size = min(total, max(fits, MIN_BATCHES * batch_size))
    all_s = estimate_s(total, rounds, epochs, per_sample)
    return size, (
        f"all {total} would take about {all_s / 60:.0f} min at best.yaml's rates: a seeded "
        f"subset for about {BUDGET_S / 60:.0f} min in all (verify.samples=N to choose)"
    )


def sample_paths(session: Session, samples: int) -> tuple[str, ...] | None:
    """A seeded subset of the source's samples, in the source's order; None for all."""
    source = session.source
    if samples >= len(source):
        return None
    picked = sorted(random.Random(session.conf.seed).sample(range(len(source)), samples))
    return tuple(source.paths[i] for i in picked)


def _arms(session: Session, checked: Checked, run: EpochRun) -> tuple[Arm, ...]:
    conf = session.conf
    baseline = PipelineConfig(batch_size=conf.batch_size, decoder=AS_IS)
    as_is = best_file.as_is_of(checked.best, checked.path)
    tuned = checked.best.config
    described = (
        (
            "baseline",
            "`ImageFolder(root, transform)`, "
            f"`DataLoader(ds, batch_size={conf.batch_size}, shuffle=True)`",
            baseline,
        ),
        ("loader_kwargs", "`DataLoader(ds, shuffle=True, **loader_kwargs(best))`", as_is),
        ("build_loader", "`build_loader(source, best)`", tuned),
    )
    return tuple(
        Arm(name, what, pipeline, _job(session, pipeline, dataclasses.replace(run, arm=name)))
        for name, what, pipeline in described
    )


def _job(session: Session, pipeline: PipelineConfig, run: EpochRun) -> TrialJob:
    return dataclasses.replace(session.job(pipeline, kind="epochs"), epochs=run)


def make_plan(session: Session, checked: Checked) -> Plan:
    """The arms, the epoch size and the per-run timeout."""
    conf, verify = session.conf, session.conf.verify
    total = len(session.source)
    per_arm = seconds_per_sample(checked.best)
    per_sample = sum(per_arm) if per_arm else None
    batch_size = max(conf.batch_size, checked.best.config.batch_size)
    if verify.samples is not None:
        samples, sizing = min(verify.samples, total), f"verify.samples={verify.samples}"
    else:
        samples, sizing = epoch_size(total, verify.rounds, verify.epochs, per_sample, batch_size)
    run = EpochRun("", verify.epochs, str(checked.path.resolve()), sample_paths(session, samples))
    slowest = max(per_arm) if per_arm else 1 / FALLBACK_RATE
    run_s = RUN_OVERHEAD_S + verify.epochs * samples * slowest
    return Plan(
        arms=_arms(session, checked, run),
        rounds=verify.rounds,
        epochs=verify.epochs,
        samples=samples,
        dataset_samples=total,
        timeout_s=max(conf.study.trial_timeout, math.ceil(TIMEOUT_MARGIN * run_s)),
        estimate_s=(
            estimate_s(samples, verify.rounds, verify.epochs, per_sample) if per_sample else None
        ),
        sizing=sizing,
    )

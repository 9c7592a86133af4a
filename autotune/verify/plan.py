"""The arms of ``mode=verify`` (three of a folder, two of the user's own Dataset) and how big
an epoch is.

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
from autotune.pipeline.sources import Source
from autotune.pipeline.user_data import UserData
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
    epochs: int  # timed per run, after its first
    samples: int  # per epoch, before a loader with drop_last drops the last partial batch
    dataset_samples: int
    timeout_s: float  # per run
    estimate_s: float | None  # the whole verify, from best.yaml's rates
    sizing: str  # how the epoch size was chosen, in words


def seconds_per_sample(best: BestFile, arms: tuple[str, ...]) -> tuple[float, ...] | None:
    """Each arm's seconds per sample at best.yaml's measured epoch rates; None without a
    rate."""
    measured = best.measured
    baseline = measured.baseline_samples_per_s or measured.samples_per_s
    rates = {
        "baseline": baseline,
        "loader_kwargs": best.as_is_measured.samples_per_s or baseline,
        "build_loader": measured.samples_per_s or baseline,
    }
    if not all(rates[arm] for arm in arms):
        return None
    return tuple(1 / rates[arm] for arm in arms)


def estimate_s(
    samples: int, rounds: int, epochs: int, per_sample: float, *, arms: int = 3
) -> float:
    """Seconds the whole verify takes (``per_sample``: the arms' seconds per sample, summed)."""
    return rounds * (arms * RUN_OVERHEAD_S + epochs * samples * per_sample)


def epoch_size(
    total: int,
    rounds: int,
    epochs: int,
    per_sample: float | None,
    batch_size: int,
    *,
    arms: int = 3,
) -> tuple[int, str]:
    """Samples per epoch when ``verify.samples`` is not set, and why (``per_sample``: the
    arms' seconds per sample, summed)."""
    if per_sample is None:
        size = min(total, FALLBACK_SAMPLES)
        return size, f"best.yaml has no measured rates: at most {FALLBACK_SAMPLES} samples"
    budget = BUDGET_S - rounds * arms * RUN_OVERHEAD_S
    fits = int(budget / (rounds * epochs * per_sample)) // batch_size * batch_size
    if fits >= total:
        return total, "all samples"
    size = min(total, max(fits, MIN_BATCHES * batch_size))
    all_s = estimate_s(total, rounds, epochs, per_sample, arms=arms)
    return size, (
        f"all {total} would take about {all_s / 60:.0f} min at best.yaml's rates: a seeded "
        f"subset for about {BUDGET_S / 60:.0f} min in all (verify.samples=N to choose)"
    )


def sample_subset(session: Session, samples: int) -> tuple[int, ...] | None:
    """A seeded subset of the source's samples (their indices, in order); None for all."""
    total = len(session.source)
    if samples >= total:
        return None
    return tuple(sorted(random.Random(session.conf.seed).sample(range(total), samples)))


def _described(session: Session, checked: Checked) -> list[tuple[str, str, PipelineConfig]]:
    """Each arm's name, what the user's script does, and its loader settings: the folder's
    three arms; of the user's own Dataset, read as it is, the first two."""
    conf, source = session.conf, session.source
    baseline = PipelineConfig(batch_size=conf.batch_size, decoder=AS_IS)
    as_is = best_file.as_is_of(checked.best, checked.path)
    if isinstance(source, Source):
        dataset, order, collate = "`ImageFolder(root, transform)`", ", shuffle=True", ""
    else:
        dataset = f"`{source.describe()}`"
        order = "" if source.iterable else ", shuffle=True"  # a stream orders itself
        collate = ", collate_fn=collate" if source.collate_fn else ""
    described = [
        (
            "baseline",
            f"{dataset}, `DataLoader(ds, batch_size={conf.batch_size}{order}{collate})`",
            baseline,
        ),
        ("loader_kwargs", f"`DataLoader(ds{order}{collate}, **loader_kwargs(best))`", as_is),
    ]
    if isinstance(source, Source):
        described.append(("build_loader", "`build_loader(source, best)`", checked.best.config))
    return described


def _job(session: Session, pipeline: PipelineConfig, run: EpochRun) -> TrialJob:
    return dataclasses.replace(session.job(pipeline, kind="epochs"), epochs=run)


def make_plan(session: Session, checked: Checked) -> Plan:
    """The arms, the epoch size and the per-run timeout."""
    conf, verify = session.conf, session.conf.verify
    described = _described(session, checked)
    total = len(session.source)
    per_arm = seconds_per_sample(checked.best, tuple(name for name, _, _ in described))
    per_sample = sum(per_arm) if per_arm else None
    batch_size = max(config.batch_size for _, _, config in described)
    arms = len(described)
    run_epochs = 1 + verify.epochs  # a run's first epoch, then the timed ones
    if isinstance(session.source, UserData) and session.source.iterable:
        samples, sizing = total, "a stream is read whole: it cannot be read in part"
    elif verify.samples is not None:
        samples, sizing = min(verify.samples, total), f"verify.samples={verify.samples}"
    else:
        samples, sizing = epoch_size(
            total, verify.rounds, run_epochs, per_sample, batch_size, arms=arms
        )
    run = EpochRun("", verify.epochs, str(checked.path.resolve()), sample_subset(session, samples))
    slowest = max(per_arm) if per_arm else 1 / FALLBACK_RATE
    run_s = RUN_OVERHEAD_S + run_epochs * samples * slowest
    return Plan(
        arms=tuple(
            Arm(name, what, config, _job(session, config, dataclasses.replace(run, arm=name)))
            for name, what, config in described
        ),
        rounds=verify.rounds,
        epochs=verify.epochs,
        samples=samples,
        dataset_samples=total,
        timeout_s=max(conf.study.trial_timeout, math.ceil(TIMEOUT_MARGIN * run_s)),
        estimate_s=(
            estimate_s(samples, verify.rounds, run_epochs, per_sample, arms=arms)
            if per_sample
            else None
        ),
        sizing=sizing,
    )

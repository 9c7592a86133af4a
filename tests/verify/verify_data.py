"""Hand-made figures and files for the verify tests: epochs, runs, a best.yaml, a fake runner.
Imported as ``verify_data`` (the test's folder is on the path)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from autotune import machine
from autotune.pipeline import best_file
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.epochs import EpochTime, EpochTimes
from autotune.runtime.failures import Failure
from autotune.runtime.job import TrialJob
from autotune.runtime.trial import TrialOutcome
from autotune.schema import RecipeConfig
from autotune.verify.rounds import ArmRun

TUNED = PipelineConfig(
    batch_size=8, num_workers=1, prefetch_factor=2, persistent_workers=True, main_threads=1
)
AS_IS = PipelineConfig(
    batch_size=8, num_workers=2, prefetch_factor=2, decoder="as_is", main_threads=1
)
MEASURED = {"samples_per_s": 400.0, "baseline_samples_per_s": 200.0, "speedup_vs_baseline": 2.0}
AS_IS_MEASURED = {"samples_per_s": 190.0, "speedup_vs_baseline": 0.95, "picked": "trial 4"}


def epoch(
    rate: float, *, samples: int = 64, batches: int = 8, first_share: float = 0.0
) -> EpochTime:
    """An epoch at ``rate`` samples/s, its batches evenly spaced after a first batch that
    takes ``first_share`` of it."""
    seconds = samples / rate
    first = first_share * seconds
    step = (seconds - first) / batches
    done = tuple(first + step * (i + 1) for i in range(batches))
    return EpochTime(samples, seconds, first, done)


def times(arm: str, *epochs: EpochTime, first: EpochTime | None = None) -> EpochTimes:
    return EpochTimes(arm, "test.Dataset", "test reader", "", 1, tuple(epochs), first)


def runs(
    arm: str,
    rates_by_round: Sequence[Sequence[float]],
    *,
    first: float | None = None,
    **epoch_kwargs: Any,
) -> list[ArmRun]:
    """One run per round of ``arm``, each with timed epochs at the given rates (after a first
    epoch at ``first``, where given)."""
    return [
        ArmRun(
            arm,
            index,
            times(
                arm,
                *(epoch(r, **epoch_kwargs) for r in rates),
                first=epoch(first, **epoch_kwargs) if first else None,
            ),
        )
        for index, rates in enumerate(rates_by_round)
    ]


def write_best(
    folder: Path,
    *,
    fingerprint: str | None,
    facts: machine.MachineFacts | None = None,
    config: PipelineConfig = TUNED,
    measured: dict[str, Any] | None = None,
    as_is: PipelineConfig | None = AS_IS,
    as_is_measured: dict[str, Any] | None = None,
    recipe: RecipeConfig | None = None,
    model: str = "tiny",
) -> Path:
    """A best.yaml as the tune writes it (``fingerprint`` None: one written before verify;
    ``as_is`` None: one written before the pipeline as it is was tuned)."""
    facts = facts or machine.detect(want_cuda=True)
    workload = best_file.WorkloadSection(
        dataset="synthetic",
        model=model,
        recipe=asdict(recipe or RecipeConfig(crop_size=64)),
        device="cpu",
        data_fingerprint=fingerprint,
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "best.yaml"
    best_file.write(
        path,
        best_file.BestFile(
            config=config,
            measured=best_file.PipelineFigures(**(MEASURED if measured is None else measured)),
            as_is=as_is,
            as_is_measured=best_file.Figures(
                **(AS_IS_MEASURED if as_is_measured is None else as_is_measured)
            ),
            workload=workload,
            machine=best_file.MachineSection.of(facts),
        ),
    )
    return path


class FakeRun:
    """Stands in for ``run_trial``: each arm's epochs at fixed rates, no process. From call
    ``stop_at`` on (1-based), it acts as Ctrl-C does: sets the stop event, reports the run
    interrupted."""

    def __init__(
        self,
        rates: dict[str, Sequence[float]],
        *,
        stop_at: int | None = None,
        make: Callable[[str, float], EpochTime] = lambda arm, rate: epoch(rate),
    ) -> None:
        self.rates, self.stop_at, self.make = rates, stop_at, make
        self.jobs: list[TrialJob] = []

    def __call__(
        self, job: TrialJob, *, timeout_s: float, stop: threading.Event | None = None
    ) -> TrialOutcome:
        self.jobs.append(job)
        if self.stop_at is not None and len(self.jobs) >= self.stop_at:
            if stop is not None:
                stop.set()
            return TrialOutcome("failed", failure=Failure("interrupted", "stopped by Ctrl-C"))
        assert job.kind == "epochs" and job.epochs is not None
        arm = job.epochs.arm
        measured = times(arm, *(self.make(arm, r) for r in self.rates[arm]))
        return TrialOutcome("ok", measurement=measured, wall_s=1.0)  # type: ignore[arg-type]

"""What ``mode=diagnose`` measured, and the limits that follow from it: the CPU-work bound,
the ceiling, waiting reads, and which of them binds.

Pure: plain values in and out (the measuring is ``autotune.diagnose.measure``, the words
``autotune.diagnose.verdict``, the report ``autotune.diagnose.markdown``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from autotune.diagnose.files_vs_shards import FilesVsShards
from autotune.diagnose.storage import Storage
from autotune.pipeline import decoders
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.measurement import Measurement
from autotune.runtime.sample_stages import LOADER_STAGES
from autotune.runtime.stages import StageProfile, StageTime
from autotune.session import read_wait

BUSY = 1.1  # a rate this much above one that bounds it: the machine was busy
READ_WAIT = "waiting reads"  # the binding limit where each reading process waits on storage


@dataclass(frozen=True)
class Diagnosis:
    """Everything ``mode=diagnose`` measured, and what follows from it."""

    name: str
    pipeline: PipelineConfig
    device: str
    usable_cpus: int
    images: int
    model: str
    ceiling: Measurement | None  # the train step on a batch already on the device
    full: Measurement | None
    loader_only: Measurement | None
    serial: Measurement | None  # loader alone, num_workers=0, one thread: the stages' sum
    profile: StageProfile
    copy: StageTime  # to the device and normalized there, seconds per sample
    decoders: dict[str, StageProfile]  # every decoder of the space on the same samples
    storage: Storage
    choices: dict[str, list[Any]]  # the search space's knobs and their values
    failures: tuple[str, ...] = ()
    shards: FilesVsShards = FilesVsShards()  # the same samples as loose files and as shards

    @property
    def step(self) -> StageTime | None:
        """The train step per sample, from the ceiling run (its process's CPU time)."""
        m = self.ceiling
        if m is None or m.samples_per_s <= 0:
            return None
        return StageTime(m.process_cpu_s_per_sample or 0.0, 1 / m.samples_per_s)

    @property
    def worker_stages(self) -> tuple[str, ...]:
        """The loader stages that run in the workers with this pipeline."""
        if self.profile.own_dataset:
            return tuple(self.profile.stages)  # the user's read and collate
        if getattr(decoders.DECODERS.get(self.pipeline.decoder), "on_device", False):
            return ("read", "collate")  # the bytes go to the device to be decoded there
        if self.pipeline.augment_on != "cpu":
            return ("read", "decode", "collate")
        return LOADER_STAGES

    @property
    def storage_bound(self) -> bool:
        """Whether a sample waits on storage in a worker: its wall time over the workers'
        stages well above its CPU time, a busy machine's stretch divided out (the study's
        rule, ``read_wait.reads_wait``), so that more workers than CPUs would keep the CPUs
        busy."""
        stages = self.worker_stages
        wall, cpu = self.profile.wall_s(stages), max(self.profile.cpu_s(stages), 1e-9)
        return read_wait.reads_wait(wall, cpu, read_wait.stretch(self.profile, stages))

    @property
    def cpu_work_bound(self) -> float:
        return self.profile.cpu_work_bound(self.usable_cpus, self.worker_stages)

    @property
    def shared_cpu_bound(self) -> float | None:
        """On a CPU device the step runs on the same CPUs as the loader: both together."""
        if self.device != "cpu" or self.step is None:
            return None
        cpu = self.profile.cpu_s(self.worker_stages) + self.copy.cpu_s + self.step.cpu_s
        return self.usable_cpus / cpu if cpu > 0 else math.inf

    @property
    def read_wait_bound(self) -> float | None:
        """Where reads wait on storage: each worker (or the main process, without workers)
        has one sample in hand at a time, so the loader gives at most its reading processes
        over a sample's wall time, however idle the CPUs. None where reads do not wait."""
        wall = self.profile.wall_s(self.worker_stages)
        if not self.storage_bound or wall <= 0:
            return None
        return max(1, self.pipeline.num_workers) / wall

    @property
    def binding(self) -> tuple[str, float]:
        """The lowest of the compute ceiling, the CPU-work bound and, where reads wait, the
        reading processes' bound: the limit this pipeline meets."""
        limits = [("CPU-work bound", self.cpu_work_bound)]
        if self.ceiling is not None:
            limits.append(("ceiling", self.ceiling.samples_per_s))
        if self.read_wait_bound is not None:
            limits.append((READ_WAIT, self.read_wait_bound))
        return min(limits, key=lambda item: item[1])

    @property
    def accounting(self) -> dict[str, tuple[float, float]]:
        """The stages must add up to what the loader takes: ``{"wall": (stages summed,
        measured), "cpu": (...)}`` in seconds per sample, against the serial loader-only run
        (one thread, ``num_workers=0``: nothing overlaps). CPU seconds are what a busy machine
        leaves alone; wall seconds are what it costs."""
        out: dict[str, tuple[float, float]] = {}
        m = self.serial
        if m is None or m.samples_per_s <= 0:
            return out
        stages, copy = self.worker_stages, self.copy
        # timed seconds per timed sample (sub-windows hold equal samples): the mean, which a
        # few slow files move, where the median rate would look past them
        per_sample = statistics.mean(1 / rate for rate in m.sub_window_samples_per_s)
        out["wall"] = (self.profile.wall_s(stages) + copy.wall_s, per_sample)
        if m.process_cpu_s_per_sample:
            out["cpu"] = (self.profile.cpu_s(stages) + copy.cpu_s, m.process_cpu_s_per_sample)
        return out

    @property
    def warnings(self) -> list[str]:
        """Figures that contradict each other: the machine was busy with something else."""
        out = []
        full = self.full.samples_per_s if self.full is not None else None
        ceiling = self.ceiling.samples_per_s if self.ceiling is not None else None
        if full is not None and ceiling is not None and full > BUSY * ceiling:
            out.append(
                f"training ran at {fmt_rate(full)} samples/s, above its ceiling of "
                f"{fmt_rate(ceiling)}: the machine was busy while the ceiling was measured"
            )
        alone = self.loader_only.samples_per_s if self.loader_only is not None else None
        if full is not None and alone is not None and full > BUSY * alone:
            out.append(
                f"training ran at {fmt_rate(full)} samples/s, faster than the loader alone "
                f"({fmt_rate(alone)}): the machine was busy during one of the runs"
            )
        if out:
            out.append("re-run the diagnosis on a quiet machine")
        return out

    @property
    def top_stage(self) -> tuple[str, float]:
        stages = self.worker_stages
        name = max(stages, key=lambda s: self.profile.stages[s].cpu_s)
        return name, self.profile.cpu_share(name, stages)


def fmt_rate(value: float) -> str:
    """A rate in samples/s as the report prints it."""
    return f"{value:,.0f}"


def fmt_size(n: int) -> str:
    """A size in bytes as the report prints it."""
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"

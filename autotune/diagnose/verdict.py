"""What ``mode=diagnose`` measured, and what follows from it: the binding limit, the
verdict and the knobs to try.

Pure: plain values in, text out (the measuring is ``autotune.diagnose.measure``, the report
``autotune.diagnose.markdown``).
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
from autotune.runtime.stages import LOADER_STAGES, StageProfile, StageTime
from autotune.session.read_wait import WAITING

DATA_BOUND_WAIT = 0.2  # a step that waits longer than this share for data is data-bound
CHEAPER = 0.9  # another decoder is suggested when it needs under this share of the CPU
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
        if getattr(decoders.DECODERS.get(self.pipeline.decoder), "on_device", False):
            return ("read", "collate")  # the bytes go to the device to be decoded there
        if self.pipeline.augment_on != "cpu":
            return ("read", "decode", "collate")
        return LOADER_STAGES

    @property
    def storage_bound(self) -> bool:
        """Whether a sample waits on storage in a worker: its wall time over the workers'
        stages well above its CPU time (``read_wait.WAITING``), so that more workers than
        CPUs would keep the CPUs busy."""
        stages = self.worker_stages
        return self.profile.wall_s(stages) > WAITING * max(self.profile.cpu_s(stages), 1e-9)

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


def suggestions(d: Diagnosis) -> list[str]:
    """Knob settings of this machine's space that the measurements point to, when the step
    waits for data: more workers while the loader is short of its CPU-work bound; less CPU
    per sample when that bound binds, or when the step shares the CPUs (a CPU device)."""
    out: list[str] = []
    if d.full is not None and d.full.data_wait_fraction < DATA_BOUND_WAIT:
        return out
    workers = [w for w in d.choices.get("num_workers", []) if isinstance(w, int)]
    loader = d.loader_only.samples_per_s if d.loader_only is not None else 0.0
    wanted = max(workers, default=0)  # beyond the CPUs only where reads wait
    wanted = wanted if d.storage_bound else min(wanted, d.usable_cpus)
    if wanted > d.pipeline.num_workers and loader < 0.8 * d.cpu_work_bound:
        out.append(f"num_workers={wanted}")
    limit, _ = d.binding
    if limit != "CPU-work bound" and d.shared_cpu_bound is None:
        return out  # the CPUs have room to spare: cheaper samples would not be faster
    stage, _ = d.top_stage
    in_space = d.choices.get("decoder", [])
    on_device = [n for n in in_space if _batched_on_device(n)]  # in the DataLoader's place
    if stage == "decode" and on_device and d.pipeline.decoder not in on_device:
        out.append(f"decoder={on_device[0]}")
    elif d.pipeline.decoder in d.decoders:
        stages = d.worker_stages
        current = d.decoders[d.pipeline.decoder].cpu_s(stages)
        cost = {n: p.cpu_s(stages) for n, p in d.decoders.items() if n in in_space}
        best = min(cost, key=cost.__getitem__, default=d.pipeline.decoder)
        if cost.get(best, current) < CHEAPER * current:
            out.append(f"decoder={best}")
    if stage == "augment" and "gpu" in d.choices.get("augment_on", []):
        out.append("augment_on=gpu")
    return out


def _batched_on_device(name: str) -> bool:
    """Whether ``name`` decodes batches on the device behind a DataLoader (not in its place)."""
    found = decoders.DECODERS.get(name)
    return bool(found and found.on_device and not found.replaces_loader)


def _reads(d: Diagnosis) -> str:
    """Whether reads wait on storage, with the figures."""
    stages = d.worker_stages
    wall, cpu = d.profile.wall_s(stages), d.profile.cpu_s(stages)
    read = d.profile.stages["read"].wall_s
    if d.storage_bound:
        return (
            f"storage-bound: a sample takes {1000 * wall:.1f} ms in a worker for "
            f"{1000 * cpu:.1f} ms of CPU (reading it: {1000 * read:.1f} ms), so more workers "
            f"than the {d.usable_cpus} CPUs keep them busy"
        )
    return (
        f"not storage-bound: reading a sample takes {1000 * read:.1f} ms of its "
        f"{1000 * wall:.1f} ms in a worker, at CPU speed"
    )


def readers(pipeline: PipelineConfig) -> str:
    """The processes that read samples, in words."""
    n = pipeline.num_workers
    return f"{n} worker{'s' if n > 1 else ''}" if n else "the main process"


def _head(d: Diagnosis) -> str:
    """Whether the step waits for data, and whether storage is why."""
    who = "GPU" if d.device == "cuda" else "model"
    if d.full is None:
        head = "not measured: the training run failed"
    elif d.full.data_wait_fraction >= DATA_BOUND_WAIT:
        head = f"data-bound: the {who} waits {d.full.data_wait_fraction:.0%} of each step for data"
    else:
        head = (
            f"compute-bound: the {who} waits only {d.full.data_wait_fraction:.0%} of each step "
            "for data"
        )
    cold, warm = d.storage.cold_samples_per_s, d.storage.warm_samples_per_s
    if d.storage.io_bound and cold is not None and warm is not None:
        if d.storage.fits_in_cache:
            head += (
                f"; from storage the loader alone is {1 - cold / warm:.0%} slower "
                f"({fmt_rate(cold)} vs {fmt_rate(warm)} samples/s): I/O-bound in the first "
                f"epoch only, as the {fmt_size(d.storage.dataset_bytes)} of files fit in the "
                "page cache"
            )
        else:
            head = (
                f"I/O-bound: from storage the loader alone gives {fmt_rate(cold)} samples/s, from "
                f"the page cache {fmt_rate(warm)}; {head}"
            )
    return head


def verdict(d: Diagnosis) -> str:
    """One or two sentences with the numbers: what binds, and what to try."""
    limit, value = d.binding
    stage, share = d.top_stage
    bound = d.cpu_work_bound
    ceiling = d.ceiling.samples_per_s if d.ceiling is not None else None
    versus = (
        f"the CPU-work bound is {fmt_rate(bound)} samples/s vs a ceiling of {fmt_rate(ceiling)}"
        if ceiling is not None
        else f"the CPU-work bound is {fmt_rate(bound)} samples/s (the ceiling was not measured)"
    )
    head = _head(d)
    sharded = (
        f"; from storage, shards of the same samples read {d.shards.cold_ratio:.1f}x as fast as "
        "loose files (python -m autotune.shard)"
        if d.shards.shards_pay
        else ""
    )
    binds = (
        f"waiting reads bind: {readers(d.pipeline)}, each with one sample in hand, give at most "
        f"{fmt_rate(value)} samples/s"
        if limit == READ_WAIT
        else f"{limit} binds"
    )
    first = (
        f"{head}; {_reads(d)}{sharded}; {stage} is {share:.0%} of per-sample CPU time; "
        f"{versus} ({binds})"
    )
    shared = d.shared_cpu_bound
    if shared is not None and shared < value:
        first += (
            f"; on this CPU device the step shares the {d.usable_cpus} CPUs with the loader: "
            f"together at most {fmt_rate(shared)} samples/s"
        )
    first += "."
    tips = suggestions(d)
    if tips:
        return f"{first} Try {', '.join(tips)}."
    if d.full is not None:
        reached = d.full.samples_per_s / min(value, shared or value)
        return f"{first} This pipeline reaches {reached:.0%} of that limit."
    return first

"""What ``mode=diagnose`` measured, and what follows from it: the binding limit, the
verdict, the knobs to try, and ``diagnosis.md``.

Pure: plain values in, text out (the measuring is ``autotune.diagnose.measure``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from autotune.pipeline import decoders
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.stages import LOADER_STAGES, StageProfile, StageTime
from autotune.runtime.window import Measurement

DATA_BOUND_WAIT = 0.2  # a step that waits longer than this share for data is data-bound
IO_MARGIN = 0.15  # cold must be this much slower than warm, in every round: I/O-bound
CHEAPER = 0.9  # another decoder is suggested when it needs under this share of the CPU
BUSY = 1.1  # a rate this much above one that bounds it: the machine was busy


@dataclass(frozen=True)
class Storage:
    """The same loader-only run from storage (files evicted) and from the page cache, in
    interleaved rounds (cold, warm, cold, warm): one pair is noise on a shared machine."""

    cold: tuple[Measurement, ...] = ()
    warm: tuple[Measurement, ...] = ()
    read_cold: StageTime | None = None  # seconds per file, read here one after the other
    read_warm: StageTime | None = None
    cached_after_eviction: float | None = None  # share of the pages mincore still saw
    dataset_bytes: int = 0
    fits_in_cache: bool = False  # the page cache can hold the dataset: I/O in epoch 1 only
    note: str = ""

    @staticmethod
    def _median(runs: tuple[Measurement, ...]) -> float | None:
        return statistics.median(m.samples_per_s for m in runs) if runs else None

    @property
    def cold_samples_per_s(self) -> float | None:
        return self._median(self.cold)

    @property
    def warm_samples_per_s(self) -> float | None:
        return self._median(self.warm)

    @property
    def io_bound(self) -> bool | None:
        """True when every round ran slower from storage than from memory by more than
        ``IO_MARGIN``; None when storage was not compared."""
        if not self.cold or len(self.cold) != len(self.warm):
            return None
        return all(
            c.samples_per_s < (1 - IO_MARGIN) * w.samples_per_s
            for c, w in zip(self.cold, self.warm, strict=True)
        )


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
    def binding(self) -> tuple[str, float]:
        """The lower of the compute ceiling and the CPU-work bound: the physical limit."""
        limits = [("CPU-work bound", self.cpu_work_bound)]
        if self.ceiling is not None:
            limits.append(("ceiling", self.ceiling.samples_per_s))
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
                f"training ran at {_rate(full)} samples/s, above its ceiling of "
                f"{_rate(ceiling)}: the machine was busy while the ceiling was measured"
            )
        alone = self.loader_only.samples_per_s if self.loader_only is not None else None
        if full is not None and alone is not None and full > BUSY * alone:
            out.append(
                f"training ran at {_rate(full)} samples/s, faster than the loader alone "
                f"({_rate(alone)}): the machine was busy during one of the runs"
            )
        if out:
            out.append("re-run the diagnosis on a quiet machine")
        return out

    @property
    def top_stage(self) -> tuple[str, float]:
        stages = self.worker_stages
        name = max(stages, key=lambda s: self.profile.stages[s].cpu_s)
        return name, self.profile.cpu_share(name, stages)


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def suggestions(d: Diagnosis) -> list[str]:
    """Knob settings of this machine's space that the measurements point to, when the step
    waits for data: more workers while the loader is short of its CPU-work bound; less CPU
    per sample when that bound binds, or when the step shares the CPUs (a CPU device)."""
    out: list[str] = []
    if d.full is not None and d.full.data_wait_fraction < DATA_BOUND_WAIT:
        return out
    workers = [w for w in d.choices.get("num_workers", []) if isinstance(w, int)]
    loader = d.loader_only.samples_per_s if d.loader_only is not None else 0.0
    wanted = min(max(workers, default=0), d.usable_cpus)
    if wanted > d.pipeline.num_workers and loader < 0.8 * d.cpu_work_bound:
        out.append(f"num_workers={wanted}")
    limit, _ = d.binding
    if limit != "CPU-work bound" and d.shared_cpu_bound is None:
        return out  # the CPUs have room to spare: cheaper samples would not be faster
    stage, _ = d.top_stage
    in_space = d.choices.get("decoder", [])
    if stage == "decode" and "nvjpeg" in in_space and d.pipeline.decoder != "nvjpeg":
        out.append("decoder=nvjpeg")
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


def verdict(d: Diagnosis) -> str:
    """One or two sentences with the numbers: what binds, and what to try."""
    limit, value = d.binding
    stage, share = d.top_stage
    bound = d.cpu_work_bound
    ceiling = d.ceiling.samples_per_s if d.ceiling is not None else None
    versus = (
        f"the CPU-work bound is {_rate(bound)} samples/s vs a ceiling of {_rate(ceiling)}"
        if ceiling is not None
        else f"the CPU-work bound is {_rate(bound)} samples/s (the ceiling was not measured)"
    )
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
                f"; from storage the loader alone is {1 - cold / warm:.0%} slower ({_rate(cold)} "
                f"vs {_rate(warm)} samples/s): I/O-bound in the first epoch only, as the "
                f"{_size(d.storage.dataset_bytes)} of files fit in the page cache"
            )
        else:
            head = (
                f"I/O-bound: from storage the loader alone gives {_rate(cold)} samples/s, from "
                f"the page cache {_rate(warm)}; {head}"
            )
    first = f"{head}; {stage} is {share:.0%} of per-sample CPU time; {versus} ({limit} binds)"
    shared = d.shared_cpu_bound
    if shared is not None and shared < value:
        first += (
            f"; on this CPU device the step shares the {d.usable_cpus} CPUs with the loader: "
            f"together at most {_rate(shared)} samples/s"
        )
    first += "."
    tips = suggestions(d)
    if tips:
        return f"{first} Try {', '.join(tips)}."
    if d.full is not None:
        reached = d.full.samples_per_s / min(value, shared or value)
        return f"{first} This pipeline reaches {reached:.0%} of that limit."
    return first


# --- the report --------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def to_markdown(d: Diagnosis, slowest: int = 10) -> str:
    p = d.profile
    lines = [f"# Diagnosis: {d.name}", "", f"**Verdict.** {verdict(d)}", ""]
    lines += [
        f"Pipeline `{d.pipeline.short()}` on {d.device}, model `{d.model}`, {d.images} images, "
        f"{d.usable_cpus} usable CPUs.",
        "",
        "## Rates",
        "",
        "| | samples/s | |",
        "|---|---:|---|",
    ]
    limit, _ = d.binding
    if d.ceiling is not None:
        mark = "**binds**" if limit == "ceiling" else ""
        lines.append(
            f"| ceiling: the train step on a batch already on the device | "
            f"{_rate(d.ceiling.samples_per_s)} | {mark} |"
        )
    mark = "**binds**" if limit == "CPU-work bound" else ""
    lines.append(
        f"| CPU-work bound: {d.usable_cpus} CPUs / {_ms(p.cpu_s(d.worker_stages))} ms of loader "
        f"CPU per sample | {_rate(d.cpu_work_bound)} | {mark} |"
    )
    if d.shared_cpu_bound is not None:
        lines.append(
            f"| loader and step sharing the {d.usable_cpus} CPUs (CPU device) | "
            f"{_rate(d.shared_cpu_bound)} | |"
        )
    if d.full is not None:
        gpu = (
            f"; GPU busy {d.full.gpu_utilization_pct:.0f}%"
            if d.full.gpu_utilization_pct is not None
            else ""
        )
        lines.append(
            f"| full training, this pipeline | {_rate(d.full.samples_per_s)} | data wait "
            f"{d.full.data_wait_fraction:.0%} of each step{gpu} |"
        )
    if d.loader_only is not None:
        where = " (the page-cache runs below)" if d.storage.warm else ""
        lines.append(
            f"| loader alone (`model=none`){where} | {_rate(d.loader_only.samples_per_s)} | |"
        )
    lines += [
        "",
        f"## Per-sample time by stage ({len(p.samples)} samples, one thread as in a worker)",
        "",
        "| stage | CPU ms | wall ms | share of loader CPU |",
        "|---|---:|---:|---:|",
    ]
    names = {"read": "read bytes", "decode": f"decode ({p.decoder})", "augment": "augment"}
    for stage in d.worker_stages:
        t = p.stages[stage]
        share = p.cpu_share(stage, d.worker_stages)
        row = f"| {names.get(stage, stage)} | {_ms(t.cpu_s)} | {_ms(t.wall_s)} | {share:.0%} |"
        lines.append(row)
    lines.append(
        f"| **loader total** | {_ms(p.cpu_s(d.worker_stages))} | "
        f"{_ms(p.wall_s(d.worker_stages))} | |"
    )
    lines.append(
        f"| host→device copy, normalize (one thread) | {_ms(d.copy.cpu_s)} | "
        f"{_ms(d.copy.wall_s)} | |"
    )
    if d.step is not None:
        lines.append(
            f"| train step (the ceiling run, {d.usable_cpus} threads) | {_ms(d.step.cpu_s)} | "
            f"{_ms(d.step.wall_s)} | |"
        )
    if "wall" in d.accounting:
        summed, measured = d.accounting["wall"]
        text = (
            f"The loader stages and the copy add up to {_ms(summed)} ms per sample; the loader "
            f"alone with `num_workers=0` and one thread took {_ms(measured)} ms "
            f"(stages / measured = {summed / measured:.2f})"
        )
        if "cpu" in d.accounting:
            summed, measured = d.accounting["cpu"]
            text += (
                f"; in CPU time {_ms(summed)} ms against the {_ms(measured)} ms its process "
                f"spent per sample ({summed / measured:.2f})"
            )
        lines += ["", text + "."]
    if len(d.decoders) > 1:
        n = len(next(iter(d.decoders.values())).samples)
        lines += [
            "",
            f"## Decoders (the same {n} samples)",
            "",
            "| decoder | decode ms | loader CPU ms | CPU-work bound, samples/s |",
            "|---|---:|---:|---:|",
        ]
        for name, dp in sorted(d.decoders.items(), key=lambda kv: kv[1].cpu_s(d.worker_stages)):
            lines.append(
                f"| {name} | {_ms(dp.stages['decode'].cpu_s)} | {_ms(dp.cpu_s(d.worker_stages))}"
                f" | {_rate(dp.cpu_work_bound(d.usable_cpus, d.worker_stages))} |"
            )
    lines += ["", "## Storage vs CPU", ""] + _storage_lines(d.storage)
    lines += ["", *tail_lines(p, slowest)]
    if d.failures:
        lines += ["", "## Runs that failed", ""] + [f"- {f}" for f in d.failures]
    if d.warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in d.warnings]
    return "\n".join(lines) + "\n"


def tail_lines(profile: StageProfile, slowest: int) -> list[str]:
    """The latency tail: percentiles of the per-sample load time, and the slowest files."""
    q = profile.load_percentiles((50, 90, 99))
    lines = [
        f"## Latency tail (read + decode + augment per sample, {len(profile.samples)} samples)",
        "",
        f"p50 {_ms(q[50])} ms · p90 {_ms(q[90])} ms · p99 {_ms(q[99])} ms",
        "",
        "| slowest files | ms | size | pixels |",
        "|---|---:|---:|---:|",
    ]
    for s in profile.slowest(slowest):
        size = _size(s.size_bytes)
        lines.append(f"| {s.path} | {_ms(s.load_s)} | {size} | {s.width}x{s.height} |")
    if profile.skipped:
        shown = ", ".join(profile.skipped[:5])
        more = f" and {len(profile.skipped) - 5} more" if len(profile.skipped) > 5 else ""
        lines += ["", f"{len(profile.skipped)} files could not be decoded: {shown}{more}"]
    return lines


def _storage_lines(s: Storage) -> list[str]:
    lines = []
    if s.read_cold is not None and s.read_warm is not None:
        lines.append(
            f"- reading files one after another here, in random order: {_ms(s.read_cold.wall_s)}"
            f" ms each from storage, {_ms(s.read_warm.wall_s)} ms from the page cache"
        )
    if s.cached_after_eviction is not None:
        lines.append(
            f"- eviction checked with mincore: {s.cached_after_eviction:.0%} of the pages "
            "still cached after it"
        )
    if s.cold and s.warm:
        word = "I/O-bound" if s.io_bound else "not I/O-bound"
        pairs = ", ".join(
            f"{_rate(c.samples_per_s)} vs {_rate(w.samples_per_s)}"
            for c, w in zip(s.cold, s.warm, strict=True)
        )
        lines.append(
            f"- the loader alone, from storage vs from the page cache (samples/s, interleaved "
            f"rounds): {pairs}: **{word}** (I/O-bound needs every round over "
            f"{IO_MARGIN:.0%} slower from storage)"
        )
    if s.note:
        lines.append(f"- {s.note}")
    return lines

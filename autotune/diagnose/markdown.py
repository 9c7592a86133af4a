"""``diagnosis.md``: the verdict, then the figures it stands on, one section each.

Pure: a ``Diagnosis`` in, markdown out.
"""

from __future__ import annotations

from autotune.diagnose.diagnosis import READ_WAIT, Diagnosis, fmt_rate, fmt_size
from autotune.diagnose.files_vs_shards import FASTER, FilesVsShards
from autotune.diagnose.storage import IO_MARGIN, Storage
from autotune.diagnose.verdict import OWN_READ_WORDS, readers, verdict
from autotune.runtime.measurement import Measurement
from autotune.runtime.stages import OWN_READ, StageProfile

BINDS = "**binds**"
# decode is named with its decoder
STAGE_NAMES = {"read": "read bytes", "augment": "augment", OWN_READ: OWN_READ_WORDS}


def to_markdown(d: Diagnosis, slowest: int = 10) -> str:
    """The whole report; ``slowest``: how many of the slowest files to list."""
    lines = [
        f"# Diagnosis: {d.name}",
        "",
        f"**Verdict.** {verdict(d)}",
        "",
        f"Pipeline `{d.pipeline.short()}` on {d.device}, model `{d.model}`, {d.images} "
        f"{'samples' if d.profile.own_dataset else 'images'}, "
        f"{d.usable_cpus} usable CPUs."
        + (
            f" It reads its {d.pipeline.cache} copy: the stages below are the copy's."
            if d.pipeline.cache != "none"
            else ""
        ),
    ]
    lines += ["", *rate_lines(d)]
    lines += ["", *stage_lines(d)]
    lines += accounting_lines(d)
    lines += decoder_lines(d)
    lines += ["", "## Storage vs CPU", "", *storage_lines(d.storage)]
    lines += ["", *shards_lines(d.shards)]
    lines += ["", *tail_lines(d.profile, slowest)]
    if d.failures:
        lines += ["", "## Runs that failed", ""] + [f"- {f}" for f in d.failures]
    if d.warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in d.warnings]
    return "\n".join(lines) + "\n"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def rate_lines(d: Diagnosis) -> list[str]:
    """The rates table: the two limits, and what the pipeline reached with and without the
    model."""
    limit, _ = d.binding
    lines = ["## Rates", "", "| | samples/s | |", "|---|---:|---|"]
    if d.ceiling is not None:
        mark = BINDS if limit == "ceiling" else ""
        lines.append(
            f"| ceiling: the train step on a batch already on the device | "
            f"{fmt_rate(d.ceiling.samples_per_s)} | {mark} |"
        )
    mark = BINDS if limit == "CPU-work bound" else ""
    lines.append(
        f"| CPU-work bound: {d.usable_cpus} CPUs / {_ms(d.profile.cpu_s(d.worker_stages))} ms "
        f"of loader CPU per sample | {fmt_rate(d.cpu_work_bound)} | {mark} |"
    )
    if d.read_wait_bound is not None:
        mark = BINDS if limit == READ_WAIT else ""
        lines.append(
            f"| {READ_WAIT}: {readers(d.pipeline)} / {_ms(d.profile.wall_s(d.worker_stages))} ms "
            "a sample "
            f"in hand | {fmt_rate(d.read_wait_bound)} | {mark} |"
        )
    if d.shared_cpu_bound is not None:
        lines.append(
            f"| loader and step sharing the {d.usable_cpus} CPUs (CPU device) | "
            f"{fmt_rate(d.shared_cpu_bound)} | |"
        )
    if d.full is not None:
        gpu = d.full.gpu_utilization_pct
        busy = f"; GPU busy {gpu:.0f}%" if gpu is not None else ""
        lines.append(
            f"| full training, this pipeline | {fmt_rate(d.full.samples_per_s)} | data wait "
            f"{d.full.data_wait_fraction:.0%} of each step{busy} |"
        )
    if d.loader_only is not None:
        where = " (the page-cache runs below)" if d.storage.warm else ""
        lines.append(
            f"| loader alone (`model=none`){where} | {fmt_rate(d.loader_only.samples_per_s)} | |"
        )
    return lines


def stage_lines(d: Diagnosis) -> list[str]:
    """Per-sample CPU and wall time of each loader stage, the copy and the train step."""
    p, stages = d.profile, d.worker_stages
    lines = [
        f"## Per-sample time by stage ({len(p.samples)} samples, one thread as in a worker)",
        "",
        "| stage | CPU ms | wall ms | share of loader CPU |",
        "|---|---:|---:|---:|",
    ]
    names = {**STAGE_NAMES, "decode": f"decode ({p.decoder})"}
    for stage in stages:
        t = p.stages[stage]
        share = p.cpu_share(stage, stages)
        row = f"| {names.get(stage, stage)} | {_ms(t.cpu_s)} | {_ms(t.wall_s)} | {share:.0%} |"
        lines.append(row)
    lines.append(f"| **loader total** | {_ms(p.cpu_s(stages))} | {_ms(p.wall_s(stages))} | |")
    lines.append(
        f"| host→device copy{_normalized_there(d)} (one thread) | {_ms(d.copy.cpu_s)} | "
        f"{_ms(d.copy.wall_s)} | |"
    )
    if d.step is not None:
        lines.append(
            f"| train step (the ceiling run, {d.usable_cpus} threads) | {_ms(d.step.cpu_s)} | "
            f"{_ms(d.step.wall_s)} | |"
        )
    return lines


def accounting_lines(d: Diagnosis) -> list[str]:
    """Whether the stages add up to the serial loader run; nothing when it did not run."""
    accounting = d.accounting
    if "wall" not in accounting:
        return []
    summed, measured = accounting["wall"]
    text = (
        f"The loader stages and the copy add up to {_ms(summed)} ms per sample; the loader "
        f"alone with `num_workers=0` and one thread took {_ms(measured)} ms "
        f"(stages / measured = {summed / measured:.2f})"
    )
    if "cpu" in accounting:
        summed, measured = accounting["cpu"]
        text += (
            f"; in CPU time {_ms(summed)} ms against the {_ms(measured)} ms its process "
            f"spent per sample ({summed / measured:.2f})"
        )
    return ["", text + "."]


def decoder_lines(d: Diagnosis) -> list[str]:
    """Every decoder of the space on the same samples, cheapest first; nothing for one."""
    if len(d.decoders) <= 1:
        return []
    stages = d.worker_stages
    n = len(next(iter(d.decoders.values())).samples)
    lines = [
        "",
        f"## Decoders (the same {n} samples)",
        "",
        "| decoder | decode ms | loader CPU ms | CPU-work bound, samples/s |",
        "|---|---:|---:|---:|",
    ]
    for name, dp in sorted(d.decoders.items(), key=lambda kv: kv[1].cpu_s(stages)):
        lines.append(
            f"| {name} | {_ms(dp.stages['decode'].cpu_s)} | {_ms(dp.cpu_s(stages))}"
            f" | {fmt_rate(dp.cpu_work_bound(d.usable_cpus, stages))} |"
        )
    return lines


def storage_lines(s: Storage) -> list[str]:
    """What the storage comparison found, one bullet each."""
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
    if s.never_cached:
        lines.append(
            "- **every read comes from storage**: a file read again right after takes as long "
            "as the first time, so this file system keeps nothing in the page cache (a FUSE "
            "mount, or a network file system that does not cache): the runs 'from the page "
            "cache' here and below read from storage too, and every epoch waits on it"
        )
    pairs = ", ".join(
        f"{fmt_rate(c.samples_per_s)} vs {fmt_rate(w.samples_per_s)}"
        for c, w in zip(s.cold, s.warm, strict=True)
    )
    if s.cold and s.warm and s.never_cached:
        lines.append(f"- the loader alone, the same runs (samples/s, interleaved rounds): {pairs}")
    elif s.cold and s.warm:
        word = "I/O-bound" if s.io_bound else "not I/O-bound"
        lines.append(
            f"- the loader alone, from storage vs from the page cache (samples/s, interleaved "
            f"rounds): {pairs}: **{word}** (I/O-bound needs every round over "
            f"{IO_MARGIN:.0%} slower from storage)"
        )
    if s.note:
        lines.append(f"- {s.note}")
    return lines


def shards_lines(fs: FilesVsShards) -> list[str]:
    """The same samples as loose files and as shards, from storage and from the page cache
    (samples/s of each round)."""
    lines = ["## Loose files vs shards", ""]
    if fs.files_cold and fs.shards_cold:

        def rates(runs: tuple[Measurement, ...]) -> str:
            return ", ".join(fmt_rate(m.samples_per_s) for m in runs)

        lines += [
            "| the loader alone, samples/s per round | from storage | from the page cache |",
            "|---|---:|---:|",
            f"| loose files | {rates(fs.files_cold)} | {rates(fs.files_warm)} |",
            f"| {fs.shard_count} shards | {rates(fs.shards_cold)} | {rates(fs.shards_warm)} |",
            "",
        ]
        word = "worth writing (python -m autotune.shard)" if fs.shards_pay else "no faster here"
        lines.append(
            f"- from storage, shards read {fs.cold_ratio:.2f}x as fast as loose files: **{word}** "
            f"(it needs every round {FASTER:.2f}x or more)"
        )
    if fs.note:
        lines.append(f"- {fs.note}")
    return lines


def tail_lines(profile: StageProfile, slowest: int) -> list[str]:
    """The latency tail: percentiles of the per-sample load time, and the slowest files."""
    q = profile.load_percentiles((50, 90, 99))
    own = profile.own_dataset
    what = OWN_READ_WORDS if own else "read + decode + augment"
    lines = [
        f"## Latency tail ({what} per sample, {len(profile.samples)} samples)",
        "",
        f"p50 {_ms(q[50])} ms · p90 {_ms(q[90])} ms · p99 {_ms(q[99])} ms",
        "",
        *(
            ["| slowest samples | ms |", "|---|---:|"]
            if own
            else ["| slowest files | ms | size | pixels |", "|---|---:|---:|---:|"]
        ),
    ]
    for s in profile.slowest(slowest):
        if own:
            lines.append(f"| {s.path} | {_ms(s.load_s)} |")
        else:
            size = fmt_size(s.size_bytes)
            lines.append(f"| {s.path} | {_ms(s.load_s)} | {size} | {s.width}x{s.height} |")
    if profile.skipped:
        shown = ", ".join(profile.skipped[:5])
        more = f" and {len(profile.skipped) - 5} more" if len(profile.skipped) > 5 else ""
        lines += ["", f"{len(profile.skipped)} files could not be decoded: {shown}{more}"]
    return lines


def _normalized_there(d: Diagnosis) -> str:
    """The device stage normalizes uint8 crops; floats (the tutorial's) come normalized."""
    return (
        ", normalize" if d.pipeline.transfer == "uint8" or d.pipeline.augment_on == "gpu" else ""
    )

"""What follows from a diagnosis, in words: the verdict (what binds, whether reads wait) and
the knobs of this machine's space to try.

Pure: a ``Diagnosis`` in, text out.
"""

from __future__ import annotations

from autotune.diagnose.diagnosis import READ_WAIT, Diagnosis, fmt_rate, fmt_size
from autotune.pipeline import decoders
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.stages import OWN_READ

DATA_BOUND_WAIT = 0.2  # a step that waits longer than this share for data is data-bound
CHEAPER = 0.9  # another decoder is suggested when it needs under this share of the CPU
OWN_READ_WORDS = "your Dataset's read"  # its own code, whole: one stage


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
    if d.profile.own_dataset:  # its read is its own code: whether it waits shows whole
        waits = "storage-bound" if d.storage_bound else "not storage-bound"
        more = f", so more workers than the {d.usable_cpus} CPUs keep them busy"
        return (
            f"{waits}: a sample of your Dataset takes {1000 * wall:.1f} ms in a worker for "
            f"{1000 * cpu:.1f} ms of CPU{more if d.storage_bound else ''}"
        )
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
        f"{head}; {_reads(d)}{sharded}; {OWN_READ_WORDS if stage == OWN_READ else stage} is "
        f"{share:.0%} of per-sample CPU time; "
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

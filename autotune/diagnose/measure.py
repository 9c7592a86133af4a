"""``python -m autotune mode=diagnose``: where the time goes, and which limit binds.

Measured, never guessed: the ceiling, the full training rate and the loader alone come from
the tuner's own child-process trials; the per-stage times from an instrumented run of the same
pieces in this process (``autotune.runtime.stages``); storage against CPU from the same loader-only
run with the files evicted from the page cache and cached. ``autotune.diagnose.verdict`` judges the
figures and writes the verdict.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.diagnose import page_cache
from autotune.diagnose.verdict import Diagnosis, Storage, to_markdown
from autotune.errors import UsageError
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.recipes import Recipe
from autotune.pipeline.sources import Source
from autotune.runtime.stages import (
    StageProfile,
    StageTime,
    pick,
    profile_copy,
    profile_stages,
    threads,
    time_reads,
    total_bytes,
)
from autotune.runtime.window import Measurement, warmup_batches
from autotune.schema import AutotuneConfig, ModelConfig, WindowConfig

log = logging.getLogger(__name__)

CACHE_SHARE = 0.5  # warm the page cache only with a dataset under this share of free RAM
RESIDENCY_CHECK_FILES = 256  # files whose pages mincore checks after an eviction
READ_TIMING_FILES = 128  # files read cold, then warm, to time a read from storage
STORAGE_ROUNDS = 2  # cold, warm, cold, warm


def storage_window(
    window: WindowConfig,
    *,
    epoch_batches: int,
    buffered: int,
    align: int,
    rate: float,
    batch_size: int,
) -> WindowConfig | None:
    """``window`` with a fixed number of batches, all inside the first pass over the data.

    Run with the files evicted, every read comes from storage (no file twice); run again with
    the same seed, the same files are read in the same order, now cached by the first run.
    Sub-windows are as long as ``min_sub_window_s`` makes them at ``rate`` samples/s (a rate
    above the loader's is safe), shortened for a small dataset; None when not one batch fits
    after the warm-up.
    """
    warmup = warmup_batches(buffered, window.warmup_extra_batches)
    per_window = max(
        window.batches_per_window, math.ceil(window.min_sub_window_s * rate / batch_size)
    )
    per_window = -(-per_window // align) * align
    sub_windows = window.sub_windows
    # the first batch, the warm-up, the timed batches, and what the workers fetch ahead
    budget = epoch_batches - 1 - warmup - buffered
    if sub_windows * per_window > budget:
        per_window = align * max(1, budget // (sub_windows * align))
        sub_windows = min(sub_windows, budget // per_window)
    if sub_windows < 1:
        return None
    return WindowConfig(
        warmup_extra_batches=window.warmup_extra_batches,
        sub_windows=sub_windows,
        batches_per_window=per_window,
        min_sub_window_s=0.0,
    )


def run(config: AutotuneConfig) -> int:
    """``mode=diagnose``: measures, prints the diagnosis and writes it to
    ``studies/<study.name>/diagnosis.md``. Returns the exit code."""
    from autotune.runtime.lock import host_lock

    pipeline = pipeline_to_diagnose(config)
    with host_lock(Path(config.studies_dir)):
        d = diagnose(config, pipeline)
    if d.full is None and d.loader_only is None:
        print("\n".join(["diagnose: no run finished:", *d.failures]), flush=True)
        return 1
    text = to_markdown(d, config.diagnose.slowest)
    folder = Path(config.studies_dir) / d.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "diagnosis.md").write_text(text)
    print(text, flush=True)
    print(f"written to {folder / 'diagnosis.md'}", flush=True)
    return 0


def pipeline_to_diagnose(config: AutotuneConfig) -> PipelineConfig:
    """The pipeline to diagnose: ``pipeline=best.yaml``, or PyTorch's defaults."""
    from autotune.pipeline import decoders
    from autotune.pipeline.user_api import load_pipeline_config

    if config.pipeline is None:
        return PipelineConfig(batch_size=config.batch_size)
    pipeline = load_pipeline_config(config.pipeline)
    known = decoders.DECODERS.get(pipeline.decoder)
    if known is None:
        raise UsageError(
            f"{config.pipeline}: unknown decoder {pipeline.decoder!r}; known: "
            f"{', '.join(decoders.DECODERS)}"
        )
    reason = known.unavailable_reason()
    if reason:
        raise UsageError(f"{config.pipeline}: decoder {pipeline.decoder} {reason}")
    return pipeline


def diagnose(config: AutotuneConfig, pipeline: PipelineConfig) -> Diagnosis:
    """Runs every measurement of the diagnosis (trials in child processes, the stage profile
    here) and returns them."""
    from autotune import machine
    from autotune.app.cli import load_source, resolve_device
    from autotune.pipeline import recipes
    from autotune.runtime.trial import run_trial
    from autotune.runtime.workload import build_model
    from autotune.session.space import SearchSpace
    from autotune.tuner.objective import make_job

    facts = machine.detect(want_cuda=config.device != "cpu")
    device = resolve_device(config.device, facts.cuda_available)
    source = load_source(config.dataset)
    build_model(config.model, num_classes=len(source.classes))  # bad model: fail before runs
    config = dataclasses.replace(config, batch_size=pipeline.batch_size)
    space = SearchSpace.from_config(
        config.search_space, facts, device=device, batch_size=config.batch_size
    )
    choices = {k.name: k.values() for k in space.knobs}
    recipe = recipes.from_config(config.recipe)
    failures: list[str] = []

    def measure(
        label: str, cfg: AutotuneConfig, config_: PipelineConfig, kind: str = "window"
    ) -> Measurement | None:
        log.info("diagnose: %s", label)
        job = make_job(cfg, source, device, config_, kind)
        outcome = run_trial(job, timeout_s=config.study.trial_timeout)
        if outcome.measurement is None:
            assert outcome.failure is not None
            failures.append(f"{label}: {outcome.failure.kind}: {outcome.failure.message}")
        return outcome.measurement

    dataset_bytes = total_bytes(source.paths)
    fits = dataset_bytes <= CACHE_SHARE * facts.memory_available_bytes
    if fits:
        page_cache.warm(source.paths)  # the steady state of a dataset that fits in memory
    profile, decoder_profiles = _profile(config, source, recipe, pipeline, choices)

    # the tuner's ceiling (study.measure_ceiling), kept whole: its CPU time is the step's
    # with the better of one torch thread and all CPUs, as the tuner measures it
    ceilings = [
        measure(
            f"the ceiling (the train step on a batch already on the device), {n} thread(s)",
            config,
            PipelineConfig(batch_size=config.batch_size, main_threads=n),
            "ceiling",
        )
        for n in dict.fromkeys((1, facts.usable_cpus))
    ]
    ceiling = max(
        (m for m in ceilings if m is not None), key=lambda m: m.samples_per_s, default=None
    )
    full = measure(f"full training, {pipeline.short()}", config, pipeline)
    alone = dataclasses.replace(config, model=ModelConfig(name="none"))
    # the CPU-work bound is above the loader's rate: the window it sizes is long enough
    storage = _storage(
        alone,
        source,
        pipeline,
        profile.cpu_work_bound(facts.usable_cpus),
        measure,
        dataset_bytes=dataset_bytes,
        fits=fits,
    )
    loader_only = (
        _pooled(storage.warm)
        if storage.warm
        else measure("the loader alone (model none)", alone, pipeline)
    )
    serial_config = dataclasses.replace(
        pipeline, num_workers=0, prefetch_factor=None, persistent_workers=False, main_threads=1
    )
    serial = (
        loader_only
        if serial_config == pipeline
        else measure(
            "the loader alone, num_workers=0, one thread (the stages' sum)", alone, serial_config
        )
    )
    return Diagnosis(
        name=config.study.name,
        pipeline=pipeline,
        device=device,
        usable_cpus=facts.usable_cpus,
        images=len(source),
        model=config.model.name,
        ceiling=ceiling,
        full=full,
        loader_only=loader_only,
        serial=serial,
        profile=profile,
        copy=time_copy(config, source, recipe, serial_config, device),
        decoders=decoder_profiles,
        storage=storage,
        choices=choices,
        failures=tuple(failures),
    )


def _profile(
    config: AutotuneConfig,
    source: Source,
    recipe: Recipe,
    pipeline: PipelineConfig,
    choices: dict[str, list[Any]],
) -> tuple[StageProfile, dict[str, StageProfile]]:
    """The stages of the pipeline's decoder on ``diagnose.samples`` samples, and of every
    decoder of the space on the same ``diagnose.decoder_samples``."""
    profiled = _cpu_decoder(pipeline.decoder)
    log.info(
        "diagnose: timing each stage on %d samples", min(len(source), config.diagnose.samples)
    )
    profile = profile_stages(
        source, recipe, profiled, config.diagnose.samples, pipeline.batch_size, config.seed
    )
    compared = pick(len(source), config.diagnose.decoder_samples, config.seed + 1)
    names = [n for n in choices.get("decoder", []) if n == _cpu_decoder(n)]
    return profile, {
        name: profile_stages(
            source,
            recipe,
            name,
            batch_size=pipeline.batch_size,
            seed=config.seed,
            indices=compared,
        )
        for name in dict.fromkeys([profiled, *names])
    }


def time_copy(
    config: AutotuneConfig,
    source: Source,
    recipe: Recipe,
    serial: PipelineConfig,
    device: str,
) -> StageTime:
    """The copy to the device (and the normalization), timed here on one batch with one
    thread, as in the serial loader run the stages are checked against."""
    import torch
    from torch.utils.data import RandomSampler

    from autotune.pipeline import decoders, loader

    torch_device = torch.device(device)
    if decoders.DECODERS[serial.decoder].replaces_loader:  # DALI: no DataLoader to time
        serial = dataclasses.replace(serial, decoder="pil")
    # enough batches for the timing, however few images there are
    draws = RandomSampler(
        range(len(source)),
        replacement=True,
        num_samples=8 * serial.batch_size,
        generator=torch.Generator().manual_seed(config.seed),
    )
    tuned = loader.build(
        source, serial, recipe=recipe, device=torch_device, seed=config.seed, sampler=draws
    )
    sync = torch.cuda.synchronize if torch_device.type == "cuda" else (lambda: None)
    with threads(1):
        return profile_copy(tuned.dataloader, tuned.stage, sync=sync)


def _pooled(runs: tuple[Measurement, ...]) -> Measurement:
    """Several runs of one loader as one: the median of all their sub-windows."""
    subs = tuple(rate for m in runs for rate in m.sub_window_samples_per_s)
    return dataclasses.replace(
        runs[0],
        samples_per_s=statistics.median(subs),
        sub_window_samples_per_s=subs,
        data_wait_fraction=statistics.mean(m.data_wait_fraction for m in runs),
        timed_batches=sum(m.timed_batches for m in runs),
    )


def _cpu_decoder(name: str) -> str:
    """A decoder that runs in the workers: a device decoder's stages are profiled with Pillow
    (its workers only read bytes)."""
    from autotune.pipeline import decoders

    return "pil" if getattr(decoders.DECODERS.get(name), "on_device", False) else name


def _storage(
    alone: AutotuneConfig,
    source: Source,
    pipeline: PipelineConfig,
    rate: float,
    measure: Callable[[str, AutotuneConfig, PipelineConfig], Measurement | None],
    *,
    dataset_bytes: int,
    fits: bool,
) -> Storage:
    """The loader alone from storage, then from the page cache, over the same window and the
    same files, in ``STORAGE_ROUNDS`` interleaved rounds."""
    paths = list(source.paths)
    facts = {"dataset_bytes": dataset_bytes, "fits_in_cache": fits}
    if not page_cache.evict(paths):
        return Storage(**facts, note="posix_fadvise is not available here: storage not compared")
    # in random order, as a shuffling sampler reads them: no read-ahead into the next file
    timed = [paths[i] for i in pick(len(paths), READ_TIMING_FILES, alone.seed)]
    random.Random(alone.seed).shuffle(timed)
    read_cold = time_reads(timed)
    read_warm = time_reads(timed)
    page_cache.evict(timed)
    checked = paths[:: max(1, len(paths) // RESIDENCY_CHECK_FILES)]
    cached = page_cache.resident_fraction(checked)
    if cached is not None and cached > 0.05:  # dirty pages (files just written) stay: flush
        page_cache.evict(paths, flush=True)
        cached = page_cache.resident_fraction(checked)
    facts.update(read_cold=read_cold, read_warm=read_warm, cached_after_eviction=cached)
    if cached is not None and cached > 0.05:
        return Storage(
            **facts,
            note=f"eviction did not take ({cached:.0%} of the pages stayed cached: tmpfs, or a "
            "file system that ignores posix_fadvise): storage was not compared",
        )
    bs = pipeline.batch_size
    window = storage_window(
        alone.window,
        epoch_batches=len(source) // bs,
        buffered=pipeline.buffered_batches,
        align=max(1, pipeline.num_workers),
        rate=rate,
        batch_size=bs,
    )
    cold: list[Measurement] = []
    warm: list[Measurement] = []
    if window is not None:
        same = dataclasses.replace(alone, window=window)
        for round_ in range(1, STORAGE_ROUNDS + 1):
            if round_ > 1:
                page_cache.evict(paths)
            label = f"the loader alone from storage (files evicted), round {round_}"
            c = measure(label, same, pipeline)
            # the same seed reads the same files: the cold run has just cached them
            w = measure(f"the loader alone from the page cache, round {round_}", same, pipeline)
            if c is None or w is None:
                break
            cold.append(c)
            warm.append(w)
    if fits:
        page_cache.warm(paths)  # back to the steady state the other runs see
    if window is None:
        return Storage(
            **facts,
            note=f"{len(source)} files are too few for a timed window inside one pass over "
            "them: the loader was not run from storage",
        )
    note = (
        f"each run timed {_count(window.sub_windows, 'sub-window')} of "
        f"{_count(window.batches_per_window, 'batch')} inside one pass over the {len(source)} "
        "files: every read of a cold run came from storage, and its page-cache twin read the "
        "same files"
    )
    return Storage(tuple(cold), tuple(warm), **facts, note=note)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}{'es' if noun.endswith('ch') else 's'}"

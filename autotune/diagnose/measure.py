"""``python -m autotune mode=diagnose``: where the time goes, and which limit binds.

Measured, never guessed: the ceiling, the full training rate and the loader alone come from
the tuner's own child-process trials; the per-stage times from an instrumented run of the same
pieces in this process (``autotune.runtime.stages``); storage against CPU from the same
loader-only run with the files evicted from the page cache and cached
(``autotune.diagnose.storage``). ``autotune.diagnose.diagnosis`` and ``.verdict`` judge the
figures and ``autotune.diagnose.markdown`` writes them up. Of the user's own Dataset, its read
and collate are the stages (``autotune.runtime.own_stages``), and storage is not compared.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import RandomSampler

from autotune.diagnose import files_vs_shards, page_cache
from autotune.diagnose.diagnosis import Diagnosis
from autotune.diagnose.files_vs_shards import FilesVsShards
from autotune.diagnose.markdown import to_markdown
from autotune.diagnose.storage import Storage, measure_storage
from autotune.errors import UsageError
from autotune.pipeline import decoders, loader, recipes
from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.pipeline.prepared import DecodedPixels, PreparedCopy
from autotune.pipeline.recipes import Recipe
from autotune.pipeline.user_api import load_pipeline_config
from autotune.pipeline.user_data import Data, UserData
from autotune.runtime.copy_profile import profile_copy
from autotune.runtime.lock import host_lock
from autotune.runtime.measurement import Measurement
from autotune.runtime.own_stages import profile_own
from autotune.runtime.stages import StageProfile, StageTime, pick, profile_stages
from autotune.runtime.threads import threads
from autotune.runtime.trial import run_trial
from autotune.schema import AutotuneConfig, ModelConfig
from autotune.session import Session
from autotune.session.session import Run

log = logging.getLogger(__name__)

CACHE_SHARE = 0.5  # warm the page cache only with a dataset under this share of free RAM
OWN_FILES = (
    "not compared: autotune does not know which files your Dataset reads; whether its reads "
    "wait shows in its read's wall time against its CPU time (above)"
)
COPY_BATCHES = 8  # batches drawn to time the copy to the device, however few images


def run(session: Session, pipeline: PipelineConfig) -> int:
    """``mode=diagnose``: measures, prints the diagnosis and writes it to
    ``studies/<study.name>/diagnosis.md``. Returns the exit code."""
    conf = session.conf
    with host_lock(Path(conf.studies_dir)):
        d = diagnose(session, pipeline)
    if d.full is None and d.loader_only is None:
        print("\n".join(["diagnose: no run finished:", *d.failures]), flush=True)
        return 1
    text = to_markdown(d, conf.diagnose.slowest)
    folder = Path(conf.studies_dir) / d.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "diagnosis.md").write_text(text)
    print(text, flush=True)
    print(f"written to {folder / 'diagnosis.md'}", flush=True)
    return 0


def pipeline_to_diagnose(conf: AutotuneConfig) -> PipelineConfig:
    """The pipeline to diagnose: ``pipeline=best.yaml`` (its whole tuned pipeline), or the
    baseline: the pipeline as it is under PyTorch's defaults."""
    if conf.pipeline is None:
        return PipelineConfig(batch_size=conf.batch_size, decoder=AS_IS)
    pipeline = load_pipeline_config(conf.pipeline)
    if pipeline.as_is:
        return pipeline
    reason = decoders.DECODERS[pipeline.decoder].unavailable_reason()
    if reason:
        raise UsageError(f"{conf.pipeline}: decoder {pipeline.decoder} {reason}")
    return pipeline


class _Trials:
    """Labelled child-process runs; what failed is kept, one line each, in ``failures``."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.failures: list[str] = []

    def __call__(
        self, label: str, session: Session, pipeline: PipelineConfig
    ) -> Measurement | None:
        log.info("diagnose: %s", label)
        outcome = self.run(session.job(pipeline), timeout_s=session.conf.study.trial_timeout)
        if outcome.measurement is None:
            assert outcome.failure is not None
            self.failures.append(f"{label}: {outcome.failure.kind}: {outcome.failure.message}")
        return outcome.measurement


def diagnose(session: Session, pipeline: PipelineConfig, *, run: Run = run_trial) -> Diagnosis:
    """Runs every measurement of the diagnosis (trials in child processes through ``run``,
    the stage profile here) and returns them, at the pipeline's batch size."""
    if pipeline.batch_size != session.conf.batch_size:
        session = session.with_conf(
            dataclasses.replace(session.conf, batch_size=pipeline.batch_size)
        )
    conf, source = session.conf, session.source
    choices = {k.name: k.values() for k in session.space.knobs}
    recipe = recipes.from_config(conf.recipe)
    trials = _Trials(run)
    copy = session.prepared_copy(pipeline)  # a pipeline with a prepared copy reads only it
    own = isinstance(source, UserData)  # its files, if any, are its own business
    paths = [] if own else copy.paths if copy is not None else list(source.paths)
    dataset_bytes = page_cache.total_bytes(paths)
    fits = dataset_bytes <= CACHE_SHARE * session.facts.memory_available_bytes
    if fits:
        page_cache.warm(paths)  # the steady state of a dataset that fits in memory
    profile, decoder_profiles = _profile(session, recipe, pipeline, choices, copy)
    # the tuner's ceiling, kept whole: its CPU time is the step's with the better of one
    # torch thread and all CPUs
    ceiling = session.measure_ceiling(run=run, failures=trials.failures)
    full = trials(f"full training, {pipeline.short()}", session, pipeline)
    alone = session.with_conf(dataclasses.replace(conf, model=ModelConfig(name="none")))
    # the CPU-work bound is above the loader's rate: the window it sizes is long enough
    rate = profile.cpu_work_bound(session.facts.usable_cpus)
    if own:
        storage = Storage(note=OWN_FILES)
    else:
        storage = measure_storage(
            alone, pipeline, rate, trials, dataset_bytes=dataset_bytes, fits=fits, paths=paths
        )
    loader_only, serial, serial_config = _loader_alone(alone, pipeline, storage, trials)
    return Diagnosis(
        name=conf.study.name,
        pipeline=pipeline,
        device=session.device,
        usable_cpus=session.facts.usable_cpus,
        images=len(source),
        model=conf.model.name,
        ceiling=ceiling,
        full=full,
        loader_only=loader_only,
        serial=serial,
        profile=profile,
        copy=time_copy(conf, source, recipe, serial_config, session.device, prepared=copy),
        decoders=decoder_profiles,
        storage=storage,
        shards=_files_or_shards(alone, pipeline, rate, trials, copy),
        choices=choices,
        failures=tuple(trials.failures),
    )


def _files_or_shards(
    alone: Session,
    pipeline: PipelineConfig,
    rate: float,
    trials: _Trials,
    copy: PreparedCopy | None,
) -> FilesVsShards:
    """The same samples as loose files and as shards, where that can be compared."""
    conf = alone.conf
    if isinstance(alone.source, UserData):
        return FilesVsShards(note="not compared: your own Dataset is read as it is")
    if copy is not None:
        return FilesVsShards(note=f"not compared: the pipeline reads its {copy.kind} copy")
    if not conf.diagnose.shards:
        return FilesVsShards(note="not compared (diagnose.shards=false)")
    shards_dir = Path(conf.studies_dir) / ".diagnose-shards"
    return files_vs_shards.measure(alone, pipeline, rate, trials, shards_dir)


def _loader_alone(
    alone: Session, pipeline: PipelineConfig, storage: Storage, trials: _Trials
) -> tuple[Measurement | None, Measurement | None, PipelineConfig]:
    """The loader without a model: as configured (the page-cache runs pooled, when storage
    was compared), and serial (no workers, one thread), which the stages must add up to.
    Returns (as configured, serial, the serial pipeline)."""
    loader_only = (
        _pooled(storage.warm)
        if storage.warm
        else trials("the loader alone (model none)", alone, pipeline)
    )
    serial_config = pipeline.without_workers(main_threads=1)
    if serial_config == pipeline:
        return loader_only, loader_only, serial_config
    label = "the loader alone, num_workers=0, one thread (the stages' sum)"
    return loader_only, trials(label, alone, serial_config), serial_config


def _profile(
    session: Session,
    recipe: Recipe,
    pipeline: PipelineConfig,
    choices: dict[str, list[Any]],
    copy: PreparedCopy | None,
) -> tuple[StageProfile, dict[str, StageProfile]]:
    """The stages of the pipeline's decoder on ``diagnose.samples`` samples, and of every
    decoder of the space on the same ``diagnose.decoder_samples``: of what the pipeline
    reads (its prepared copy, where it has one: a decoded copy decodes nothing)."""
    conf = session.conf
    if isinstance(session.source, UserData):
        log.info("diagnose: timing your Dataset's read and collate on its samples")
        own = profile_own(session.source, conf.diagnose.samples, pipeline.batch_size, conf.seed)
        return own, {}
    source = copy.data() if copy is not None else session.source
    profiled = _cpu_decoder(pipeline.decoder)
    log.info("diagnose: timing each stage on %d samples", min(len(source), conf.diagnose.samples))
    # the slowest listed, timed again with as many more: one preempted once is not listed
    profile = profile_stages(
        source, recipe, profiled, conf.diagnose.samples, pipeline.batch_size, conf.seed,
        second_look=2 * conf.diagnose.slowest,
    )  # fmt: skip
    if isinstance(source, DecodedPixels):
        return profile, {}
    compared = pick(len(source), conf.diagnose.decoder_samples, conf.seed + 1)
    names = [n for n in choices.get("decoder", []) if n == _cpu_decoder(n)]
    return profile, {
        name: profile_stages(
            source,
            recipe,
            name,
            batch_size=pipeline.batch_size,
            seed=conf.seed,
            indices=compared,
        )
        for name in dict.fromkeys([profiled, *names])
    }


def time_copy(
    conf: AutotuneConfig,
    source: Data,
    recipe: Recipe,
    serial: PipelineConfig,
    device: str,
    *,
    prepared: PreparedCopy | None = None,
) -> StageTime:
    """The copy to the device (and the normalization), timed here on one batch with one
    thread, as in the serial loader run the stages are checked against (reading
    ``prepared``, the copy ``serial.cache`` names)."""
    torch_device = torch.device(device)
    if getattr(decoders.DECODERS.get(serial.decoder), "replaces_loader", False):  # DALI
        serial = dataclasses.replace(serial, decoder="pil")
    # enough batches for the timing, however few samples there are (a stream: read again)
    stream = isinstance(source, UserData) and source.iterable
    draws = RandomSampler(
        range(len(source)),
        replacement=True,
        num_samples=COPY_BATCHES * serial.batch_size,
        generator=torch.Generator().manual_seed(conf.seed),
    )
    tuned = loader.build(
        source,
        serial,
        recipe=recipe,
        device=torch_device,
        seed=conf.seed,
        sampler=None if stream else draws,
        repeat=stream,
        prepared=prepared,
    )
    sync = torch.cuda.synchronize if torch_device.type == "cuda" else (lambda: None)
    with threads(1):
        return profile_copy(tuned.dataloader, tuned.stage, sync=sync)


def _pooled(runs: tuple[Measurement, ...]) -> Measurement:
    """Several runs of one loader as one: the median of the runs' rates (each its samples
    over its time), and all their sub-windows and settled spans for the spread."""
    subs = tuple(rate for m in runs for rate in m.sub_window_samples_per_s)
    return dataclasses.replace(
        runs[0],
        samples_per_s=statistics.median(m.samples_per_s for m in runs),
        sub_window_samples_per_s=subs,
        settled_samples_per_s=tuple(rate for m in runs for rate in m.settled_sub_windows),
        data_wait_fraction=statistics.mean(m.data_wait_fraction for m in runs),
        timed_batches=sum(m.timed_batches for m in runs),
    )


def _cpu_decoder(name: str) -> str:
    """A decoder that runs in the workers: a device decoder's stages are profiled with Pillow
    (its workers only read bytes); the pipeline as it is profiles its own."""
    return "pil" if getattr(decoders.DECODERS.get(name), "on_device", False) else name

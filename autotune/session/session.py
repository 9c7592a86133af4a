"""The session: what a run is about, built once from the conf and handed to every mode.

Machine facts, the device, the source, the search space and the fingerprint that a stored
study must match: the tuner, ``mode=diagnose`` and the benchmark all take one ``Session``, and
none of them rebuilds it. The ceiling (the train step on a batch already on the device) is
measured here too, once, because both the tuner and the diagnosis stand on it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from autotune import machine
from autotune.machine import MachineFacts
from autotune.pipeline import preparation, prepared, recipes, sources
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.user_data import Data, UserData
from autotune.runtime.job import TrialJob
from autotune.runtime.measurement import Measurement
from autotune.runtime.trial import TrialOutcome, run_trial
from autotune.runtime.workload import TrainStep, build_model
from autotune.schema import AutotuneConfig
from autotune.session import copy_fit, fingerprints, read_wait
from autotune.session.data import load_source
from autotune.session.placement import resolve_device, resolve_ranks
from autotune.session.space import SearchSpace

log = logging.getLogger(__name__)

Run = Callable[..., TrialOutcome]  # run_trial, or a wrapper of it (a stop event, a fake)
# what the train step is made of: a ceiling measured for one holds for the same keys only
STEP_KEYS = (
    "model",
    "recipe",
    "window",
    "batch_size",
    "seed",
    "optimizer",
    "precision",
    "step",
    "compile",
)


def _with_batch_size(conf: AutotuneConfig, batch_size: int) -> AutotuneConfig:
    """``conf`` at another batch size, the search space's fixed batch size with it."""
    knobs = dict(conf.search_space.knobs)
    fixed = knobs.get("batch_size")
    if fixed is not None and fixed.type == "fixed":
        knobs["batch_size"] = dataclasses.replace(fixed, value=batch_size)
    space = dataclasses.replace(conf.search_space, knobs=knobs)
    return dataclasses.replace(conf, batch_size=batch_size, search_space=space)


def prepared_root(conf: AutotuneConfig) -> Path:
    """Where prepared copies live: beside the studies, shared by all of them."""
    return Path(conf.studies_dir).resolve() / "prepared"


@dataclass(frozen=True)
class Session:
    """Everything a mode needs besides its own settings.

    Example:
        >>> session = Session.build(conf)
        >>> outcome = run_trial(session.job(PipelineConfig(num_workers=2)), timeout_s=60)
    """

    conf: AutotuneConfig
    facts: MachineFacts
    device: str
    source: Data
    space: SearchSpace
    source_fingerprint: str
    ranks: int = 1  # processes that train together (DDP), each with its own loader
    # the ceiling and why its runs failed: empty until measured, once per train step
    _ceiling: list[tuple[Measurement | None, list[str]]] = field(
        default_factory=list, compare=False, repr=False
    )
    _copies: dict[str, prepared.PreparedCopy] = field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def build(cls, conf: AutotuneConfig, *, dataset: Any = None) -> Session:
        """Detects the machine, loads the source, checks the model, builds the space: every
        bad input fails here, before anything is measured. ``dataset``: a Dataset object of
        the class ``conf.dataset._target_`` names, read as it is (the Python API)."""
        facts = machine.detect(want_cuda=conf.device != "cpu")
        device = resolve_device(conf.device, facts.cuda_available)
        ranks = resolve_ranks(conf.ranks, device, facts)
        source, example = load_source(conf.dataset, dataset)
        if isinstance(source, UserData) and source.batch_size not in (None, conf.batch_size):
            log.info("batch size %d: the DataModule's train_dataloader()", source.batch_size)
            conf = _with_batch_size(conf, source.batch_size)
        # a bad model, optimizer or loss fails now; the user's step is tried on their batch
        model = build_model(conf.model, num_classes=len(source.classes) or None)
        step = TrainStep(
            model,
            torch.device("cpu"),
            lr=conf.model.lr,
            optimizer=conf.optimizer,
            precision=conf.precision if device == "cpu" else "fp32",
            loss=conf.step,
        )
        if isinstance(source, UserData):
            step.check(example, dataset=f"dataset._target_={source.target}")
        recipe = recipes.from_config(conf.recipe)  # and so does an unknown recipe
        # where reads wait, more workers than CPUs: measured on the user's storage
        waits = (
            read_wait.measure(source, recipe, facts)
            if isinstance(source, sources.Source)
            else None
        )
        fit = (
            copy_fit.measure(
                source,
                recipe,
                facts,
                root=prepared_root(conf),
                budget_gb=conf.study.memory_budget_gb,
                epochs=conf.study.epochs,
            )
            if isinstance(source, sources.Source) and "cache" in conf.search_space.knobs
            else None
        )
        space = SearchSpace.from_config(
            conf.search_space,
            facts,
            device=device,
            batch_size=conf.batch_size,
            own_dataset=isinstance(source, UserData),
            ranks=ranks,
            read_wait=waits,
            copy_fit=fit,
        )
        return cls(conf, facts, device, source, space, source.fingerprint(), ranks)

    def with_conf(self, conf: AutotuneConfig) -> Session:
        """The same machine, data and space under other study or window settings (the
        benchmark's studies, the diagnosis's loader-only runs)."""
        # the ceiling is the train step's: shared only while the step is the same
        same_step = all(getattr(conf, key) == getattr(self.conf, key) for key in STEP_KEYS)
        same_copies = (conf.recipe, conf.studies_dir) == (
            self.conf.recipe,
            self.conf.studies_dir,
        )
        return dataclasses.replace(
            self,
            conf=conf,
            _ceiling=self._ceiling if same_step else [],
            _copies=self._copies if same_copies else {},
        )

    @property
    def fingerprint(self) -> str:
        """What a study's numbers depend on; a resumed study must match it."""
        return fingerprints.of_study(self.conf, self._job, self.space.fingerprint())

    @property
    def job_fingerprint(self) -> str:
        """The job a study tunes, however it searches: not its space, window or seed."""
        return fingerprints.of_job(self._job)

    @property
    def _job(self) -> dict[str, Any]:
        return fingerprints.job_parts(self.conf, self.source_fingerprint, self.device, self.ranks)

    @property
    def default_threads(self) -> int:
        """torch's threads in a user's process left as it is: all usable CPUs alone; 1 in
        each rank of several (torchrun sets ``OMP_NUM_THREADS=1``)."""
        return torch.get_num_threads() if self.ranks == 1 else 1

    @property
    def cpus_per_rank(self) -> int:
        """Each rank's share of the usable CPUs (its workers and threads), at least one."""
        return max(1, self.facts.usable_cpus // self.ranks)

    @property
    def epoch_samples(self) -> int | None:
        """Samples in one epoch of whole batches, when the objective projects an epoch."""
        conf = self.conf
        if not conf.study.epoch_aware:
            return None
        return len(self.source) // conf.batch_size * conf.batch_size

    def job(
        self, pipeline: PipelineConfig, kind: str = "window", *, ranking: bool = False
    ) -> TrialJob:
        """One measurement of ``pipeline`` on this session's workload; ``ranking``: a run that
        ranks configs (its window may grow to ``window.confirm_max_timed_s``)."""
        conf = self.conf
        window = conf.window
        if ranking:
            window = dataclasses.replace(window, max_timed_s=window.confirm_max_timed_s)
        limit = conf.study.trial_memory_limit_gb
        copy = self.prepared_copy(pipeline)
        return TrialJob(
            pipeline=pipeline,
            source=self.source,
            model=conf.model,
            recipe=conf.recipe,
            window=window,
            device=self.device,
            seed=conf.seed,
            kind=kind,  # type: ignore[arg-type]
            memory_limit_bytes=int(limit * 2**30) if limit else None,
            optimizer=conf.optimizer,
            precision=conf.precision,
            step=conf.step,
            compile_cache=self.compile_cache,
            ranks=self.ranks,
            prepared=copy,
        )

    def prepared_copy(self, pipeline: PipelineConfig) -> prepared.PreparedCopy | None:
        """The prepared copy ``pipeline.cache`` names, prepared first where there is none
        (with every usable CPU, timed: what it costs once is charged to the epochs)."""
        if pipeline.cache == "none" or not isinstance(self.source, sources.Source):
            return None
        if pipeline.cache not in self._copies:  # keyed by every file's stat: once
            self._copies[pipeline.cache] = preparation.ensure(
                self.source,
                recipes.from_config(self.conf.recipe),
                pipeline.cache,
                prepared_root(self.conf),
                processes=self.facts.usable_cpus,
            )
        return self._copies[pipeline.cache]

    def preparation_per_epoch(self, pipeline: PipelineConfig) -> float:
        """Seconds of ``pipeline``'s prepared copy charged to each epoch: its preparation,
        once, shared by the ``study.epochs`` planned (0 without a copy)."""
        copy = self.prepared_copy(pipeline)
        return copy.seconds / self.conf.study.epochs if copy is not None else 0.0

    @property
    def compile_cache(self) -> str | None:
        """Where trials keep Inductor's compiled code (``compile=true``): shared by all the
        trials of every study here, so that only the first compiles from scratch."""
        if not self.conf.compile:
            return None
        return str((Path(self.conf.studies_dir) / ".compile-cache").resolve())

    def measure_ceiling(
        self, run: Run = run_trial, failures: list[str] | None = None
    ) -> Measurement | None:
        """The train step fed one batch already on the device, with the better of one torch
        thread and all usable CPUs: on a busy host an all-thread step can be many times
        slower than one thread (OpenMP threads wait on each other), and the ceiling is the
        step's best. Measured once per session; None when no run finished (the reasons are
        appended to ``failures``)."""
        if not self._ceiling:
            self._ceiling.append(self._measure_ceiling(run))
        ceiling, why = self._ceiling[0]
        if failures is not None:
            failures.extend(why)
        return ceiling

    def _measure_ceiling(self, run: Run) -> tuple[Measurement | None, list[str]]:
        measured, failures = [], []
        for threads in dict.fromkeys((1, self.cpus_per_rank)):
            label = (
                f"the ceiling (the train step on a batch already on the device), "
                f"{threads} thread(s)"
            )
            log.info("measuring %s", label)
            config = PipelineConfig(batch_size=self.conf.batch_size, main_threads=threads)
            outcome = run(self.job(config, "ceiling"), timeout_s=self.conf.study.trial_timeout)
            if outcome.measurement is None:
                assert outcome.failure is not None
                log.warning("the ceiling could not be measured: %s", outcome.failure)
                failures.append(f"{label}: {outcome.failure.kind}: {outcome.failure.message}")
                continue
            measured.append(outcome.measurement)
            if self.conf.compile and outcome.measurement.first_step_s is not None:
                log.info(
                    "compile=true: the first step, compiling, took %.1f s (not timed)",
                    outcome.measurement.first_step_s,
                )
        return max(measured, key=lambda m: m.samples_per_s, default=None), failures

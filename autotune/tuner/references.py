"""The study's reference points, measured once per study: the ceiling (the step with data
already in memory) and the CPU-work bound (what decoding and augmenting, or the user's own
Dataset's reads, allow on all CPUs)."""

from __future__ import annotations

import logging

import optuna

from autotune.pipeline import decoders, recipes
from autotune.pipeline.config import AS_IS
from autotune.pipeline.sources import Source
from autotune.runtime.own_stages import profile_own
from autotune.runtime.stages import profile_stages
from autotune.session import Session
from autotune.session.session import Run
from autotune.tuner import hosts, store
from autotune.tuner.lease import Leases
from autotune.tuner.store import StudyKey

log = logging.getLogger(__name__)

BOUND_PROFILE_SAMPLES = 48  # samples profiled per decoder for the CPU-work bound


def measure_cpu_work_bound(session: Session) -> dict[str, float]:
    """Per CPU decoder of the space: usable CPUs / CPU seconds per sample of read, decode,
    augment and collate (``runtime.stages``): what no worker count can exceed. Of the user's
    own Dataset, read as it is: of its read and its collate (``runtime.own_stages``)."""
    conf = session.conf
    cpus = session.facts.usable_cpus
    if not isinstance(session.source, Source):
        log.info("profiling your Dataset's read and collate: the CPU-work bound")
        own = profile_own(session.source, BOUND_PROFILE_SAMPLES, conf.batch_size, conf.seed)
        return {AS_IS: round(own.cpu_work_bound(cpus), 1)}
    log.info("profiling the loader's stages per decoder: the CPU-work bound")
    recipe = recipes.from_config(conf.recipe)
    names = session.space.choices("decoder") or [AS_IS]  # no decoders: as it is
    bounds = {}
    for name in names:
        if name != AS_IS and decoders.DECODERS[name].on_device:
            continue  # decoded on the device: not a CPU-work bound of the same kind
        profile = profile_stages(
            session.source, recipe, name, BOUND_PROFILE_SAMPLES, conf.batch_size, conf.seed
        )
        bounds[name] = round(profile.cpu_work_bound(cpus), 1)
    return bounds


def reference_points(session: Session, study: optuna.Study, run: Run, leases: Leases) -> None:
    """The ceiling and the CPU-work bounds, once per study (a resumed study has them), by
    one host of those sharing it."""
    attrs = store.study_attrs(study)
    if StudyKey.CEILING in attrs and StudyKey.CPU_WORK_BOUND in attrs:
        return
    with hosts.measuring_references(leases) as here:
        if here and StudyKey.CEILING not in attrs:
            ceiling = session.measure_ceiling(run)
            if ceiling is not None:
                store.set_study_attr(study, StudyKey.CEILING, round(ceiling.samples_per_s, 1))
        if here and StudyKey.CPU_WORK_BOUND not in attrs:
            bounds = measure_cpu_work_bound(session)
            if bounds:
                store.set_study_attr(study, StudyKey.CPU_WORK_BOUND, bounds)

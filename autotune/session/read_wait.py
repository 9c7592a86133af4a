"""Workers beyond the CPUs when reads wait. On storage that answers late (NFS, Lustre, a
FUSE-mounted bucket) a worker spends most of a sample blocked in ``read()``, using no CPU, so
keeping every CPU busy takes more workers than CPUs: about ``CPUs x wall / CPU`` seconds per
sample. A short profile of the loader's stages, before the search, decides how far
``num_workers`` may go; on data that reads at CPU speed it stays at the CPUs.
"""

from __future__ import annotations

import math
import resource
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.machine import MachineFacts
from autotune.pipeline.recipes import Recipe
from autotune.pipeline.sources import Source
from autotune.runtime.stages import OWN_READ, StageProfile, profile_stages

PROFILED = 16  # samples, read twice: the second pass is what a study's trials meet
WAITING = 1.5  # wall / CPU per sample above which reads are said to wait
MOST_WORKERS = 64
WORKER_MEMORY = 256 * 2**20  # bytes a worker process is counted at (its copy of the loader)
WORKER_FILES = 16  # file descriptors a worker is counted at (pipes, shared memory, files)


@dataclass(frozen=True)
class ReadWait:
    """A sample's way through the loader on this storage, and what it asks of the workers."""

    wall_s: float  # per sample: read, decode, augment, collate (one worker)
    cpu_s: float
    read_s: float | None  # wall seconds of the read alone (None: not told apart)
    workers: int  # num_workers that keep the CPUs busy (the CPUs where reads do not wait)
    limit: str = ""  # what capped ``workers`` below what the waits ask for
    busy: float = 1.0  # the other stages' wall over their CPU: how much a busy machine stretches

    @property
    def waits(self) -> bool:
        return reads_wait(self.wall_s, self.cpu_s, self.busy)

    def note(self, cpus: int) -> str:
        capped = f" ({self.limit})" if self.limit else ""
        read = "" if self.read_s is None else f" (reading it: {1000 * self.read_s:.1f} ms)"
        return (
            f"reads wait: a sample takes {1000 * self.wall_s:.1f} ms in a worker for "
            f"{1000 * self.cpu_s:.1f} ms of CPU{read}, so num_workers is searched up to "
            f"{self.workers}{capped}, beyond the {cpus} usable CPUs"
        )


def reads_wait(wall_s: float, cpu_s: float, busy: float) -> bool:
    """Whether a sample's ``wall_s`` over its ``cpu_s`` says its read waits on storage, once
    the ``busy`` machine's own stretch (``stretch``) is divided out."""
    return wall_s > WAITING * cpu_s * busy


def stretch(profile: StageProfile, stages: Sequence[str] | None = None) -> float:
    """How much the machine stretches ``stages`` (None: all) besides the read: their wall over
    their CPU, at least 1. A read that waits stretches the read alone; another process on the
    cores (a busy CI host, a neighbour's job) stretches every stage, and is divided out."""
    after = [name for name in stages or profile.stages if name not in ("read", OWN_READ)]
    if not after:
        return 1.0
    return max(1.0, profile.wall_s(after) / max(profile.cpu_s(after), 1e-6))


def _worker_limit(facts: MachineFacts) -> tuple[int, str]:
    """The most workers memory and file descriptors allow, and which one binds."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    limits = {
        f"{MOST_WORKERS} at most": MOST_WORKERS,
        "memory": facts.memory_available_bytes // WORKER_MEMORY,
        "open files (ulimit -n)": soft // WORKER_FILES if soft > 0 else MOST_WORKERS,
    }
    name = min(limits, key=lambda k: limits[k])
    return max(1, int(limits[name])), name


def measure(source: Source, recipe: Recipe, facts: MachineFacts) -> ReadWait:
    """Profiles ``PROFILED`` samples twice (the second pass timed) with PIL's decode."""
    profiles = [profile_stages(source, recipe, "pil", PROFILED, warmup=0) for _ in range(2)]
    profile = profiles[-1]
    wall, cpu = profile.wall_s(), max(profile.cpu_s(), 1e-6)
    read = profile.stages["read"].wall_s
    return of_sample(wall, cpu, facts, read_s=read, busy=stretch(profile))


def of_sample(
    wall_s: float, cpu_s: float, facts: MachineFacts, *, read_s: float | None, busy: float = 1.0
) -> ReadWait:
    """What a sample's ``wall_s`` and ``cpu_s`` (> 0) in a worker ask of the workers: the usable
    CPUs where reads do not wait, else ``CPUs x wall / CPU`` (a power of 2, stable on resume),
    as far as memory and open files allow."""
    cpus = facts.usable_cpus
    at_cpus = ReadWait(wall_s, cpu_s, read_s, cpus, busy=busy)
    if not at_cpus.waits:
        return at_cpus
    wanted = 2 ** math.ceil(math.log2(cpus * wall_s / (cpu_s * busy)))
    most, binding = _worker_limit(facts)
    workers = max(cpus, min(wanted, most))
    return ReadWait(wall_s, cpu_s, read_s, workers, binding if most < wanted else "", busy)

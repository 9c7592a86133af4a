"""Workers beyond the CPUs when reads wait. On storage that answers late (NFS, Lustre, a
FUSE-mounted bucket) a worker spends most of a sample blocked in ``read()``, using no CPU, so
keeping every CPU busy takes more workers than CPUs: about ``CPUs x wall / CPU`` seconds per
sample. A short profile of the loader's stages, before the search, decides how far
``num_workers`` may go; on data that reads at CPU speed it stays at the CPUs.
"""

from __future__ import annotations

import math
import resource
from dataclasses import dataclass

from autotune.machine import MachineFacts
from autotune.pipeline.recipes import Recipe
from autotune.pipeline.sources import Source
from autotune.runtime.stages import profile_stages

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
    read_s: float  # wall seconds of the read alone
    workers: int  # num_workers that keep the CPUs busy (the CPUs where reads do not wait)
    limit: str = ""  # what capped ``workers`` below what the waits ask for
    busy: float = 1.0  # the other stages' wall over their CPU: how much a busy machine stretches

    @property
    def waits(self) -> bool:
        return self.wall_s > WAITING * self.cpu_s * self.busy

    def note(self, cpus: int) -> str:
        capped = f" ({self.limit})" if self.limit else ""
        return (
            f"reads wait: a sample takes {1000 * self.wall_s:.1f} ms in a worker for "
            f"{1000 * self.cpu_s:.1f} ms of CPU (reading it: {1000 * self.read_s:.1f} ms), so "
            f"num_workers is searched up to {self.workers}{capped}, beyond the {cpus} usable "
            "CPUs"
        )


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
    # Another process on the cores stretches every stage's wall over its CPU, and a read that
    # waits stretches the read alone: the stretch of the stages after it is the machine's
    # (a busy CI host, a neighbour's job), not the storage's, and is divided out.
    after = [name for name in profile.stages if name != "read"]  # decode, augment, collate
    busy = max(1.0, profile.wall_s(after) / max(profile.cpu_s(after), 1e-6))
    cpus = facts.usable_cpus
    at_cpus = ReadWait(wall, cpu, read, cpus, busy=busy)
    if not at_cpus.waits:
        return at_cpus
    # a power of 2: stable on resume
    wanted = 2 ** math.ceil(math.log2(cpus * wall / (cpu * busy)))
    most, binding = _worker_limit(facts)
    workers = max(cpus, min(wanted, most))
    return ReadWait(wall, cpu, read, workers, binding if most < wanted else "", busy)

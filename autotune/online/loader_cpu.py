"""Whether a run's reads wait on storage, read from the loader's own CPU on the run.

On storage that answers late (NFS, Lustre, a FUSE-mounted bucket) a worker spends most of a
sample blocked in ``read()``, using no CPU, and more workers than CPUs keep the CPUs busy
(``session.read_wait``: an offline study learns it from a profile of the loader before its
search). On the run, the meter reads the loader's CPU over each timed span: its workers'
processes', or without workers the training process's inside ``__next__``, where it reads its
samples itself; against the wall time the loader had for them (each worker's share of the
span, or the waits in ``__next__``). That counts only where the loop waits on the loader for
at least ``DATA_BOUND`` of its time (workers ahead of the loop idle, and their idle time is
not a read's), and where the CPUs idle for a third of the timed time or more, as the CPU the
process and its workers used says.

A sample that waits for a CPU takes wall time too: a neighbour's job on the cores (whose CPU
this process does not see, so its CPUs look idle), or more workers than cores. The time the
loader's threads were runnable and queued for a CPU (``runtime.sched``) is divided out, as a
study divides out the stretch of the stages that do not read.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from autotune.machine import MachineFacts
from autotune.online.reading import Reading
from autotune.runtime import sched
from autotune.runtime.sched import CpuTimes
from autotune.session import read_wait
from autotune.session.read_wait import WAITING, ReadWait

DATA_BOUND = 0.2  # the share of the loop's time spent waiting on the loader, at least


class WorkersCpu:
    """The CPU seconds used so far by the workers of the inner iterator being read, and
    those they were queued for a CPU (None: no workers, or one that cannot be read, such as
    one that has just died). It holds the iterator weakly: a loop that leaves an epoch early
    drops it, and torch then shuts its workers down, as it would without this."""

    def __init__(self) -> None:
        self._iterator: Callable[[], Any] = lambda: None

    @property
    def iterator(self) -> Any:
        return self._iterator()

    @iterator.setter
    def iterator(self, iterator: Any) -> None:
        self._iterator = weakref.ref(iterator)

    def __call__(self) -> CpuTimes | None:
        workers = getattr(self.iterator, "_workers", None)
        if not workers:
            return None
        try:
            each = [sched.process_times(w.pid) for w in workers]
        except (psutil.Error, TypeError, ValueError):
            return None
        return sum(each, sched.ZERO)


@dataclass
class LoaderTime:
    """The loader's wall, CPU and run-queue seconds over the timed spans that read them (each
    worker's share of a span, or the waits in ``__next__``), and the samples read in them."""

    wall_s: float = 0.0
    cpu: CpuTimes = sched.ZERO
    samples: int = 0

    def add(self, wall_s: float, cpu: CpuTimes, samples: int) -> None:
        queued = max(cpu.queued_s, 0.0)  # less where a thread ended, its count with it
        self.wall_s, self.samples = self.wall_s + wall_s, self.samples + samples
        self.cpu += CpuTimes(cpu.ran_s, queued)

    def per_sample(self) -> dict[str, float]:
        """A ``Reading``'s fields: a sample's wall, CPU and queued seconds (0: unread)."""
        samples = max(self.samples, 1)
        return dict(
            sample_wall_s=self.wall_s / samples,
            sample_cpu_s=self.cpu.ran_s / samples,
            sample_queued_s=self.cpu.queued_s / samples,
        )


def reads_wait(reading: Reading, facts: MachineFacts, ranks: int = 1) -> ReadWait | None:
    """Where ``reading``'s loop waited on a loader whose samples took mostly wall time, not
    CPU, while the CPUs (a rank's share) idled: how far ``num_workers`` goes beyond the CPUs
    (``ReadWait``); else None. Workers that wait for a CPU (more processes than cores, or a
    neighbour's job) also take wall time, not CPU: queued for a CPU, not asleep in a read."""
    cpus = max(1, facts.usable_cpus // ranks)
    busy = reading.cpu_s / (cpus * reading.seconds) if reading.seconds else 1.0
    wall, cpu = reading.sample_wall_s, reading.sample_cpu_s
    if reading.data_wait < DATA_BOUND or not cpu or busy * WAITING > 1:
        return None
    # a busy machine's stretch divided out, as a study's profile does (``read_wait.stretch``)
    stretch = 1.0 + reading.sample_queued_s / cpu
    found = read_wait.of_sample(wall, cpu, facts, read_s=None, busy=stretch)
    return found if found.waits else None

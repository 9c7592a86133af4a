"""Tests for autotune.online.loader_cpu: whether a run's reads wait, from the loader's own
CPU on the run, and how far that takes the workers the run explores."""

from __future__ import annotations

import dataclasses
import gc
import time

import pytest
import torch
from helpers import BRIEF_WINDOW
from torch.utils.data import Dataset

import autotune
from autotune.machine import detect
from autotune.online.loader_cpu import DATA_BOUND, LoaderTime, WorkersCpu, reads_wait
from autotune.online.reading import Reading
from autotune.online.space import online_space, priors
from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.runtime.sched import CpuTimes

FACTS = dataclasses.replace(detect(want_cuda=False), usable_cpus=2)
START = PipelineConfig(decoder=AS_IS, batch_size=4, main_threads=1)  # a point of the space


def reading(
    data_wait: float, wall_s: float, cpu_s: float, used_s: float = 0.5, queued_s: float = 0.0
) -> Reading:
    """1 s timed; ``used_s``: the CPU seconds the process and its workers used in it."""
    return Reading(
        START, 100.0, 0.02, data_wait, 0.0, 10, 1.0, wall_s, cpu_s, queued_s, cpu_s=used_s
    )


@pytest.mark.parametrize(
    ("data_wait", "wall_s", "cpu_s", "used_s", "workers"),
    [
        (0.8, 0.040, 0.004, 0.5, 32),  # waits: 2 CPUs x 10 = 20, a power of 2 up
        (0.8, 0.005, 0.004, 0.5, None),  # the sample is CPU work: a worker per CPU does it
        (DATA_BOUND / 2, 0.040, 0.004, 0.5, None),  # the loop hardly waits: nothing to win
        (0.8, 0.040, 0.0, 0.5, None),  # the loader's CPU was not read
        (0.8, 0.040, 0.004, 1.9, None),  # its workers wait for the 2 busy CPUs, not reads
    ],
)
def test_reads_wait_where_the_loop_waits_on_samples_that_take_wall_not_cpu(
    data_wait, wall_s, cpu_s, used_s, workers
) -> None:
    found = reads_wait(reading(data_wait, wall_s, cpu_s, used_s), FACTS)
    assert (found.workers if found else None) == workers


@pytest.mark.parametrize(
    ("queued_s", "workers"),
    [
        (0.004, None),  # 2 ms of CPU, 2 ms queued: a neighbour held the CPUs this process idled
        (0.0005, 8),  # a read that waits, a little queued besides: 2 CPUs x 6 / 2.5 up
    ],
)
def test_a_sample_queued_for_a_cpu_is_not_a_read_that_waits(queued_s, workers) -> None:
    found = reads_wait(reading(0.8, 0.006, 0.002, used_s=0.5, queued_s=queued_s), FACTS)
    assert (found.workers if found else None) == workers


def test_a_rank_s_cpus_are_its_share_of_the_machine_s() -> None:
    # 0.9 CPU seconds a second: half of the 2 CPUs idle, but none of a rank's one of two
    waiting = reading(0.8, 0.040, 0.004, used_s=0.9)
    assert reads_wait(waiting, FACTS) is not None
    assert reads_wait(waiting, FACTS, ranks=2) is None


def test_a_worker_thread_that_ended_takes_no_queued_time_off_the_loader_s() -> None:
    """A thread's run-queue count leaves with it (a pool a sample's read starts and ends):
    the span's count that went down reads as none queued, not less than none."""
    time = LoaderTime()
    time.add(0.4, CpuTimes(0.1, 0.05), samples=4)
    time.add(0.4, CpuTimes(0.1, -0.03), samples=4)
    assert time.per_sample() == {
        "sample_wall_s": pytest.approx(0.1),
        "sample_cpu_s": pytest.approx(0.025),
        "sample_queued_s": pytest.approx(0.05 / 8),
    }


def test_where_reads_wait_the_space_and_its_priors_go_beyond_the_cpus() -> None:
    waits = reads_wait(reading(0.8, 0.040, 0.004), FACTS)
    space = online_space(FACTS, batch_size=4, cuda=False, read_wait=waits)
    assert max(space.choices("num_workers")) == 32

    def fits(config: PipelineConfig) -> bool:
        return True

    # where reads wait, what the waits ask for first: a worker per CPU would leave them idle
    assert [p["num_workers"] for p in priors(space, START, fits)] == [32, 2]

    def an_epoch_times_up_to_twenty(config: PipelineConfig) -> bool:
        return config.num_workers <= 20

    assert [p["num_workers"] for p in priors(space, START, an_epoch_times_up_to_twenty)] == [20, 2]
    plain = online_space(FACTS, batch_size=4, cuda=False)
    assert [p["num_workers"] for p in priors(plain, START, fits)] == [2]
    # a loop on the CPU that pins its batches: its guides are points of a space with no pinning
    pinned = dataclasses.replace(START, pin_memory=True)
    assert [p["num_workers"] for p in priors(plain, pinned, fits)] == [2]


class Waits(Dataset):
    """Each sample a blocking wait of 20 ms that uses no CPU, as a read from slow storage."""

    def __len__(self) -> int:
        return 96

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.02)
        return torch.tensor(index)


def test_workers_cpu_reads_the_workers_of_the_iterator_being_read() -> None:
    loader = torch.utils.data.DataLoader(Waits(), batch_size=4, num_workers=2)
    clock = WorkersCpu()
    assert clock() is None  # nothing read yet
    clock.iterator = iterator = iter(loader)
    next(iterator)
    used = clock()
    assert used is not None and used.ran_s >= 0.0 and used.queued_s >= 0.0
    workers = iterator._workers
    del iterator  # the loop left its epoch: torch shuts the workers down, as without this
    gc.collect()
    assert clock() is None and not any(w.is_alive() for w in workers)


@pytest.mark.slow  # a few settings of real workers over sleeping reads: seconds
@pytest.mark.parametrize("beside_a_neighbour", [False, True])
def test_a_run_whose_reads_wait_explores_more_workers_than_cpus(
    tmp_path, caplog, request, beside_a_neighbour
) -> None:
    if beside_a_neighbour:  # its job holds the cores: reads that wait still read so
        request.getfixturevalue("neighbours")
    loader = autotune.DataLoader(
        Waits(), batch_size=4, tune=20.0, window=BRIEF_WINDOW, storage=f"sqlite:///{tmp_path}/a.db"
    )
    with caplog.at_level("INFO", logger="autotune"):
        for _ in range(4):
            assert sorted(i for b in loader for i in b.tolist()) == list(range(len(Waits())))
    first = loader.readings[0]  # the run's own: no workers, each sample a wait
    assert first.sample_wall_s > 5 * first.sample_cpu_s > 0
    assert loader.explorer is not None
    cpus = detect(want_cuda=False).usable_cpus
    assert max(loader.explorer.space.choices("num_workers")) > cpus
    assert "reads wait" in caplog.text
    assert max(r.settings.num_workers for r in loader.readings) > cpus  # measured, not offered


class Computes(Dataset):
    """Each sample 2 ms of CPU: work that a worker per CPU does, however busy the machine."""

    def __len__(self) -> int:
        return 128

    def __getitem__(self, index: int) -> torch.Tensor:
        end = time.thread_time() + 0.002
        while time.thread_time() < end:
            pass
        return torch.tensor(index)


@pytest.mark.slow  # the run's own setting read beside a neighbour's job: seconds
def test_cpu_work_beside_a_neighbour_s_job_is_not_read_as_reads_that_wait(
    tmp_path, caplog, neighbours
) -> None:
    """The neighbours' CPU is not this process's: its CPUs look idle, and each sample takes
    more wall than CPU. Before the run-queue delay was read, this explored 8 workers."""
    loader = autotune.DataLoader(
        Computes(),
        batch_size=4,
        tune=20.0,
        window=BRIEF_WINDOW,
        storage=f"sqlite:///{tmp_path}/a.db",
    )
    with caplog.at_level("INFO", logger="autotune"):
        while loader.explorer is None:  # the run's own setting read: where reads wait is said
            assert sorted(i for b in loader for i in b.tolist()) == list(range(len(Computes())))
    first = loader.readings[0]
    if first.sample_wall_s > 1.2 * first.sample_cpu_s:  # the neighbours stretched it (in a
        assert first.sample_queued_s > 0  # loaded suite, some runs left it a CPU of its own)
    cpus = detect(want_cuda=False).usable_cpus
    assert max(loader.explorer.space.choices("num_workers")) <= cpus
    assert "reads wait" not in caplog.text

"""Workers beyond the CPUs when reads wait: measured on the storage (a real FUSE mount that
answers late), and the space's num_workers bound raised only there."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from autotune import machine
from autotune.app.composition import compose, to_config
from autotune.app.slow_storage import mounted, unavailable_reason
from autotune.pipeline import recipes, sources
from autotune.schema import RecipeConfig
from autotune.session import read_wait
from autotune.session.read_wait import ReadWait
from autotune.session.space import SearchSpace

RECIPE = recipes.from_config(RecipeConfig(crop_size=64))


@pytest.fixture(scope="module")
def facts() -> machine.MachineFacts:
    return dataclasses.replace(machine.detect(want_cuda=False), usable_cpus=2)


@pytest.fixture(scope="module")
def images() -> sources.Source:
    return sources.synthetic(count=32, num_classes=2)


def _high(space: SearchSpace) -> int:
    return next(k.high for k in space.knobs if k.name == "num_workers")


def _space(facts, *overrides, wait: ReadWait | None = None, ranks: int = 1) -> SearchSpace:
    cfg = to_config(compose(list(overrides))).search_space
    return SearchSpace.from_config(
        cfg, facts, device="cpu", batch_size=32, ranks=ranks, read_wait=wait
    )


WAITING = ReadWait(wall_s=0.045, cpu_s=0.003, read_s=0.042, workers=32)


def test_local_data_keeps_the_workers_at_the_cpus(images, facts):
    wait = read_wait.measure(images, RECIPE, facts)
    assert not wait.waits and wait.workers == 2
    assert _high(_space(facts, wait=wait)) == 2


@contextmanager
def _cores_taken(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPUs meanwhile: a neighbour's job, a busy CI host."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def test_a_busy_machine_is_not_read_as_reads_that_wait(images, facts):
    # every stage waits for a core, not the read alone: the stretch is the machine's
    with _cores_taken(3):
        wait = read_wait.measure(images, RECIPE, facts)
    assert wait.busy > 1.0
    assert not wait.waits and wait.workers == 2, wait


def test_waiting_reads_raise_the_bound_of_cpus_only(facts):
    space = _space(facts, wait=WAITING)
    assert _high(space) == 32
    assert any(
        "num_workers is searched up to 32, beyond the 2 usable CPUs" in n for n in space.notes
    )
    assert _high(_space(facts, wait=WAITING, ranks=2)) == 16  # each rank's share
    # a bound the user set is theirs
    pinned = _space(facts, "search_space.knobs.num_workers.high=4", wait=WAITING)
    assert _high(pinned) == 4


def test_the_workers_stop_at_what_memory_allows(images, facts):
    short = dataclasses.replace(facts, memory_available_bytes=3 * read_wait.WORKER_MEMORY)
    most, binding = read_wait._worker_limit(short)
    assert (most, binding) == (3, "memory")


@pytest.mark.slow
@pytest.mark.skipif(unavailable_reason() is not None, reason=f"FUSE: {unavailable_reason()}")
def test_storage_that_answers_late_asks_for_more_workers_than_cpus(images, facts):
    with mounted(images.root, latency_ms=20) as mount:
        wait = read_wait.measure(sources.scan_imagefolder(mount), RECIPE, facts)
    assert wait.waits and wait.read_s > 0.02  # an open and a read, each 20 ms late
    assert wait.workers > 2 and wait.workers & (wait.workers - 1) == 0  # a power of 2

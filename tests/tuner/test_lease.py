"""Leases in the study's storage, on SQLite and on a real PostgreSQL server: one holder at a
time, taken over when its holder stops renewing it, never again once done; real processes
racing for them."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.tuner.lease import Leases, is_gone, this_process


@pytest.fixture(params=["sqlite", "postgresql"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/leases.db"
    return request.getfixturevalue("postgres_url")


def test_one_holder_at_a_time_until_released(storage):
    a = Leases(storage, "s", expire_s=60, holder="a")
    b = Leases(storage, "s", expire_s=60, holder="b")
    assert a.take("confirmation")
    assert not b.take("confirmation")
    assert b.holder_of("confirmation") == ("a", False)
    assert b.take("other step")  # leases are per name
    assert Leases(storage, "another study", expire_s=60, holder="c").take("confirmation")
    b.release("confirmation")  # not b's: nothing happens
    assert not b.take("confirmation")
    a.release("confirmation")
    assert b.take("confirmation")


@pytest.mark.slow
def test_a_lease_its_holder_stopped_renewing_is_taken_over(storage):
    # 4 s: a renewal every second, so a loaded machine that delays one by seconds (a CI run
    # with PostgreSQL and two test processes on two cores did, at 2 s) cannot lose the lease
    a = Leases(storage, "s", expire_s=4, holder="a")
    b = Leases(storage, "s", expire_s=4, holder="b")
    assert a.take("x")
    with a.renewed("x"):  # renewed every second: never stale while a works
        time.sleep(5)
        assert not b.take("x")
    # a "died": no renewal for longer than expire_s, and a second more, as SQLite's clock
    # (CURRENT_TIMESTAMP) gives whole seconds: 4.1 s can read as 4 and leave it fresh
    time.sleep(5.1)
    assert b.take("x")
    assert a.holder_of("x") == ("b", False)
    a.renew("x")  # a's late renewal does not take it back
    assert a.holder_of("x") == ("b", False)


@pytest.mark.slow
def test_a_done_lease_is_never_taken_again(storage):
    a = Leases(storage, "s", expire_s=1, holder="a")
    assert a.take("x")
    a.finish("x")
    time.sleep(2)  # long past expiry
    b = Leases(storage, "s", expire_s=1, holder="b")
    assert not b.take("x")
    assert b.is_done("x")
    b.release("x")
    assert b.is_done("x")


def _race(storage: str, name: str, results: multiprocessing.Queue) -> None:
    leases = Leases(storage, "s", expire_s=60)
    results.put(leases.take(name))


def _count_under_lease(storage: str, counter: str, times: int) -> None:
    leases = Leases(storage, "s", expire_s=60)
    for _ in range(times):
        with leases.one_at_a_time("next trial", poll_s=0.01):
            value = int(Path(counter).read_text())  # read, pause, write: lost without the lease
            time.sleep(0.005)
            Path(counter).write_text(str(value + 1))


@pytest.mark.slow
def test_processes_racing_for_a_lease_let_exactly_one_in(storage):
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    racers = [ctx.Process(target=_race, args=(storage, "confirmation", results)) for _ in range(4)]
    for p in racers:
        p.start()
    for p in racers:
        p.join(60)
    won = [results.get(timeout=5) for _ in racers]
    assert won.count(True) == 1


@pytest.mark.slow
def test_one_at_a_time_serialises_processes(storage, tmp_path):
    counter = tmp_path / "counter"
    counter.write_text("0")
    ctx = multiprocessing.get_context("fork")
    workers = [
        ctx.Process(target=_count_under_lease, args=(storage, str(counter), 10)) for _ in range(3)
    ]
    for p in workers:
        p.start()
    for p in workers:
        p.join(120)
        assert p.exitcode == 0
    assert counter.read_text() == "30"


def test_a_holder_is_gone_once_its_process_ended_or_its_pid_is_another_process_s() -> None:
    assert not is_gone(this_process())  # this one, alive
    ended = subprocess.run(
        [sys.executable, "-c", "from autotune.tuner.lease import this_process as t; print(t())"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert is_gone(ended)
    # this pid, as a process started before: the pid taken again (a restarted container's)
    host_pid, _, since = this_process().partition(" since ")
    assert is_gone(f"{host_pid} since {float(since) - 100:.2f}")
    assert not is_gone(f"{host_pid}")  # a holder named before starts were: its pid alone
    assert not is_gone(f"another-host pid {os.getpid()} since 0.00")  # unknowable here

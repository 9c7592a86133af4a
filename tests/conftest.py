"""Shared fixtures: one real quick study, run through the real CLI, reused by several tests;
and a real PostgreSQL server, started for the session, with a fresh database per test."""

from __future__ import annotations

import os
import sys

# torch's OpenMP threads sleep when they wait instead of spinning. On a shared machine (two
# test runs at once, a busy CI host) spinning threads fight over the cores and a test of half
# a second can take ten. Set before torch loads OpenMP; the processes the tests start (real
# studies) inherit it. Tests check behaviour, never figures; a user's own runs are untouched.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Bytecode caches, even where the environment turns them off (PYTHONDONTWRITEBYTECODE): each
# test process and each process the tests start imports the package and the test modules, and
# without them compiles (and assert-rewrites) them again, 3 s a process. Python's default; the
# caches land in the ignored __pycache__ folders.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import json  # noqa: E402
import subprocess  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

import pytest  # noqa: E402

# torch, and the package through ``helpers``, are imported by the fixtures and hooks that use
# them: under pytest-xdist the process that hands out the tests runs none of them, and would
# otherwise spend 4-5 s importing them before any worker starts
if TYPE_CHECKING:
    import postgres

import run_order  # noqa: E402

SLOW_CALL_S = 2.0  # a test not marked slow whose call takes longer is listed at the end
_slow_unmarked: list[tuple[float, str]] = []


_recorder: run_order.Recorder | None = None  # with --record-module-seconds


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-module-seconds",
        action="store_true",
        help=f"write each test module's seconds to {run_order.SECONDS.name} (the run's order)",
    )


def pytest_configure(config: pytest.Config) -> None:
    global _recorder
    if config.getoption("record_module_seconds") and not os.environ.get("PYTEST_XDIST_WORKER"):
        _recorder = run_order.Recorder()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _recorder is not None:
        _recorder.write()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Notes each test not marked slow whose call took over ``SLOW_CALL_S``, and each test's
    seconds where they are recorded."""
    if _recorder is not None:
        _recorder.add(report)
    if report.when == "call" and report.duration > SLOW_CALL_S and "slow" not in report.keywords:
        _slow_unmarked.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter) -> None:
    """Lists them (it reports, it never fails the run): mark them slow or make them quick."""
    if _slow_unmarked:
        terminalreporter.section(f"not marked slow, over {SLOW_CALL_S:g} s")
        for seconds, nodeid in sorted(_slow_unmarked, reverse=True):
            terminalreporter.write_line(f"{seconds:6.1f}s {nodeid}")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """A pytest-xdist worker ends here, once it has sent its results and run the exit
    handlers, without the interpreter's teardown: with torch imported that took 5-6 s after
    the last test, which the whole run waited for (``autotune.app.exit_codes.exit_now`` does
    the same for the CLI)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        from autotune.app.exit_codes import exit_now

        exit_now(0)


@pytest.hookimpl(trylast=True)  # after pytest-random-order has shuffled them
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest modules first (``run_order``); ``@pytest.mark.gpu`` tests run only where
    CUDA is usable (``pytest -m gpu`` there)."""
    items[:] = run_order.longest_first(items)
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: run `pytest -m gpu` on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _of_the_run(factory: pytest.TempPathFactory, worker_id: str, name: str) -> Path:
    """A folder of this test run: under pytest-xdist one for all its worker processes (each
    worker's own temp folder lies in the run's), else this session's own."""
    if worker_id == "master":
        return factory.mktemp(name)
    folder = factory.getbasetemp().parent / name
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(autouse=True)
def _nothing_left_to_go_on_with() -> Iterator[None]:
    """What a loader a test dropped explored is the job's next loader's in the process
    (``autotune.online.made_anew``): never a later test's."""
    yield
    made_anew = sys.modules.get("autotune.online.made_anew")
    if made_anew is not None:
        made_anew._explorations.clear()


@pytest.fixture(scope="session", autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> None:
    """Synthetic datasets go to the run's cache, not the user's ~/.cache (the workers share
    it: a dataset is written to a temp folder and renamed into place)."""
    os.environ["AUTOTUNE_CACHE"] = str(_of_the_run(tmp_path_factory, worker_id, "cache"))


@pytest.fixture(scope="session")
def quick_study(
    tmp_path_factory: pytest.TempPathFactory, worker_id: str
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A finished quick study, its worth table too: (working directory, completed CLI
    process). Run once per test run: the first worker to ask runs it, the others wait for it
    and read the same folder (a test that changes the study works on a copy)."""
    from filelock import FileLock
    from helpers import QUICK, WORTH, run_cli

    shared = _of_the_run(tmp_path_factory, worker_id, "quick_study")
    cwd, said = shared / "cwd", shared / "completed.json"
    with FileLock(shared / ".lock"):
        if not said.is_file():
            cwd.mkdir(exist_ok=True)  # a worker before may have failed in it
            result = run_cli([*QUICK, *WORTH], cwd)
            fields = ("args", "returncode", "stdout", "stderr")
            said.write_text(json.dumps({k: getattr(result, k) for k in fields}))
        result = subprocess.CompletedProcess(**json.loads(said.read_text()))
    assert result.returncode == 0, result.stderr[-3000:]
    return cwd, result


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.Server]:
    """A real PostgreSQL server on loopback, for this test session."""
    import postgres

    server = postgres.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: postgres.Server) -> str:
    """A fresh database on the session's PostgreSQL server: its SQLAlchemy URL."""
    return postgres_server.new_database()


_SPIN = """
import time
print("spinning", flush=True)
end = time.monotonic() + 120
while time.monotonic() < end:
    pass
"""


@pytest.fixture
def neighbours() -> Iterator[list[subprocess.Popen]]:
    """Real processes spinning, two for each usable CPU (one each may leave a CPU to the
    test alone), for the test's length (two minutes at most, should the test process die):
    a neighbour's job holding the cores."""
    from autotune.machine import detect

    cpus = detect(want_cuda=False).usable_cpus
    spin = [sys.executable, "-c", _SPIN]
    processes = [
        subprocess.Popen(spin, stdout=subprocess.PIPE, text=True) for _ in range(2 * cpus)
    ]
    try:
        for process in processes:  # each started and spinning: no test runs before they do
            assert process.stdout is not None and process.stdout.readline()
        yield processes
    finally:
        for process in processes:
            process.kill()
            process.wait()

"""``python -m MODULE ARGS`` as the tests run it: forked from a process that has imported the
package and never ran it, instead of a fresh interpreter that imports it again.

Each command of the tests (``python -m autotune``, ``python -m autotune.benchmark``, a
script of the user's) would spend 5-6 s of CPU importing torch, torchvision and the package
before its first line of work; the suite runs dozens. The zygote imports them once per test
process; each command is a child forked from it, with the command's own working directory,
environment, ``sys.argv``, ``sys.path`` and output files, run as ``__main__`` by ``runpy``
(what ``python -m`` and ``python SCRIPT`` do) and ended by the interpreter's exit handlers.
Forking is safe: the zygote runs no thread and no torch operation, as the trials' own fork
server (``autotune.runtime.fork_server``) does not. Commands that a test stops with a signal
still start as real processes (``helpers.interrupt_cli``).

Protocol: one JSON line per command on the zygote's stdin; it answers one JSON line, the exit
status, once the command ended. Its stdin closing (the test process ended) ends it.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import multiprocessing.util
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from autotune.runtime import fork_server

# imported once, here, for every command: what ``python -m autotune`` and the benchmark import,
# and what a study imports on first use (Optuna's fANOVA with scikit-learn, 2-5 s; SQLAlchemy's
# ORM and Alembic, at a storage's first open, about 1 s)
PRELOAD = (
    "autotune.app.cli",
    "autotune.app.benchmark",
    "autotune.app.selfcheck",
    "autotune.app.shard",
    "optuna.importance",
    "optuna.storages._rdb.models",
    "sqlalchemy.dialects.sqlite",
    "alembic.command",
    "alembic.config",
    "alembic.migration",
)


class Zygote:
    """The zygote of this test process, started at its first command."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int | None:
        """The zygote's process id (None before its first command): a child of the test
        process that outlives each command by design."""
        return self._proc.pid if self._proc is not None else None

    def _started(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, __file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
            )
        return self._proc

    def run(
        self, command: list[str], cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``command`` (``[python, "-m", MODULE, *args]`` or ``[python, SCRIPT, *args]``),
        as ``subprocess.run(..., capture_output=True, text=True, timeout=timeout)`` runs it."""
        with tempfile.TemporaryDirectory(prefix="zygote-") as out:
            return self._run(command, cwd, env, timeout, Path(out))

    def _run(
        self, command: list[str], cwd: Path, env: dict[str, str], timeout: float, out: Path
    ) -> subprocess.CompletedProcess[str]:
        proc = self._started()
        assert proc.stdin is not None and proc.stdout is not None
        stdout, stderr = out / "stdout", out / "stderr"
        request = {"command": command[1:], "cwd": str(cwd), "env": env}
        request |= {"stdout": str(stdout), "stderr": str(stderr)}
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        pid = json.loads(proc.stdout.readline())["pid"]
        deadline = time.monotonic() + timeout
        answer: dict[str, Any] = {}
        while not answer:
            if time.monotonic() > deadline:
                os.killpg(pid, signal.SIGKILL)  # the command and every process it started
                json.loads(proc.stdout.readline())
                raise subprocess.TimeoutExpired(command, timeout)
            answer = _ready_line(proc, min(1.0, deadline - time.monotonic()))
        return subprocess.CompletedProcess(
            command, answer["returncode"], stdout.read_text(), stderr.read_text()
        )


def _ready_line(proc: subprocess.Popen[str], wait_s: float) -> dict[str, Any]:
    """The zygote's next answer, or {} when none came within ``wait_s``."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], max(wait_s, 0.0))
    return json.loads(proc.stdout.readline()) if ready else {}


def _command(request: dict[str, Any]) -> None:
    """In the forked child: becomes the command, runs it, and never returns."""
    os.setpgid(0, 0)  # its own group: a timeout kills the command's whole tree
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115  # the process's own, never closed
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [os.getcwd(), *extra, *_BASE_PATH]
        _start_fork_server_by_fork()
        code = _run_main(request["command"])
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:  # exit_now's end, which it cannot call: its sys.exit would return into serve()
        atexit._run_exitfuncs()  # as the interpreter runs them at its exit
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)


def _start_fork_server_by_fork() -> None:
    """Starts the command's fork server for its trials (``autotune.runtime.fork_server``) as
    a fork of the command, now, while it has run nothing: the server multiprocessing would
    start runs ``python -c "from multiprocessing.forkserver import main; main(...)"`` and
    imports torch and the trials' code again, which this process has imported already. The
    same code runs, in a process forked where it would be exec'd; the command then finds it
    running. Any later start (none, while it lives) is multiprocessing's own."""
    spawn = multiprocessing.util.spawnv_passfds

    def by_fork(path: str, args: list[str], passfds: tuple[int, ...]) -> int:
        code = args[-1]
        if args[-2:-1] != ["-c"] or "multiprocessing.forkserver import main" not in code:
            return spawn(path, args, passfds)
        pid = os.fork()
        if pid:
            return pid
        try:
            keep = {0, 1, 2, *passfds}
            for fd in map(int, os.listdir("/proc/self/fd")):
                if fd not in keep:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            exec(code, {"__name__": "__main__"})
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)

    multiprocessing.util.spawnv_passfds = by_fork
    try:
        fork_server.start()
    finally:
        multiprocessing.util.spawnv_passfds = spawn


def _run_main(command: list[str]) -> int:
    """``-m MODULE ARGS`` or ``SCRIPT ARGS`` run as ``__main__``; 0 where it returns."""
    if command[0] == "-m":
        sys.argv = [command[1], *command[2:]]
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
    else:
        script = str(Path(command[0]).resolve())  # as python SCRIPT sets __file__, sys.path
        sys.argv = [script, *command[1:]]
        sys.path[0] = str(Path(script).parent)
        runpy.run_path(script, run_name="__main__")
    return 0


def serve() -> None:
    """The zygote's loop: a command per line of stdin, each in a child forked from here."""
    for name in (*PRELOAD, *fork_server.PRELOAD):  # the trials' too: their server forks from here
        with contextlib.suppress(ImportError):  # as the fork server skips one
            importlib.import_module(name)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _command(request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": _returncode(status)}), flush=True)


def _returncode(status: int) -> int:
    """As ``subprocess`` reports it: the exit code, or minus the signal that ended it."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


# sys.path without this folder (the zygote's own, and its PYTHONPATH): a command's sys.path is
# its folder, then its own PYTHONPATH, then these
_BASE_PATH = [p for p in sys.path if p and Path(p).resolve() != Path(__file__).parent]

if __name__ == "__main__":
    serve()

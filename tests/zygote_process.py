"""The zygote's own process (``tests/zygote.py`` starts it and says why): it imports the
package once, then forks a child per command read on stdin and answers on stdout."""

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
import sys
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


def serve() -> None:
    """The zygote's loop: a child forked from here per command read on stdin, its pid and,
    once it ended, its exit status answered on stdout; until stdin closes."""
    for name in (*PRELOAD, *fork_server.PRELOAD):  # the trials' too: their server forks from here
        with contextlib.suppress(ImportError):  # as the fork server skips one
            importlib.import_module(name)
    wake = os.pipe()  # a byte on it each time a command ends (SIGCHLD), to wake the select
    os.set_blocking(wake[1], False)
    signal.set_wakeup_fd(wake[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    running: dict[int, int] = {}  # pid -> the command's id
    unread = b""
    while True:
        ready = select.select([0, wake[0]], [], [])[0]
        if wake[0] in ready:
            os.read(wake[0], 4096)
            _reap(running)
        if 0 in ready:
            chunk = os.read(0, 65536)
            if not chunk:
                return
            *lines, unread = (unread + chunk).split(b"\n")
            for line in lines:
                request = json.loads(line)
                running[_fork(request, wake)] = request["id"]


def _fork(request: dict[str, Any], wake: tuple[int, int]) -> int:
    """The command's child, its pid answered. Its output is opened here, before the fork: a
    named pipe must be open for writing before the test's first read, else that read ends."""
    if request["pipe"]:
        out_fd = os.open(request["stdout"], os.O_WRONLY | os.O_NONBLOCK)  # the test reads it
        os.set_blocking(out_fd, True)
    else:
        out_fd = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err_fd = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    pid = os.fork()
    if pid == 0:
        _command(request, out_fd, err_fd, wake)
    os.close(out_fd)
    os.close(err_fd)
    _answer({"id": request["id"], "pid": pid})
    return pid


def _reap(running: dict[int, int]) -> None:
    """Each command that ended since the last call: its exit status answered."""
    while running:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        _answer({"id": running.pop(pid), "returncode": _returncode(status)})


def _answer(answer: dict[str, Any]) -> None:
    os.write(1, json.dumps(answer).encode() + b"\n")  # one write: whole, however many wait


def _command(request: dict[str, Any], out_fd: int, err_fd: int, wake: tuple[int, int]) -> None:
    """In the forked child: becomes the command, runs it, and never returns."""
    os.setpgid(0, 0)  # its own group: a timeout kills the command's whole tree
    code = 1
    try:
        signal.set_wakeup_fd(-1)  # the zygote's, for its commands' ends: none of this one's
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in wake:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        for fd in (null, out_fd, err_fd):
            os.close(fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115  # the process's own, never closed
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        if request["cpus"] is not None:
            os.sched_setaffinity(0, request["cpus"])
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
            with contextlib.suppress(OSError):  # a pipe its reader closed
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


def _returncode(status: int) -> int:
    """As ``subprocess`` reports it: the exit code, or minus the signal that ended it."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


# sys.path without this folder (the zygote's own, and its PYTHONPATH): a command's sys.path is
# its folder, then its own PYTHONPATH, then these
_BASE_PATH = [p for p in sys.path if p and Path(p).resolve() != Path(__file__).parent]

if __name__ == "__main__":
    serve()

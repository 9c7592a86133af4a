"""The zygote's own process (``tests/zygote.py`` starts it and says why): it imports the
package once, then forks a child per command read on stdin and answers on stdout, and per
command that a command started with ``sys.executable`` (``tests/zygote_python.py``)."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib
import io
import json
import multiprocessing.util
import os
import runpy
import select
import shutil
import signal
import socket
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import zygote_python

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
    once it ended, its exit status answered on stdout; and per request of a command's
    ``sys.executable`` (``zygote_python``), answered to it; until stdin closes."""
    for name in (*PRELOAD, *fork_server.PRELOAD):  # the trials' too: their server forks from here
        with contextlib.suppress(ImportError):  # as the fork server skips one
            importlib.import_module(name)
    wake = os.pipe()  # a byte on it each time a command ends (SIGCHLD), to wake the select
    os.set_blocking(wake[1], False)
    signal.set_wakeup_fd(wake[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    folder = tempfile.mkdtemp(prefix="zygote-python-")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(os.path.join(folder, "socket"))
    listener.listen()
    global _PYTHON
    _PYTHON = os.path.join(folder, "python")
    zygote_python.write(_PYTHON, listener.getsockname(), str(Path(__file__).parent))
    running: dict[int, int | socket.socket] = {}  # pid -> the command's id, or its stand-in
    unread = b""
    try:
        while True:
            ready = select.select([0, wake[0], listener], [], [])[0]
            if wake[0] in ready:
                os.read(wake[0], 4096)
                _reap(running)
            if listener in ready:
                stand_in = listener.accept()[0]
                pid = _fork_for(stand_in)
                if pid is not None:
                    running[pid] = stand_in
            if 0 in ready:
                chunk = os.read(0, 65536)
                if not chunk:
                    return
                *lines, unread = (unread + chunk).split(b"\n")
                for line in lines:
                    request = json.loads(line)
                    running[_fork(request)] = request["id"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_PYTHON = sys.executable  # what a command's sys.executable is: the stand-in, once it is written


def _fork(request: dict[str, Any]) -> int:
    """The command's child, its pid answered. Its output is opened here, before the fork: a
    named pipe must be open for writing before the test's first read, else that read ends."""
    if request["pipe"]:
        out_fd = os.open(request["stdout"], os.O_WRONLY | os.O_NONBLOCK)  # the test reads it
        os.set_blocking(out_fd, True)
    elif request["terminal"]:  # its stdout, not the zygote's controlling terminal
        out_fd = os.open(request["stdout"], os.O_WRONLY | os.O_NOCTTY)
    else:
        out_fd = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err_fd = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    pid = os.fork()
    if pid == 0:
        _command(request, {0: null, 1: out_fd, 2: err_fd})
    for fd in (null, out_fd, err_fd):
        os.close(fd)
    _answer({"id": request["id"], "pid": pid})
    return pid


def _fork_for(stand_in: socket.socket) -> int | None:
    """The child of a stand-in's request (``zygote_python``), with the stand-in's open files
    at their numbers, in its process group; its pid answered to the stand-in. None where the
    stand-in ended before its request was whole."""
    message, received, _, _ = socket.recv_fds(stand_in, 1 << 20, 1024)
    while not message.endswith(b"\n"):
        more = stand_in.recv(1 << 20)
        if not more:
            for fd in received:
                os.close(fd)
            stand_in.close()
            return None
        message += more
    request = json.loads(message) | {"cpus": None}
    pid = os.fork()
    if pid == 0:
        _command(request, dict(zip(request["fds"], received, strict=True)))
    for fd in received:
        os.close(fd)
    _answer_to(stand_in, {"pid": pid})
    return pid


def _reap(running: dict[int, int | socket.socket]) -> None:
    """Each command that ended since the last call: its exit status answered."""
    while running:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        asked = running.pop(pid, None)
        if isinstance(asked, socket.socket):
            _answer_to(asked, {"returncode": _returncode(status)})
            asked.close()
        elif asked is not None:
            _answer({"id": asked, "returncode": _returncode(status)})


def _answer(answer: dict[str, Any]) -> None:
    os.write(1, json.dumps(answer).encode() + b"\n")  # one write: whole, however many wait


def _answer_to(stand_in: socket.socket, answer: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # a stand-in killed meanwhile
        stand_in.sendall(json.dumps(answer).encode() + b"\n")


def _command(request: dict[str, Any], fds: dict[int, int]) -> None:
    """In the forked child: becomes the command (its files ``fds``: its own number -> where
    it is open here), runs it, and never returns."""
    code = 1
    try:
        # its own group, or its stand-in's: a timeout, or a kill of the stand-in's group,
        # ends the command's whole tree
        try:
            os.setpgid(0, request.get("pgid", 0))
        except OSError:  # the stand-in's group is of another session
            os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)  # the zygote's, for its commands' ends: none of this one's
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _files_at(fds)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115  # the process's own, never closed
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        # line-buffered, as an interpreter's stderr is: a killed command's last lines show
        sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
        sys.executable = _PYTHON
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


def _files_at(fds: dict[int, int]) -> None:
    """The command's open files at their own numbers (``fds``: number -> where it is open
    now), every other descriptor of the zygote's closed (its pipes, the stand-ins' socket)."""
    open_now = [int(fd) for fd in os.listdir("/proc/self/fd")]
    above = max([*open_now, *fds, *fds.values()]) + 1
    moved = {number: fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, above) for number, fd in fds.items()}
    for fd in open_now:
        with contextlib.suppress(OSError):  # the listing's own, closed since
            os.close(fd)
    for number, fd in moved.items():
        os.dup2(fd, number)  # inheritable, as it was where it came from
        os.close(fd)


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
        except SystemExit as stop:  # how the server ends once its command has: quietly
            os._exit(stop.code if isinstance(stop.code, int) else int(stop.code is not None))
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
    """``-m MODULE ARGS``, ``SCRIPT ARGS`` or ``-c CODE ARGS`` run as ``__main__`` after any of
    ``-u`` (unbuffered output), ``-B``, ``-E``, ``-s``; 0 where it returns. Other options
    are a fresh interpreter's, which the command then becomes."""
    while command and command[0] in ("-u", "-B", "-E", "-s"):
        if command.pop(0) == "-u":
            raw = {"mode": "wb", "closefd": False}  # unbuffered: FileIO's writes go straight out
            sys.stdout = io.TextIOWrapper(io.FileIO(1, **raw), write_through=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, **raw), write_through=True)
    if command[:1] == ["-m"]:
        sys.argv = [command[1], *command[2:]]
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
    elif command[:1] == ["-c"]:
        sys.argv = ["-c", *command[2:]]
        sys.path[0] = ""
        exec(compile(command[1], "<string>", "exec"), {"__name__": "__main__"})
    elif command and command[0].startswith("-"):
        os.execv(_INTERPRETER, [_INTERPRETER, *command])
    else:
        script = str(Path(command[0]).resolve())  # as python SCRIPT sets __file__, sys.path
        sys.argv = [script, *command[1:]]
        sys.path[0] = str(Path(script).parent)
        runpy.run_path(script, run_name="__main__")
    return 0


_INTERPRETER = sys.executable  # this interpreter, for what a fork of it cannot run


def _returncode(status: int) -> int:
    """As ``subprocess`` reports it: the exit code, or minus the signal that ended it."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


# sys.path without this folder (the zygote's own, and its PYTHONPATH): a command's sys.path is
# its folder, then its own PYTHONPATH, then these
_BASE_PATH = [p for p in sys.path if p and Path(p).resolve() != Path(__file__).parent]

if __name__ == "__main__":
    serve()

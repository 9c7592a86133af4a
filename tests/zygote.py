"""``python -m MODULE ARGS`` as the tests run it: forked from a process that has imported the
package and never ran it, instead of a fresh interpreter that imports it again.

Each command of the tests (``python -m autotune``, ``python -m autotune.benchmark``, a
script of the user's) would spend 5-6 s of CPU importing torch, torchvision and the package
before its first line of work; the suite runs dozens. The zygote imports them once per test
process; each command is a child forked from it, with the command's own working directory,
environment, ``sys.argv``, ``sys.path``, CPUs and output, run as ``__main__`` by ``runpy``
(what ``python -m`` and ``python SCRIPT`` do) and ended by the interpreter's exit handlers.
Forking is safe: the zygote runs no thread and no torch operation, as the trials' own fork
server (``autotune.runtime.fork_server``) does not. Commands run at once where a test starts
several (the hosts of a shared study) and take signals as any process does (Ctrl-C, SIGTERM).

Protocol: one JSON line per command on the zygote's stdin, with the command's id; the zygote
answers with JSON lines carrying that id: the command's pid once forked, its exit status once
it ended. A command's stdout and stderr are files, or a named pipe the test reads as the
command writes (opened by the zygote before the fork, so that it ends where the command and
every process that inherited it closed it, as a ``subprocess.PIPE`` does). Its stdin closing
(the test process ended) ends the zygote.

A command's own ``sys.executable`` is the zygote's stand-in (``tests/zygote_python.py``):
what the command starts with it (the online benchmark's whole runs, the self-check's studies,
torchrun's ranks) is forked from the zygote too, with the stand-in's files, signals passed on
and its exit status handed back.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any


class Zygote:
    """The zygote of this test process, started at its first command."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._ids = itertools.count()
        self._answers: dict[int, dict[str, Any]] = {}  # each command's answers so far
        self._unread = b""  # the start of an answer not yet whole

    @property
    def pid(self) -> int | None:
        """The zygote's process id (None before its first command): a child of the test
        process that outlives each command by design."""
        return self._proc.pid if self._proc is not None else None

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("zygote_process.py"))],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
            )
            self._answers, self._unread = {}, b""
        return self._proc

    def start(
        self,
        command: list[str],
        cwd: Path,
        env: dict[str, str],
        *,
        stdout_pipe: bool = False,
        terminal: str | None = None,
        cpus: set[int] | None = None,
    ) -> Command:
        """``command`` (``[python, "-m", MODULE, *args]`` or ``[python, SCRIPT, *args]``)
        started, as ``subprocess.Popen(command, cwd=cwd, env=env, text=True, ...)`` starts it
        with stderr to a file and stdout to a file, to a pipe with ``stdout_pipe``, or to
        ``terminal`` (a pseudo-terminal's path, whose other end the test reads); on ``cpus``
        alone where given."""
        proc = self._started()
        assert proc.stdin is not None
        ident = next(self._ids)
        out = tempfile.TemporaryDirectory(prefix="zygote-")
        stdout, stderr = Path(out.name) / "stdout", Path(out.name) / "stderr"
        reader = None
        if stdout_pipe:
            os.mkfifo(stdout)
            reader = os.open(stdout, os.O_RDONLY | os.O_NONBLOCK)  # the zygote's open needs it
        request = {"id": ident, "command": command[1:], "cwd": str(cwd), "env": env}
        request |= {"stdout": terminal or str(stdout), "stderr": str(stderr)}
        request |= {"pipe": stdout_pipe, "terminal": terminal is not None}
        request |= {"cpus": sorted(cpus) if cpus is not None else None}
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        pid = self.answer(ident, "pid", math.inf)
        stream = None
        if reader is not None:
            os.set_blocking(reader, True)
            stream = open(reader, encoding="utf-8", errors="replace")  # noqa: SIM115
        return Command(self, ident, pid, command, out, stream)

    def answer(self, ident: int, key: str, wait_s: float) -> Any:
        """The zygote's answer ``key`` ("pid", "returncode") for command ``ident``, read (with
        the other commands' answers) until it came or ``wait_s`` passed (then None)."""
        deadline = time.monotonic() + wait_s
        while key not in self._answers.get(ident, {}):
            left = min(max(deadline - time.monotonic(), 0.0), 3600.0)
            if not self._read_answers(left):  # what came in the meantime is read at once
                return None
        return self._answers[ident][key]

    def _read_answers(self, wait_s: float) -> bool:
        """Whatever the zygote answered within ``wait_s``, filed by command: False if none."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        if not select.select([fd], [], [], wait_s)[0]:
            return False
        chunk = os.read(fd, 65536)
        if not chunk:
            raise RuntimeError("the tests' zygote ended; its stderr says why")
        *lines, self._unread = (self._unread + chunk).split(b"\n")
        for line in lines:
            answer = json.loads(line)
            self._answers.setdefault(answer.pop("id"), {}).update(answer)
        return True

    def run(
        self, command: list[str], cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``command`` as ``subprocess.run(..., capture_output=True, text=True,
        timeout=timeout)`` runs it."""
        started = self.start(command, cwd, env)
        try:
            out, err = started.communicate(timeout)
        except subprocess.TimeoutExpired as late:
            started.kill_group()  # the command and every process it started
            started.wait()
            late.output, late.stderr = started.communicate()
            # what it wrote until then, shown with the failure: where it waited
            late.add_note(f"its stdout ended:\n{late.output[-3000:]}")
            late.add_note(f"its stderr ended:\n{late.stderr[-3000:]}")
            raise
        return subprocess.CompletedProcess(command, started.wait(), out, err)


class Command:
    """A command the zygote forked: what ``subprocess.Popen`` gives for a process, as far as
    the tests use it (pid, signals, poll, wait, stdout as a stream, communicate)."""

    def __init__(
        self,
        zygote: Zygote,
        ident: int,
        pid: int,
        args: list[str],
        out: tempfile.TemporaryDirectory[str],
        stdout: IO[str] | None,
    ) -> None:
        self.pid, self.args, self.stdout = pid, args, stdout
        self._zygote, self._ident, self._out = zygote, ident, out

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def poll(self) -> int | None:
        return self._zygote.answer(self._ident, "returncode", 0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._zygote.answer(
            self._ident, "returncode", math.inf if timeout is None else timeout
        )
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:  # its pid is not another's yet
            os.kill(self.pid, signum)

    def kill_group(self) -> None:
        """SIGKILL to the command and every process it started (its own process group)."""
        if self.poll() is None:  # its pid is not another's yet
            self._kill_group_now()

    def _kill_group_now(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # ended meanwhile
            os.killpg(self.pid, signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """What it wrote (stdout, stderr), once it ended, within ``timeout``. Where its stdout
        is a stream, a command still running at ``timeout`` is killed with all it started (the
        stream ends only then) and TimeoutExpired raised."""
        rest = None
        if self.stdout is not None:
            late = threading.Event()

            def past_time() -> None:  # on the timer's thread: no poll, which reads answers
                late.set()
                self._kill_group_now()

            timer = threading.Timer(timeout, past_time) if timeout is not None else None
            if timer is not None:
                timer.start()
            rest = self.stdout.read()
            if timer is not None:
                timer.cancel()
            if late.is_set():
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        self.wait(timeout)
        folder = Path(self._out.name)
        written = folder / "stdout"  # none where it wrote to a terminal
        out = rest if rest is not None else (written.read_text() if written.is_file() else "")
        err = (folder / "stderr").read_text()
        if self.stdout is not None:
            self.stdout.close()
        self._out.cleanup()
        return out, err

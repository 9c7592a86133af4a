"""The ``python`` a command forked from the zygote sees as ``sys.executable``: a process that
runs ``python ARGS`` as a fork of the zygote and stands in for it until it ends.

What a command starts with ``sys.executable`` (the online benchmark's whole runs, the
self-check's studies, torchrun's ranks) would otherwise import torch and the package again in
a fresh interpreter, 5-10 s of CPU each. This stand-in starts in milliseconds (``-IS``: no
site, nothing of torch), hands the zygote its arguments, working directory, environment and
every open file descriptor (so that pipes and ``pass_fds`` reach the command as they would
reach a child of its own), passes on the signals it gets (a stop, a terminate) to the forked
command, and ends with its exit status (or its signal), as the process it stands in for would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys

PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)


def main(address: str) -> None:
    fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
    with socket.socket(socket.AF_UNIX) as zygote:
        zygote.connect(address)
        mine = zygote.fileno()
        fds = [fd for fd in fds if fd != mine and _is_open(fd)]
        request = {"command": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}
        request |= {"fds": fds, "pgid": os.getpgid(0)}
        socket.send_fds(zygote, [json.dumps(request).encode() + b"\n"], fds)
        answers = zygote.makefile("rb")
        pid = json.loads(answers.readline())["pid"]
        for signum in PASSED_ON:
            signal.signal(signum, lambda signum, _frame: _pass_on(pid, signum))
        line = answers.readline()
    code = json.loads(line)["returncode"] if line else 1
    if code < 0:  # ended by a signal: end by the same one
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:  # the listing's own descriptor, closed since
        return False
    return True


def _pass_on(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.kill(pid, signum)


def write(path: str, address: str, tests: str) -> None:
    """The stand-in as an executable file at ``path``, talking to the zygote at ``address``."""
    with open(path, "w") as out:
        out.write(f"#!{sys.executable} -IS\n")  # one argument: both options in it
        out.write(f"import sys\nsys.path.insert(0, {tests!r})\n")
        out.write(f"import zygote_python\nzygote_python.main({address!r})\n")
    os.chmod(path, 0o755)

"""The tests' zygote (``tests/zygote.py``): commands forked from it run at once, stream their
output, take signals and exit as processes started by ``subprocess`` do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from helpers import ZYGOTE

pytestmark = pytest.mark.slow  # its first command may start the zygote: the package imported


def _script(folder: Path, name: str, body: str) -> list[str]:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def test_two_commands_run_at_once(tmp_path: Path) -> None:
    """Each waits on the other (a named pipe opens once both ends are opened): one at a time,
    the first would wait for ever."""
    os.mkfifo(tmp_path / "meet")
    writer = _script(tmp_path, "writer.py", "open('meet', 'w').write('from the writer')\n")
    reader = _script(tmp_path, "reader.py", "print(open('meet').read()); raise SystemExit(3)\n")
    first = ZYGOTE.start(writer, tmp_path, dict(os.environ))
    second = ZYGOTE.start(reader, tmp_path, dict(os.environ))
    assert second.communicate(timeout=60) == ("from the writer\n", "")
    assert second.wait() == 3 and first.wait(timeout=60) == 0


def test_a_command_s_output_streams_and_it_takes_a_signal(tmp_path: Path) -> None:
    waits = _script(
        tmp_path,
        "waits.py",
        """\
        import sys
        print('to stderr', file=sys.stderr, flush=True)
        print('ready', flush=True)
        sys.stdin.read()  # /dev/null: at once; then it waits on a pipe no one writes
        import os
        r, w = os.pipe()
        os.read(r, 1)
        """,
    )
    command = ZYGOTE.start(waits, tmp_path, dict(os.environ), stdout_pipe=True)
    assert command.stdout is not None and command.stdout.readline() == "ready\n"
    assert command.poll() is None
    command.send_signal(signal.SIGTERM)
    assert command.communicate(timeout=60) == ("", "to stderr\n")
    assert command.returncode == -signal.SIGTERM


def test_a_timeout_kills_the_command_and_what_it_started_where_it_streams(tmp_path: Path) -> None:
    starts = _script(
        tmp_path,
        "starts.py",
        """\
        import subprocess, sys
        child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
        print(child.pid, flush=True)
        child.wait()
        """,
    )
    command = ZYGOTE.start(starts, tmp_path, dict(os.environ), stdout_pipe=True)
    assert command.stdout is not None
    child = psutil.Process(int(command.stdout.readline()))
    with pytest.raises(subprocess.TimeoutExpired):
        command.wait(timeout=0.5)
    with pytest.raises(subprocess.TimeoutExpired):  # its stdout still open: killed at 0.5 s
        command.communicate(timeout=0.5)
    assert command.wait(timeout=60) == -signal.SIGKILL
    _, alive = psutil.wait_procs([child], timeout=10)  # returns as soon as it is gone
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def test_a_command_past_its_timeout_is_killed_and_its_output_shown(tmp_path: Path) -> None:
    """What a command wrote until it was killed is kept with the failure: where it waited."""
    hangs = _script(
        tmp_path,
        "hangs.py",
        """\
        import sys, time
        print('waiting for the lease', file=sys.stderr)  # line-buffered, as in an interpreter
        print('trial 3 done', flush=True)
        time.sleep(600)
        """,
    )
    with pytest.raises(subprocess.TimeoutExpired) as late:
        ZYGOTE.run(hangs, tmp_path, dict(os.environ), timeout=1)
    assert (late.value.output, late.value.stderr) == ("trial 3 done\n", "waiting for the lease\n")
    assert "trial 3 done" in late.value.__notes__[0]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to take one away")
def test_a_command_runs_on_the_cpus_it_is_given(tmp_path: Path) -> None:
    one = min(os.sched_getaffinity(0))
    prints = _script(tmp_path, "cpus.py", "import os; print(sorted(os.sched_getaffinity(0)))\n")
    done = ZYGOTE.run(prints, tmp_path, dict(os.environ), timeout=60)
    assert done.returncode == 0 and done.stdout == f"{sorted(os.sched_getaffinity(0))}\n"
    assert ZYGOTE.start(prints, tmp_path, dict(os.environ), cpus={one}).communicate(60)[0] == (
        f"[{one}]\n"
    )


def test_what_a_command_starts_with_its_sys_executable_is_forked_from_the_zygote_too(
    tmp_path: Path,
) -> None:
    """The command's ``sys.executable`` is the zygote's stand-in: a ``python -c`` child that
    imports torch takes well under a fresh interpreter's seconds, gets its arguments, pipes
    and ``pass_fds``, and its exit status and a signal come back as a child's would."""
    body = """\
        import os, signal, subprocess, sys, time
        started = time.monotonic()
        child = subprocess.run(
            [sys.executable, "-c", "import sys, torch; print(sys.argv[1:]); sys.exit(3)", "a"],
            capture_output=True, text=True,
        )
        print(child.returncode, child.stdout.strip(), time.monotonic() - started < 2, flush=True)
        print(subprocess.run([sys.executable, "-u", "-c", "print('unbuffered')"]).returncode)
        sleeper = subprocess.Popen(
            [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
            stdout=subprocess.PIPE, text=True,
        )
        print(sleeper.stdout.readline().strip())
        sleeper.send_signal(signal.SIGTERM)
        print(sleeper.wait(30))
        read, write = os.pipe()
        code = f"import os; os.write({write}, b'through pass_fds')"
        subprocess.run([sys.executable, "-c", code], pass_fds=[write])
        os.close(write)
        print(os.read(read, 100).decode())
    """
    command = ZYGOTE.start(_script(tmp_path, "starts.py", body), tmp_path, dict(os.environ))
    out, err = command.communicate(timeout=60)
    assert out.splitlines() == [
        "3 ['a'] True",
        "unbuffered",
        "0",
        "up",
        str(-signal.SIGTERM),
        "through pass_fds",
    ], err

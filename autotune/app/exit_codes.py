"""How a command ends: bad input as one line and exit code 2, a stop (Ctrl-C, SIGTERM) as
128 + the signal; the codes every entry point shares."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from autotune.errors import UsageError
from autotune.runtime.stop import exit_status, sigterm_interrupts


def one_line(exc: BaseException) -> str:
    """The message (and its cause's first line, where Hydra wraps one) on one line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if cause is not None and str(cause).strip():
        first = str(cause).strip().splitlines()[0].strip()
        if first not in lines:
            lines.append(first)
    return "; ".join(lines).replace("\t", " ")


def exit_code(prog: str, body: Callable[[], int], *, interrupted: str = "interrupted") -> int:
    """Runs ``body``: bad input (a UsageError, or Hydra's and OmegaConf's own errors) becomes
    one line on stderr and exit code 2; Ctrl-C or SIGTERM 128 + the signal."""
    try:
        try:
            with sigterm_interrupts():
                return body()
        except (HydraException, OmegaConfBaseException) as exc:
            raise UsageError(one_line(exc)) from None
    except UsageError as exc:
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: {interrupted}", file=sys.stderr)
        return exit_status()


def exit_now(code: int) -> NoReturn:
    """Ends the process with ``code`` once the exit handlers have run and the output is
    flushed, without the interpreter's teardown. With torch imported that teardown (every
    module's objects freed, the C++ libraries' static destructors) took 2 s after an import
    alone and 4.5 s after a study here, after the work was saved: time that a scheduler's grace
    period after SIGTERM, and every run, should not pay. The study's storage has committed
    each write by then. A thread still working is waited for as the interpreter would."""
    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()  # logging's flush, multiprocessing's children, the user's own
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)

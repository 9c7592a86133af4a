"""The fork server every trial's child comes from: a process that imported torch and the
child's code once and never ran them (see ``trial``). Starting it costs as much as importing
torch; a command that will run trials starts it first, so that this import runs beside its
own instead of before the first trial."""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver

# imported once, in the fork server, instead of in every trial: the modules of the child's
# code and of what it unpickles. The server skips a name it cannot import, silently.
PRELOAD = (
    "autotune.runtime.trial",
    "autotune.runtime.job",
    "autotune.runtime.child",
    "autotune.runtime.ranks",
    "autotune.runtime.workload",
    "autotune.pipeline.loader",
    "torchvision.models",
)


def context() -> multiprocessing.context.BaseContext:
    """The start method of trials: the fork server, with ``PRELOAD`` set."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def start() -> None:
    """Starts the fork server now (it imports ``PRELOAD`` on its own) unless it runs."""
    context()
    multiprocessing.forkserver.ensure_running()


def start_for(argv: list[str], *, no_trials: tuple[str, ...] = ()) -> None:
    """At a command's start: ``start()`` unless ``argv`` asks for help or holds one of
    ``no_trials`` (the arguments of a run that runs no trial)."""
    if not any(arg in ("-h", "--help", *no_trials) for arg in argv):
        start()

"""One study measuring per host at a time: trials that share the machine slow each other."""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)


@contextmanager
def host_lock(folder: Path, *, wait_s: float | None = None) -> Iterator[None]:
    """Holds ``folder/.autotune.lock`` (an advisory ``flock``, released if the process dies).

    A second run on the same folder waits (saying so once), for at most ``wait_s`` seconds
    (None: as long as it takes), then raises ``TimeoutError``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ".autotune.lock"
    with open(path, "a+") as handle:
        start = time.monotonic()
        announced = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                if not announced:
                    log.warning("waiting: %s is measuring on this host (%s)", holder, path)
                    announced = True
                if wait_s is not None and time.monotonic() - start > wait_s:
                    raise TimeoutError(f"{holder} still holds {path}") from None
                time.sleep(0.5)
        handle.seek(0)
        handle.truncate()
        handle.write(f"autotune pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)

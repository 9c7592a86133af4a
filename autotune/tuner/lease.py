"""Leases in the study's storage: a study-wide step that one process takes at a time, whichever
asks first (the next trial, the reference points, the confirmation), however many hosts share
the study.

A lease is a row of its own table beside Optuna's, in the same database. Taking it is one
INSERT (the primary key lets one process in) or one UPDATE of a lease whose holder stopped
renewing it (its host died); both are atomic in any database Optuna's RDB storage supports.
Times are the database's clock, so the hosts' own clocks may disagree.
"""

from __future__ import annotations

import datetime
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

_METADATA = sa.MetaData()
LEASES = sa.Table(
    "autotune_leases",
    _METADATA,
    sa.Column("study_name", sa.String(512), primary_key=True),
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("holder", sa.String(256), nullable=False),
    sa.Column("renewed_at", sa.DateTime, nullable=False),
    sa.Column("done", sa.Boolean, nullable=False),
)


def this_process() -> str:
    """A holder's name: host, pid and when the process started (simulated hosts on one
    machine differ by pid; a pid taken again, as a restarted container's, by its start)."""
    return f"{socket.gethostname()} pid {os.getpid()} since {_started(os.getpid())}"


def _started(pid: int) -> str | None:
    try:
        return f"{psutil.Process(pid).create_time():.2f}"
    except psutil.Error:
        return None


def is_gone(holder: str) -> bool:
    """Whether ``holder`` (``this_process``'s name) was a process of this host that has
    ended (its pid gone, or another process's now); a process of another host is never
    known gone here."""
    host, _, rest = holder.rpartition(" pid ")
    pid, _, since = rest.partition(" since ")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)  # signal 0: only whether the process is there
    except ProcessLookupError:
        return True
    except PermissionError:  # there, another user's
        return False
    return since not in ("", "None") and _started(int(pid)) not in (None, since)


class Leases:
    """The leases of one study. ``expire_s``: a lease not renewed for this long is free."""

    def __init__(
        self, storage: str, study_name: str, *, expire_s: float, holder: str | None = None
    ) -> None:
        self.study_name, self.expire_s = study_name, expire_s
        self.holder = holder or this_process()
        self._engine = sa.create_engine(storage, poolclass=NullPool)
        for attempt in range(5):
            try:
                _METADATA.create_all(self._engine)
                break
            except sa.exc.DBAPIError:  # another host is creating it this moment: look again
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def _now(self, conn: sa.Connection) -> datetime.datetime:
        now = conn.execute(sa.select(sa.func.now())).scalar_one()
        return now.replace(tzinfo=None)  # PostgreSQL's is aware; the column is naive

    def _where(self, name: str) -> sa.ColumnElement[bool]:
        return sa.and_(LEASES.c.study_name == self.study_name, LEASES.c.name == name)

    def take(self, name: str) -> bool:
        """Takes ``name`` if no one holds it (or its holder stopped renewing it) and it is not
        done: True if this process now holds it."""
        try:
            with self._engine.begin() as conn:
                conn.execute(
                    LEASES.insert().values(
                        study_name=self.study_name,
                        name=name,
                        holder=self.holder,
                        renewed_at=self._now(conn),
                        done=False,
                    )
                )
            return True
        except sa.exc.IntegrityError:
            pass  # held, expired or done: one UPDATE decides
        with self._engine.begin() as conn:
            stale = self._now(conn) - datetime.timedelta(seconds=self.expire_s)
            taken = conn.execute(
                LEASES.update()
                .where(self._where(name), ~LEASES.c.done, LEASES.c.renewed_at < stale)
                .values(holder=self.holder, renewed_at=self._now(conn))
            )
            return taken.rowcount == 1

    def _update_mine(self, name: str, **values: object) -> None:
        with self._engine.begin() as conn:
            mine = sa.and_(self._where(name), LEASES.c.holder == self.holder, ~LEASES.c.done)
            conn.execute(LEASES.update().where(mine).values(**values))

    def renew(self, name: str) -> None:
        with self._engine.begin() as conn:
            now = self._now(conn)
        self._update_mine(name, renewed_at=now)

    def finish(self, name: str) -> None:
        """Marks ``name`` done: no one takes it again."""
        self._update_mine(name, done=True)

    def release(self, name: str) -> None:
        """Frees ``name`` if this process holds it (and it is not done); idempotent."""
        with self._engine.begin() as conn:
            mine = sa.and_(self._where(name), LEASES.c.holder == self.holder, ~LEASES.c.done)
            conn.execute(LEASES.delete().where(mine))

    def holder_of(self, name: str) -> tuple[str, bool] | None:
        """Who holds or held ``name`` and whether it is done; None if no one took it."""
        with self._engine.connect() as conn:
            row = conn.execute(
                sa.select(LEASES.c.holder, LEASES.c.done).where(self._where(name))
            ).first()
        return None if row is None else (row.holder, bool(row.done))

    def is_done(self, name: str) -> bool:
        held = self.holder_of(name)
        return held is not None and held[1]

    @contextmanager
    def renewed(self, name: str) -> Iterator[None]:
        """While inside, a thread renews ``name`` (held by this process) well before it
        would expire, so a long step keeps it; a dead process stops renewing."""
        stopped = threading.Event()

        def renew() -> None:
            while not stopped.wait(self.expire_s / 4):
                self.renew(name)

        thread = threading.Thread(target=renew, name=f"lease {name}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stopped.set()
            thread.join()

    @contextmanager
    def one_at_a_time(self, name: str, *, poll_s: float = 0.05) -> Iterator[None]:
        """Waits for ``name``, holds it while inside (renewed), then releases it."""
        while not self.take(name):
            time.sleep(poll_s)
        try:
            with self.renewed(name):
                yield
        finally:
            self.release(name)

    def dispose(self) -> None:
        self._engine.dispose()

"""A real PostgreSQL server for the tests: a throwaway cluster on loopback, started by the tests
themselves from the Debian server binaries (``.ci/run`` installs them), and one fresh database
per test. Imported as ``postgres`` (tests/ is on the path); the fixtures are in conftest."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg

USER = "autotune"


def _bin_dir() -> Path | None:
    """The newest installed server's binaries (Debian keeps them out of PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=_version)
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def _version(path: str) -> int:
    part = Path(path).parent.parent.name
    return int(part) if part.isdigit() else 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    folder: Path
    port: int
    as_user: list[str]  # the command prefix that runs the server as its own user
    bin_dir: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database: its SQLAlchemy URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=USER, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        subprocess.run(
            [
                *self.as_user,
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.folder / "data"),
                "-m",
                "immediate",
                "stop",
            ],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.folder, ignore_errors=True)


def start() -> Server:
    """initdb and start a cluster on a free loopback port. PostgreSQL refuses to run as root:
    under root, the cluster belongs to the ``postgres`` user Debian's package creates."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        raise RuntimeError(
            "no PostgreSQL server binaries (pg_ctl): apt-get install postgresql (.ci/run does)"
        )
    folder = Path(tempfile.mkdtemp(prefix="autotune-pg-"))  # not under root's 0700 tmp
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", _free_port()
    subprocess.run(
        [
            *as_user,
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            USER,
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        ],
        capture_output=True,
        check=True,
    )
    options = (
        f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories='' "
        "-c fsync=off -c synchronous_commit=off -c max_connections=200"
    )
    subprocess.run(
        [
            *as_user,
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-w",
            "-l",
            str(folder / "server.log"),
            "start",
        ],
        capture_output=True,
        check=True,
    )
    return Server(folder, port, as_user, bin_dir)

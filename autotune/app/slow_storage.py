"""``python -m autotune.slow_storage SRC MOUNTPOINT [latency_ms=20] [mb_per_s=0]``: storage that
makes reads wait, for trying a pipeline as it runs on network storage.

SRC is mounted read-only at MOUNTPOINT through a FUSE file system (libfuse 3, root or
``/dev/fuse`` access) that answers every ``open`` and every ``read`` request after
``latency_ms``, and sends at most ``mb_per_s`` per read (0: no cap). The waits are real
waits in the kernel's file system calls, as on NFS or a FUSE-mounted bucket: a DataLoader
worker blocks in ``read()`` without using a CPU, and requests from several workers are
answered concurrently, as a networked store does. The latency is added by this server,
not measured from a network: reports name it as added.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune.errors import UsageError

try:  # libfuse 3 through ctypes: absent where the system has no libfuse
    import mfusepy
except (ImportError, OSError) as exc:  # OSError: the package is there, libfuse is not
    mfusepy, _MISSING = None, f"{type(exc).__name__}: {exc}"
else:
    _MISSING = ""

USAGE = "usage: python -m autotune.slow_storage SRC MOUNTPOINT [latency_ms=20] [mb_per_s=0]"


def unavailable_reason() -> str | None:
    """Why FUSE mounts cannot be made here, or None."""
    if mfusepy is None:
        return f"libfuse is not usable ({_MISSING}): apt-get install fuse3"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine (a container needs --device /dev/fuse)"
    return None


class SlowPassthrough(mfusepy.Operations if mfusepy else object):  # type: ignore[misc]
    """SRC read-only, each open and read answered after ``latency_s`` (and, with a cap, after
    the time ``bytes_per_s`` needs for the bytes)."""

    use_ns = True

    def __init__(self, root: str, latency_s: float, bytes_per_s: float) -> None:
        self.root, self.latency_s, self.bytes_per_s = root, latency_s, bytes_per_s

    def _path(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        st = os.lstat(self._path(path))
        keys = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid")
        times = {f"{k}": getattr(st, f"{k}_ns") for k in ("st_atime", "st_mtime", "st_ctime")}
        return {**{k: getattr(st, k) for k in keys}, **times}

    def readdir(self, path: str, fh: Any) -> list[str]:
        return [".", "..", *os.listdir(self._path(path))]

    def open(self, path: str, flags: int) -> int:
        time.sleep(self.latency_s)
        return os.open(self._path(path), os.O_RDONLY)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        data = os.pread(fh, size, offset)
        transfer = len(data) / self.bytes_per_s if self.bytes_per_s else 0.0
        time.sleep(self.latency_s + transfer)
        return data

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0


def serve(src: Path, mount: Path, *, latency_ms: float, mb_per_s: float) -> None:
    """Mounts ``src`` at ``mount`` and serves it until unmounted (in the foreground)."""
    reason = unavailable_reason()
    if reason:
        raise UsageError(f"cannot mount slow storage: {reason}")
    ops = SlowPassthrough(str(src.resolve()), latency_ms / 1000, mb_per_s * 1e6)
    mfusepy.FUSE(ops, str(mount), foreground=True, ro=True, nothreads=False)


@contextlib.contextmanager
def mounted(src: Path, *, latency_ms: float, mb_per_s: float = 0.0) -> Iterator[Path]:
    """``src`` behind slow storage, at a fresh mount point, for the ``with`` block; the
    server is a process of its own, unmounted and stopped at the end."""
    mount = Path(tempfile.mkdtemp(prefix="autotune-slow-"))
    command = [sys.executable, "-m", "autotune.slow_storage", str(src), str(mount)]
    command += [f"latency_ms={latency_ms}", f"mb_per_s={mb_per_s}"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not os.path.ismount(mount):
            if server.poll() is not None or time.monotonic() > deadline:
                said = server.stderr.read().decode() if server.stderr else ""
                raise RuntimeError(f"slow storage did not mount {mount}: {said.strip()}")
            time.sleep(0.05)
        yield mount
    finally:
        unmount = shutil.which("fusermount3") or shutil.which("fusermount")
        subprocess.run(
            [unmount, "-u", str(mount)] if unmount else ["umount", str(mount)],
            capture_output=True,
            check=False,
        )
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        with contextlib.suppress(OSError):  # still busy, or removed by hand: left as it is
            mount.rmdir()


@contextlib.contextmanager
def dataset_behind(root: Path, latency_ms: float, needed_by: str) -> Iterator[list[str]]:
    """The image folder at ``root`` behind slow storage of ``latency_ms`` for the block, as
    the Hydra overrides that read it there; none where ``latency_ms`` is 0. ``needed_by``
    begins the one line said where FUSE cannot mount here."""
    if not latency_ms:
        yield []
        return
    why = unavailable_reason()
    if why:
        raise UsageError(f"{needed_by}: {why}")
    with mounted(root, latency_ms=latency_ms) as mount:
        yield ["dataset=imagefolder", f"dataset.root={mount}", "dataset.name=slow"]


def _parse(args: list[str]) -> tuple[Path, Path, float, float]:
    paths = [a for a in args if "=" not in a]
    keys = dict(a.split("=", 1) for a in args if "=" in a)
    unknown = set(keys) - {"latency_ms", "mb_per_s"}
    if len(paths) != 2 or unknown:
        raise UsageError(f"{USAGE} (unknown: {', '.join(sorted(unknown))})" if unknown else USAGE)
    src, mount = (Path(p).expanduser() for p in paths)
    if not src.is_dir() or not mount.is_dir():
        raise UsageError(f"{src if not src.is_dir() else mount} is not a folder: {USAGE}")
    try:
        latency, rate = float(keys.get("latency_ms", 20)), float(keys.get("mb_per_s", 0))
    except ValueError:
        raise UsageError(f"latency_ms and mb_per_s are numbers: {USAGE}") from None
    if latency < 0 or rate < 0:
        raise UsageError("latency_ms and mb_per_s must be >= 0")
    return src, mount, latency, rate


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    try:
        src, mount, latency, rate = _parse(args)
        serve(src, mount, latency_ms=latency, mb_per_s=rate)
    except UsageError as exc:
        print(f"autotune.slow_storage: error: {exc}", file=sys.stderr)
        return 2
    return 0

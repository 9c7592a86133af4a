"""Facts about the machine a study runs on: CPUs, memory, shared memory and GPU, cgroup-aware."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import platform as _platform
import shutil
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch
import torchvision

log = logging.getLogger(__name__)

# cgroup v1 reports "no limit" as a page-aligned LONG_MAX; anything this large is no limit.
_V1_UNLIMITED = 1 << 62


@dataclass(frozen=True)
class GpuInfo:
    """The GPU trials will run on, as NVML reports it."""

    index: int  # NVML index
    name: str
    memory_total_bytes: int
    driver_version: str


@dataclass(frozen=True)
class MachineFacts:
    """What a study can use; CPU and memory figures already honour cgroups and affinity."""

    usable_cpus: int  # min(affinity, ceil(cgroup quota)), at least 1
    logical_cpus: int  # os.cpu_count()
    affinity_cpus: int
    cgroup_cpu_quota: float | None  # in CPUs; None when unlimited or unknown
    memory_total_bytes: int  # min(physical RAM, cgroup limit)
    memory_available_bytes: int  # min(psutil available, cgroup headroom)
    cgroup_memory_limit_bytes: int | None
    shm_free_bytes: int | None  # free bytes in /dev/shm; None if absent
    gpu: GpuInfo | None
    cuda_available: bool
    python_version: str
    torch_version: str
    torchvision_version: str
    platform: str
    gpu_count: int = 0  # CUDA devices visible (CUDA_VISIBLE_DEVICES), 0 without CUDA


def _read(d: Path, *names: str) -> str | None:
    """Stripped text of the first readable file among names in d."""
    for name in names:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            return (d / name).read_text().strip()
    return None


def _read_int(d: Path, *names: str) -> int | None:
    text = _read(d, *names)
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def _cgroup_dirs(root: Path, controller: str, v1_mounts: tuple[str, ...]) -> list[Path]:
    """Existing cgroup directories whose limits apply to this process, innermost first."""
    fs = root / "sys/fs/cgroup"
    hierarchies: list[tuple[Path, str]] = []  # (hierarchy mount, our path inside it)
    for line in (_read(root / "proc/self", "cgroup") or "").splitlines():
        _, _, rest = line.partition(":")
        controllers, sep, rel = rest.partition(":")
        if sep and not controllers:  # v2: "0::/path"
            hierarchies.append((fs, rel))
        elif sep and controller in controllers.split(","):
            # In containers the listed path often does not exist and the mount root is ours.
            hierarchies += [(fs / name, rel) for name in (controllers, *v1_mounts)]
    candidates = []
    for mount, rel in hierarchies:
        parts = [p for p in rel.split("/") if p and p not in (".", "..")]
        # Nested limits all apply, so walk up to the hierarchy root.
        candidates += [mount.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]
    return [d for d in dict.fromkeys(candidates) if d.is_dir()]


def cgroup_cpu_quota(root: Path = Path("/")) -> float | None:
    """Returns the tightest cgroup CPU quota in CPUs (e.g. 1.5), or None if unlimited or unknown.

    Args:
        root: Filesystem root holding ``proc/self/cgroup`` and ``sys/fs/cgroup``.
    """
    quotas = []
    for d in _cgroup_dirs(root, "cpu", ("cpu,cpuacct", "cpuacct,cpu", "cpu")):
        fields = (_read(d, "cpu.max") or "").split()  # v2: "max 100000" or "150000 100000"
        if len(fields) != 2:
            fields = [str(_read_int(d, f"cpu.cfs_{n}_us")) for n in ("quota", "period")]
        if all(f.isdigit() and int(f) > 0 for f in fields):  # "max" and v1 "-1" mean unlimited
            quotas.append(int(fields[0]) / int(fields[1]))
    return min(quotas) if quotas else None


def _memory_levels(root: Path) -> list[tuple[int | None, int | None]]:
    """(limit, working-set usage) of each cgroup level, innermost first; either may be None."""
    levels = []
    for d in _cgroup_dirs(root, "memory", ("memory",)):
        limit = _read_int(d, "memory.max", "memory.limit_in_bytes")  # v2 "max" reads as None
        usage = _read_int(d, "memory.current", "memory.usage_in_bytes")
        stat = dict(
            line.split()
            for line in (_read(d, "memory.stat") or "").splitlines()
            if len(line.split()) == 2
        )
        # Inactive page cache is reclaimable; counting it would make a busy cgroup look full.
        # v1 usage is hierarchical, so its hierarchical total_inactive_file goes with it.
        inactive = stat.get("total_inactive_file", stat.get("inactive_file", "0"))
        if usage is not None and inactive.isdigit():
            usage = max(0, usage - int(inactive))
        levels.append((limit if limit is None or limit < _V1_UNLIMITED else None, usage))
    return levels


def cgroup_memory_limit(root: Path = Path("/")) -> int | None:
    """Returns the tightest cgroup memory limit in bytes, or None if unlimited or unknown.

    Args:
        root: Filesystem root holding ``proc/self/cgroup`` and ``sys/fs/cgroup``.
    """
    limits = [limit for limit, _ in _memory_levels(root) if limit is not None]
    return min(limits) if limits else None


def cgroup_memory_usage(root: Path = Path("/")) -> int | None:
    """Returns bytes used by the cgroup whose limit binds (the innermost one if none does).

    Usage excludes inactive file cache, which the kernel reclaims before hitting the limit.

    Args:
        root: Filesystem root holding ``proc/self/cgroup`` and ``sys/fs/cgroup``.
    """
    levels = [(lim, use) for lim, use in _memory_levels(root) if use is not None]
    limited = [(lim, use) for lim, use in levels if lim is not None]
    return min(limited)[1] if limited else (levels[0][1] if levels else None)


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def usable_cpus(root: Path = Path("/"), *, affinity: int | None = None) -> int:
    """Returns how many CPUs the process may really use: affinity capped by the cgroup quota.

    Args:
        root: Filesystem root holding ``proc/self/cgroup`` and ``sys/fs/cgroup``.
        affinity: Affinity CPU count to use instead of the real one (for tests).
    """
    count = _affinity() if affinity is None else affinity
    quota = cgroup_cpu_quota(root)
    return max(1, count if quota is None else min(count, math.ceil(quota)))


def shm_free_bytes(path: Path = Path("/dev/shm")) -> int | None:
    """Returns free bytes in shared memory (DataLoader workers pass batches there), or None."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def detect_gpu() -> GpuInfo | None:
    """Returns the first GPU CUDA will see (honouring CUDA_VISIBLE_DEVICES) via NVML, or None.

    None means no NVML library, no driver, no visible GPU or any NVML error. NVML does not
    initialise CUDA, so forking trial processes afterwards stays safe.
    """
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:  # no library or no driver
        log.debug("NVML unavailable: %s", exc)
        return None
    try:
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        if not first or first.startswith("-"):
            return None  # CUDA_VISIBLE_DEVICES hides every GPU
        if first.isdigit():
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(first))
        else:
            handle = pynvml.nvmlDeviceGetHandleByUUID(first)
        name, driver = pynvml.nvmlDeviceGetName(handle), pynvml.nvmlSystemGetDriverVersion()
        return GpuInfo(
            index=int(pynvml.nvmlDeviceGetIndex(handle)),
            name=name.decode() if isinstance(name, bytes) else str(name),
            memory_total_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
            driver_version=driver.decode() if isinstance(driver, bytes) else str(driver),
        )
    except pynvml.NVMLError as exc:
        log.debug("no usable GPU: %s", exc)
        return None
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def detect(
    *, want_cuda: bool = True, root: Path = Path("/"), affinity: int | None = None
) -> MachineFacts:
    """Collects the machine facts a study records and sizes its search space from.

    Args:
        want_cuda: Whether the study wants CUDA; False reports cuda_available=False.
        root: Filesystem root holding ``proc/self/cgroup`` and ``sys/fs/cgroup``.
        affinity: Affinity CPU count to use instead of the real one (for tests).
    """
    # NVML-based check (read when is_available is called) answers without initialising CUDA,
    # so trials can still be forked.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    affinity_cpus = _affinity() if affinity is None else affinity
    vm = psutil.virtual_memory()
    limit = cgroup_memory_limit(root)
    available = int(vm.available)
    for level_limit, level_usage in _memory_levels(root):
        if level_limit is not None and level_usage is not None:
            available = min(available, max(0, level_limit - level_usage))
    return MachineFacts(
        usable_cpus=usable_cpus(root, affinity=affinity_cpus),
        logical_cpus=os.cpu_count() or 1,
        affinity_cpus=affinity_cpus,
        cgroup_cpu_quota=cgroup_cpu_quota(root),
        memory_total_bytes=int(vm.total) if limit is None else min(int(vm.total), limit),
        memory_available_bytes=available,
        cgroup_memory_limit_bytes=limit,
        shm_free_bytes=shm_free_bytes(),
        gpu=detect_gpu(),
        cuda_available=(cuda := bool(want_cuda and torch.cuda.is_available())),
        gpu_count=torch.cuda.device_count() if cuda else 0,
        python_version=_platform.python_version(),
        torch_version=str(torch.__version__),
        torchvision_version=str(torchvision.__version__),
        platform=_platform.platform(),
    )

"""Tests for autotune.machine: cgroup parsing on fake trees, and detect() on this machine."""

from __future__ import annotations

import dataclasses
import sys
import types
from pathlib import Path

import pytest

from autotune import machine
from autotune.machine import GpuInfo, MachineFacts

GIB = 1 << 30
V1_UNLIMITED = "9223372036854771712"


def fake_root(tmp_path: Path, cgroup: str, files: dict[str, str]) -> Path:
    """Builds <tmp>/proc/self/cgroup and files under <tmp>/sys/fs/cgroup."""
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    for rel, text in files.items():
        path = tmp_path / "sys/fs/cgroup" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return tmp_path


# --- CPU, cgroup v2 ---------------------------------------------------------------------------


def test_v2_fractional_quota_caps_affinity(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "0::/job\n", {"job/cpu.max": "150000 100000"})
    assert machine.cgroup_cpu_quota(root) == pytest.approx(1.5)
    assert machine.usable_cpus(root, affinity=4) == 2


def test_v2_max_means_unlimited(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "0::/job\n", {"job/cpu.max": "max 100000"})
    assert machine.cgroup_cpu_quota(root) is None
    assert machine.usable_cpus(root, affinity=4) == 4


def test_v2_quota_larger_than_affinity_keeps_affinity(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "0::/job\n", {"job/cpu.max": "800000 100000"})
    assert machine.usable_cpus(root, affinity=3) == 3


def test_v2_nested_parent_tighter_than_child(tmp_path: Path) -> None:
    root = fake_root(
        tmp_path,
        "0::/outer/inner\n",
        {"outer/cpu.max": "50000 100000", "outer/inner/cpu.max": "400000 100000"},
    )
    assert machine.cgroup_cpu_quota(root) == pytest.approx(0.5)
    assert machine.usable_cpus(root, affinity=8) == 1


def test_v2_quota_at_mount_root_when_listed_path_missing(tmp_path: Path) -> None:
    # Inside a container without a cgroup namespace the listed path does not exist.
    root = fake_root(tmp_path, "0::/docker/abc\n", {"cpu.max": "200000 100000"})
    assert machine.cgroup_cpu_quota(root) == pytest.approx(2.0)


# --- CPU, cgroup v1 ---------------------------------------------------------------------------


def test_v1_quota(tmp_path: Path) -> None:
    root = fake_root(
        tmp_path,
        "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n",
        {
            "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "50000",
            "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000",
        },
    )
    assert machine.cgroup_cpu_quota(root) == pytest.approx(0.5)
    assert machine.usable_cpus(root, affinity=8) == 1


def test_v1_minus_one_means_unlimited(tmp_path: Path) -> None:
    root = fake_root(
        tmp_path,
        "4:cpu,cpuacct:/docker/abc\n",
        {
            "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "-1",
            "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000",
        },
    )
    assert machine.cgroup_cpu_quota(root) is None
    assert machine.usable_cpus(root, affinity=8) == 8


@pytest.mark.parametrize("mount", ["cpu,cpuacct", "cpu"])
def test_v1_quota_at_mount_root_when_listed_path_missing(tmp_path: Path, mount: str) -> None:
    root = fake_root(
        tmp_path,
        "4:cpu,cpuacct:/docker/abc\n",
        {f"{mount}/cpu.cfs_quota_us": "300000", f"{mount}/cpu.cfs_period_us": "100000"},
    )
    assert machine.cgroup_cpu_quota(root) == pytest.approx(3.0)


def test_v1_separate_cpu_hierarchy(tmp_path: Path) -> None:
    root = fake_root(
        tmp_path,
        "2:cpuacct:/\n1:cpu:/\n",
        {"cpu/cpu.cfs_quota_us": "250000", "cpu/cpu.cfs_period_us": "100000"},
    )
    assert machine.usable_cpus(root, affinity=16) == 3


# --- missing and broken files -----------------------------------------------------------------


def test_missing_everything_gives_none(tmp_path: Path) -> None:
    assert machine.cgroup_cpu_quota(tmp_path) is None
    assert machine.cgroup_memory_limit(tmp_path) is None
    assert machine.cgroup_memory_usage(tmp_path) is None
    assert machine.usable_cpus(tmp_path, affinity=5) == 5


def test_listed_cgroup_without_files_gives_none(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "0::/job\n4:cpu,cpuacct:/x\n4:memory:/x\n", {"job/other": "1"})
    assert machine.cgroup_cpu_quota(root) is None
    assert machine.cgroup_memory_limit(root) is None


def test_garbage_and_unreadable_files_give_none(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "0::/job\n", {"job/cpu.max": "banana", "job/memory.max": ""})
    (root / "sys/fs/cgroup/job/memory.current").mkdir()  # reading a directory raises
    assert machine.cgroup_cpu_quota(root) is None
    assert machine.cgroup_memory_limit(root) is None
    assert machine.cgroup_memory_usage(root) is None


def test_usable_cpus_at_least_one(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "0::/\n", {"cpu.max": "10000 100000"})
    assert machine.usable_cpus(root, affinity=0) == 1
    assert machine.usable_cpus(root, affinity=4) == 1


# --- memory -----------------------------------------------------------------------------------


def test_v2_memory_limit_and_usage(tmp_path: Path) -> None:
    root = fake_root(
        tmp_path,
        "0::/job\n",
        {
            "job/memory.max": str(2 * GIB),
            "job/memory.current": str(GIB),
            "job/memory.stat": f"anon 123\ninactive_file {GIB // 4}\nactive_file 7",
        },
    )
    assert machine.cgroup_memory_limit(root) == 2 * GIB
    # Inactive page cache is reclaimable, so it does not count as used.
    assert machine.cgroup_memory_usage(root) == GIB - GIB // 4


def test_v2_memory_max_means_unlimited(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "0::/job\n", {"job/memory.max": "max", "job/memory.current": "5"})
    assert machine.cgroup_memory_limit(root) is None
    assert machine.cgroup_memory_usage(root) == 5


def test_v2_memory_nested_parent_tighter(tmp_path: Path) -> None:
    root = fake_root(
        tmp_path,
        "0::/outer/inner\n",
        {
            "outer/memory.max": str(GIB),
            "outer/memory.current": str(GIB // 2),
            "outer/inner/memory.max": str(4 * GIB),
            "outer/inner/memory.current": str(GIB // 8),
        },
    )
    assert machine.cgroup_memory_limit(root) == GIB
    # Usage is that of the cgroup whose limit binds: the parent, which includes siblings.
    assert machine.cgroup_memory_usage(root) == GIB // 2


def test_v1_memory_limit_and_usage(tmp_path: Path) -> None:
    root = fake_root(
        tmp_path,
        "4:memory:/docker/abc\n",
        {
            "memory/docker/abc/memory.limit_in_bytes": str(3 * GIB),
            "memory/docker/abc/memory.usage_in_bytes": str(GIB),
            "memory/docker/abc/memory.stat": "inactive_file 1\ntotal_inactive_file 1000",
        },
    )
    assert machine.cgroup_memory_limit(root) == 3 * GIB
    assert machine.cgroup_memory_usage(root) == GIB - 1000


def test_v1_memory_huge_value_means_unlimited(tmp_path: Path) -> None:
    root = fake_root(
        tmp_path,
        "4:memory:/docker/abc\n",
        {
            "memory/memory.limit_in_bytes": V1_UNLIMITED,
            "memory/memory.usage_in_bytes": str(GIB),
        },
    )
    assert machine.cgroup_memory_limit(root) is None
    assert machine.cgroup_memory_usage(root) == GIB


# --- shm, GPU ---------------------------------------------------------------------------------


def test_shm_free_bytes(tmp_path: Path) -> None:
    assert machine.shm_free_bytes(tmp_path) > 0  # type: ignore[operator]
    assert machine.shm_free_bytes(tmp_path / "absent") is None


class _FakeNVMLError(Exception):
    pass


def _fake_pynvml(init_fails: bool = False) -> types.ModuleType:
    def init() -> None:
        if init_fails:
            raise _FakeNVMLError("NVML Shared Library Not Found")

    mem = types.SimpleNamespace(total=141 * GIB)
    return types.SimpleNamespace(  # type: ignore[return-value]
        NVMLError=_FakeNVMLError,
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: ("h", i),
        nvmlDeviceGetHandleByUUID=lambda u: ("h", 7),
        nvmlDeviceGetIndex=lambda h: h[1],
        nvmlDeviceGetName=lambda h: b"NVIDIA H200",
        nvmlDeviceGetMemoryInfo=lambda h: mem,
        nvmlSystemGetDriverVersion=lambda: "580.1",
    )


def test_detect_gpu_none_when_nvml_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(init_fails=True))
    assert machine.detect_gpu() is None


def test_detect_gpu_reads_first_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert machine.detect_gpu() == GpuInfo(2, "NVIDIA H200", 141 * GIB, "580.1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234")
    assert machine.detect_gpu().index == 7  # type: ignore[union-attr]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert machine.detect_gpu() is None


# --- detect -----------------------------------------------------------------------------------


def test_detect_on_fake_cgroup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    root = fake_root(
        tmp_path,
        "0::/job\n",
        {
            "job/cpu.max": "150000 100000",
            "job/memory.max": str(64 << 20),
            "job/memory.current": str(16 << 20),
        },
    )
    facts = machine.detect(root=root, affinity=4, want_cuda=False)
    assert (facts.usable_cpus, facts.affinity_cpus, facts.cgroup_cpu_quota) == (2, 4, 1.5)
    assert facts.cgroup_memory_limit_bytes == 64 << 20
    assert facts.memory_total_bytes == 64 << 20
    assert 0 <= facts.memory_available_bytes <= 48 << 20
    assert facts.cuda_available is False


def test_detect_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    facts = machine.detect()
    assert isinstance(facts, MachineFacts)
    assert 1 <= facts.usable_cpus <= facts.affinity_cpus <= facts.logical_cpus
    assert 0 < facts.memory_available_bytes <= facts.memory_total_bytes
    assert facts.shm_free_bytes is None or facts.shm_free_bytes >= 0
    assert facts.torch_version == torch.__version__
    assert facts.python_version.startswith("3.")
    # Trials are forked later, so detect() must not have initialised CUDA.
    assert not torch.cuda.is_initialized()
    assert facts.gpu is None or facts.gpu.memory_total_bytes > 0  # None on CPU-only hosts
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.usable_cpus = 99  # type: ignore[misc]
    assert machine.detect(want_cuda=False).cuda_available is False

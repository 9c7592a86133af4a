"""Tests for autotune.pipeline.best_file: best.yaml written and read back, a file of an older
autotune, its error lines and the other-machine comparison."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

from autotune import machine
from autotune.errors import UsageError
from autotune.machine import GpuInfo, MachineFacts
from autotune.pipeline import best_file
from autotune.pipeline.best_file import BestFile
from autotune.pipeline.config import PipelineConfig

FACTS = MachineFacts(
    usable_cpus=8,
    logical_cpus=16,
    affinity_cpus=8,
    cgroup_cpu_quota=None,
    memory_total_bytes=64 * 2**30,
    memory_available_bytes=48 * 2**30,
    cgroup_memory_limit_bytes=None,
    shm_free_bytes=2**30,
    gpu=GpuInfo(0, "NVIDIA H200", 141 * 2**30, "580.1"),
    cuda_available=True,
    python_version="3.11.7",
    torch_version="2.9.0",
    torchvision_version="0.24.0",
    platform="Linux-6.8-x86_64",
    gpu_count=1,
)
MACHINE = {
    "usable_cpus": 8,
    "gpu": "NVIDIA H200",
    "gpus": 1,
    "torch": "2.9.0",
    "torchvision": "0.24.0",
    "python": "3.11.7",
    "platform": "Linux-6.8-x86_64",
}
BEST = BestFile(
    config=PipelineConfig(
        batch_size=64, num_workers=4, prefetch_factor=2, decoder="pil_reduced", main_threads=2
    ),
    measured=best_file.PipelineFigures(samples_per_s=1234.5, samples_per_s_iqr=[1200.0, 1250.0]),
    as_is=PipelineConfig(
        batch_size=64, num_workers=2, prefetch_factor=4, decoder="as_is", main_threads=1
    ),
    as_is_measured=best_file.Figures(
        samples_per_s=600.0, speedup_vs_baseline=1.2, picked="trial 3"
    ),
    baseline="ImageFolder(root) ...; DataLoader(dataset, batch_size=64, shuffle=True)",
    workload=best_file.WorkloadSection(
        dataset="synthetic", images=512, recipe={"name": "imagenet_train"}
    ),
    machine=best_file.MachineSection(**MACHINE),
    study=best_file.StudySection(name="s", trials={"complete": 3}, interrupted=False),
)


def test_the_header_and_the_order_of_sections(tmp_path: Path) -> None:
    path = tmp_path / "best.yaml"
    best_file.write(path, BEST)
    lines = path.read_text().splitlines()
    header = len(best_file.HEADER.splitlines())
    assert lines[:header] == best_file.HEADER.splitlines()
    assert "**autotune.loader_kwargs(this_file)" in lines[2]
    assert "autotune.build_loader(folder_or_dataset, this_file)" in lines[4]
    assert "per rank" in lines[5]
    top = [line.split(":")[0] for line in lines[header:] if line and not line[0].isspace()]
    assert top == [
        "baseline",
        "ranks",
        "loader_kwargs",
        "loader",
        "pipeline",
        "measured",
        "workload",
        "machine",
        "study",
    ]
    doc = yaml.safe_load(path.read_text())
    assert doc["loader_kwargs"]["main_threads"] == 1
    assert doc["loader_kwargs"]["loader"]["num_workers"] == 2
    assert doc["loader_kwargs"]["measured"]["speedup_vs_baseline"] == 1.2


def test_a_new_file_without_an_as_is_pick_says_so_not_that_it_is_older(tmp_path: Path) -> None:
    path = tmp_path / "best.yaml"
    best_file.write(path, BestFile(BEST.config, baseline="b"))  # no as-is config confirmed
    assert "loader_kwargs: null" in path.read_text()
    read = best_file.read(path)
    assert read.as_is is None and not read.older
    with pytest.raises(UsageError, match="none of its configs finished the confirmation"):
        best_file.as_is_of(read, path)


def test_a_file_of_an_older_autotune_keeps_build_loader_and_refuses_loader_kwargs(
    tmp_path: Path,
) -> None:
    """Written before the pipeline as it is was tuned: loader and pipeline sections only."""
    path = tmp_path / "best.yaml"
    doc = {**BEST.config.to_dict(), "measured": BEST.measured.to_dict(), "machine": MACHINE}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    old = best_file.read(path)
    assert old.config == BEST.config and old.as_is is None
    with pytest.raises(UsageError) as info:
        best_file.as_is_of(old, path)
    assert str(info.value).startswith(f"{path} was written by an older autotune:")
    assert "\n" not in str(info.value) and "tune again under a new study.name" in str(info.value)


def test_write_then_read(tmp_path: Path) -> None:
    path = tmp_path / "best.yaml"
    best_file.write(path, BEST)
    assert best_file.read(path) == BEST
    assert best_file.read(str(path)) == BEST


def test_read_a_file_with_the_loader_sections_only(tmp_path: Path) -> None:
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(PipelineConfig(num_workers=2).to_dict()))
    assert best_file.read(path) == BestFile(PipelineConfig(num_workers=2), older=True)


def test_read_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(UsageError) as info:
        best_file.read(path)
    assert str(info.value) == (
        f"{path} does not exist: pass the best.yaml that python -m autotune wrote"
    )


@pytest.mark.parametrize("text", ["a: 1\n", "- loader\n", ""])
def test_read_a_file_that_is_not_a_best_yaml(tmp_path: Path, text: str) -> None:
    path = tmp_path / "other.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as info:
        best_file.read(path)
    assert str(info.value) == (
        f"{path} has no `loader:` section: is it a best.yaml from autotune?"
    )


def test_machine_section() -> None:
    section = best_file.MachineSection.of(FACTS).to_dict()
    assert section == MACHINE and list(section) == list(MACHINE)  # the order in the file
    assert best_file.MachineSection.of(_without_gpu(FACTS)).gpu is None


def test_a_figure_it_does_not_know_is_left_out_and_a_missing_section_reads_empty(
    tmp_path: Path,
) -> None:
    path = tmp_path / "best.yaml"
    best_file.write(path, BEST)
    doc = yaml.safe_load(path.read_text())
    doc["measured"]["a_later_figure"] = 1.0
    del doc["machine"], doc["loader_kwargs"]["measured"]
    path.write_text(yaml.safe_dump(doc))
    read = best_file.read(path)
    assert read.measured == BEST.measured and read.machine is None
    assert read.as_is_measured == best_file.Figures()


def _without_gpu(facts: MachineFacts) -> MachineFacts:
    return MachineFacts(**{**facts.__dict__, "gpu": None})


def test_machine_differences() -> None:
    section = best_file.MachineSection
    assert best_file.machine_differences(section(**MACHINE), FACTS) == []
    there = section(
        **{**MACHINE, "usable_cpus": 4, "gpu": None, "gpus": 0, "torch": "2.8.0", "python": "3.10"}
    )
    assert best_file.machine_differences(there, FACTS) == [
        "4 usable CPUs there, 8 here",
        "GPU None there, NVIDIA H200 here",
        "0 GPUs there, 1 here",
        "torch 2.8.0 there, 2.9.0 here",
    ]
    # what the section does not say is not compared
    assert best_file.machine_differences(section(python="2.7"), FACTS) == []
    assert best_file.machine_differences(None, FACTS) == []


def _load_and_warn(path: Path) -> None:
    best_file.warn_if_other_machine(best_file.read(path).machine, path)


def test_warns_once_per_file_measured_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(machine, "detect", lambda want_cuda: FACTS)
    here, elsewhere = tmp_path / "here.yaml", tmp_path / "elsewhere.yaml"
    best_file.write(here, BEST)
    other = best_file.MachineSection(**{**MACHINE, "usable_cpus": 2})
    best_file.write(elsewhere, BestFile(BEST.config, machine=other))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _load_and_warn(here)
    with pytest.warns(UserWarning, match="2 usable CPUs there, 8 here") as caught:
        _load_and_warn(elsewhere)
    assert str(caught[0].message).startswith(f"{elsewhere} was measured on another machine (")
    assert caught[0].filename == __file__  # points at the caller of the caller
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _load_and_warn(elsewhere)  # once per file


def test_the_ranks_a_file_was_measured_with_are_kept(tmp_path) -> None:
    path = tmp_path / "best.yaml"
    best_file.write(path, BestFile(PipelineConfig(num_workers=1), ranks=2))
    assert best_file.read(path).ranks == 2
    assert "ranks: 2" in path.read_text()
    older = tmp_path / "older.yaml"
    older.write_text(path.read_text().replace("ranks: 2\n", ""))
    assert best_file.read(older).ranks == 1  # written before ranks: one process

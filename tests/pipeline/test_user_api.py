"""Tests for autotune.pipeline.user_api: what a training script calls with a best.yaml
(``autotune.build_loader``, ``loader_kwargs``, ``load_pipeline_config``)."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from helpers import torchrun

import autotune
from autotune import machine
from autotune.errors import UsageError
from autotune.pipeline import best_file, recipes
from autotune.pipeline.best_file import BestFile, WorkloadSection
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source


def test_loader_kwargs_are_those_tuned_for_the_pipeline_as_it_is(tmp_path: Path) -> None:
    """Not the whole pipeline's: those were tuned for the tuner's decode, not the user's."""
    as_is = PipelineConfig(num_workers=2, prefetch_factor=3, decoder="as_is", main_threads=1)
    whole = PipelineConfig(num_workers=1, decoder="opencv", main_threads=2)
    path = tmp_path / "best.yaml"
    best_file.write(path, BestFile(whole, as_is=as_is))
    threads = torch.get_num_threads()
    try:
        kwargs = autotune.loader_kwargs(path)
        assert torch.get_num_threads() == 1  # the tuned threads: part of what was measured
    finally:
        torch.set_num_threads(threads)
    assert kwargs == as_is.loader_kwargs()
    assert (kwargs["num_workers"], kwargs["prefetch_factor"], kwargs["drop_last"]) == (2, 3, False)


def test_loader_kwargs_refuse_a_file_of_an_older_autotune(tmp_path: Path) -> None:
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(PipelineConfig(num_workers=2).to_dict()))
    with pytest.raises(UsageError, match="written by an older autotune"):
        autotune.loader_kwargs(path)
    assert autotune.load_pipeline_config(path).num_workers == 2  # build_loader's still reads


def test_build_loader_from_a_best_yaml_with_device_augmentation(
    tmp_path: Path, small_set: Source
) -> None:
    doc = PipelineConfig(batch_size=4, num_workers=1, augment_on="gpu").to_dict()
    doc["workload"] = {"recipe": {"name": "imagenet_train", "crop_size": 40}, "device": "cpu"}
    best = tmp_path / "best.yaml"
    best.write_text(yaml.safe_dump(doc))
    images, labels = next(iter(autotune.build_loader(small_set, best)))
    assert images.shape == (4, 3, 40, 40) and labels.shape == (4,)


def test_load_pipeline_config(tmp_path: Path) -> None:
    config = PipelineConfig(batch_size=16, num_workers=2, decoder="opencv")
    path = tmp_path / "best.yaml"
    best_file.write(path, BestFile(config, workload=WorkloadSection(device="cpu")))
    assert autotune.load_pipeline_config(path) == config
    assert autotune.load_pipeline_config(str(path)) == config


def test_a_file_that_is_not_a_best_yaml(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        autotune.load_pipeline_config(tmp_path / "nope.yaml")
    other = tmp_path / "other.yaml"
    other.write_text("a: 1\n")
    with pytest.raises(UsageError, match="has no `loader:` section"):
        autotune.build_loader(tmp_path, other)


def test_warns_about_another_machine_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here = machine.detect(want_cuda=False)
    monkeypatch.setattr(machine, "detect", lambda want_cuda: here)
    elsewhere = dataclasses.replace(
        best_file.MachineSection.of(here), usable_cpus=here.usable_cpus + 1
    )
    path = tmp_path / "best.yaml"
    best_file.write(path, BestFile(PipelineConfig(), machine=elsewhere))
    with pytest.warns(UserWarning, match="was measured on another machine") as caught:
        autotune.load_pipeline_config(path)
    assert caught[0].filename == __file__  # points at the training script
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        autotune.load_pipeline_config(path)


def test_build_loader_takes_the_study_recipe_or_another(tmp_path: Path, small_set: Source) -> None:
    best = tmp_path / "best.yaml"
    workload = WorkloadSection(recipe={"name": "center_crop_eval", "crop_size": 24}, device="cpu")
    best_file.write(best, BestFile(PipelineConfig(batch_size=4), workload=workload))
    measured = autotune.build_loader(small_set, best)
    images, _ = next(iter(measured))
    assert images.shape == (4, 3, 24, 24)
    images, _ = next(iter(autotune.build_loader(small_set, best, crop_size=16)))
    assert images.shape == (4, 3, 16, 16)  # the study's recipe with one setting changed
    images, _ = next(iter(autotune.build_loader(small_set, best, recipe="imagenet_train")))
    assert images.shape == (4, 3, 224, 224)  # another recipe: its own defaults
    own = recipes.CenterCropEval(crop_size=8)
    images, _ = next(iter(autotune.build_loader(small_set, best, recipe=own)))
    assert images.shape == (4, 3, 8, 8)


def test_build_loader_from_a_folder_and_a_config(small_set: Source) -> None:
    tuned = autotune.build_loader(
        small_set.root, PipelineConfig(batch_size=4), recipe="center_crop_eval", crop_size=32
    )
    images, labels = next(iter(tuned))
    assert images.shape == (4, 3, 32, 32) and images.device == torch.device("cpu")
    assert tuned.dataloader.dataset.source == small_set


@pytest.mark.slow
def test_build_loader_under_torchrun_gives_each_rank_its_shard_with_the_tuned_settings(
    tmp_path: Path,
) -> None:
    tuned = PipelineConfig(
        batch_size=4, num_workers=1, prefetch_factor=3, decoder="as_is", main_threads=1
    )
    path = tmp_path / "best.yaml"
    best_file.write(path, BestFile(tuned, as_is=tuned, ranks=2))
    torchrun(Path(__file__).with_name("torchrun_reader.py"), 2, str(path), str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for epoch in (0, 1):
        zero, one = (set(r["epochs"][epoch]) for r in ranks)
        assert not zero & one and zero | one == set(range(40))  # disjoint, all of it
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]  # a new shuffle each epoch
    for r in ranks:
        assert (r["num_workers"], r["prefetch_factor"], r["threads"]) == (1, 3, 1)
        assert r["warnings"] == []  # measured with 2 ranks, run with 2: nothing to say


@pytest.mark.slow
def test_a_file_tuned_for_other_ranks_warns_undertorchrun(tmp_path: Path) -> None:
    tuned = PipelineConfig(batch_size=4, num_workers=1, decoder="as_is", main_threads=1)
    path = tmp_path / "best.yaml"
    best_file.write(path, BestFile(tuned, as_is=tuned))  # one rank
    torchrun(Path(__file__).with_name("torchrun_reader.py"), 2, str(path), str(tmp_path))
    (warning,) = json.loads((tmp_path / "rank0.json").read_text())["warnings"]
    assert "measured with 1 rank(s) per node" in warning and "ranks=2" in warning


def test_build_loader_uses_the_prepared_copy_the_study_kept(
    tmp_path: Path, small_set: Source
) -> None:
    """The copy is made where the study kept its own the first time, then found there."""
    kept = tmp_path / "studies" / "prepared"
    workload = WorkloadSection(
        recipe={"name": "center_crop_eval", "crop_size": 24}, device="cpu", prepared_dir=str(kept)
    )
    best = tmp_path / "best.yaml"
    config = PipelineConfig(batch_size=4, num_workers=1, cache="decoded")
    best_file.write(best, BestFile(config, workload=workload))
    images, _ = next(iter(autotune.build_loader(small_set, best)))
    assert images.shape == (4, 3, 24, 24)
    (made,) = [p for p in kept.iterdir() if p.name.startswith("decoded-")]
    stamp = (made / "prepared.json").stat().st_mtime_ns
    plain = autotune.build_loader(
        small_set, PipelineConfig(batch_size=4), recipe="center_crop_eval", crop_size=24
    )
    again = autotune.build_loader(small_set, best)
    assert torch.equal(next(iter(again))[0], next(iter(plain))[0])  # the same pixels
    assert (made / "prepared.json").stat().st_mtime_ns == stamp  # found, not made again

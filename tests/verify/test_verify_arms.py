"""The arms are what they say: the baseline and the kwargs arm read through torchvision's
ImageFolder with its default loader and the tutorial's transforms, never the tuner's decode,
or through the user's own Dataset and collate; build_loader reads through the tuned pipeline;
epochs are timed from ``iter()``."""

from __future__ import annotations

import pytest
import torch
from helpers import count_reads
from PIL import Image
from torch.utils.data import Subset
from torchvision.datasets import DatasetFolder, ImageFolder
from userdata_example import Spectrograms
from verify_data import write_best

from autotune.pipeline import recipes
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.loader import EncodedImageDataset
from autotune.pipeline.sources import scan_imagefolder, synthetic
from autotune.pipeline.tutorial import tutorial_dataset
from autotune.pipeline.user_data import UserData
from autotune.runtime.epochs import (
    EpochTimes,
    measure_epochs,
    subset_source,
    time_epoch,
)
from autotune.runtime.job import EpochRun, TrialJob
from autotune.runtime.trial import run_trial
from autotune.schema import ModelConfig, RecipeConfig, WindowConfig

RECIPE = RecipeConfig(crop_size=32)
# num_workers=0: every __getitem__ runs in this process, where the tests count them
IN_PROCESS = PipelineConfig(batch_size=4, num_workers=0, drop_last=False, main_threads=1)


@pytest.fixture(scope="module")
def source():
    return synthetic(count=12, num_classes=2, size=(64, 48))


@pytest.fixture
def best(tmp_path):
    return write_best(tmp_path, fingerprint="test", config=IN_PROCESS, recipe=RECIPE)


@pytest.fixture(autouse=True)
def _threads_kept():
    """One thread while the in-process arms run (a 2-thread step stalls on a busy 2-core
    host); build_loader sets its own, as it does for users. Put back after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def reads(monkeypatch):
    """Counts the samples read through ImageFolder and through the tuner's Dataset."""
    return count_reads(monkeypatch, imagefolder=DatasetFolder, tuner=EncodedImageDataset)


def job(source, arm, best=None, *, epochs=1, subset=None, batch_size=4):
    return TrialJob(
        pipeline=PipelineConfig(batch_size=batch_size),
        source=source,
        model=ModelConfig(name="tiny"),
        recipe=RECIPE,
        window=WindowConfig(),
        device="cpu",
        kind="epochs",
        epochs=EpochRun(arm, epochs, str(best) if best else None, subset),
    )


def test_the_baseline_reads_through_imagefolder_and_its_default_loader(source, reads):
    measured = measure_epochs(job(source, "baseline", epochs=2))
    # a first epoch, two timed, and the warm-up's batch of 4 before them, all through
    # ImageFolder
    assert reads == {"imagefolder": 12 + 24 + 4, "tuner": 0}
    assert measured.dataset == "torchvision.datasets.folder.ImageFolder"
    assert measured.reader == "torchvision.datasets.folder.default_loader"
    assert measured.transform == (
        "RandomResizedCrop, RandomHorizontalFlip, ToImage, ToDtype, Normalize"
    )
    assert [e.samples for e in measured.epochs] == [12, 12] and measured.first.samples == 12
    assert all(len(e.step_done_s) == 3 for e in (measured.first, *measured.epochs))  # 4 each


def test_the_kwargs_arm_takes_best_yaml_s_loader_arguments_on_the_same_dataset(
    source, best, reads
):
    write_best(
        best.parent,
        fingerprint="test",
        config=PipelineConfig(batch_size=4, num_workers=1, decoder="opencv"),
        as_is=PipelineConfig(batch_size=5, decoder="as_is", main_threads=1),
        recipe=RECIPE,
    )
    measured = measure_epochs(job(source, "loader_kwargs", best))
    # as it is: the last partial batch too, a first epoch and a timed one, and the warm-up's
    # batch (of 5, the arm's)
    assert reads == {"imagefolder": 12 + 12 + 5, "tuner": 0}
    assert measured.dataset.endswith("ImageFolder")
    # loader_kwargs: batch_size 5, as best.yaml tuned it for the pipeline as it is, and its
    # threads; not the whole pipeline's batch of 4
    assert [e.samples for e in measured.epochs] == [12] and measured.threads == 1
    assert all(len(e.step_done_s) == 3 for e in measured.epochs)


def test_build_loader_reads_through_the_tuned_pipeline(source, best, reads):
    measured = measure_epochs(job(source, "build_loader", best))
    # the warm-up's batch read in the tutorial's form, the step's
    assert reads == {"imagefolder": 4, "tuner": 12 + 12}  # a first epoch, a timed one
    assert measured.dataset == "autotune.pipeline.loader.EncodedImageDataset"
    assert measured.reader == "decoder pil" and measured.threads == 1  # main_threads: 1


def test_every_arm_reads_the_same_subset(source, best, reads):
    chosen = tuple(range(2, 9))
    baseline = measure_epochs(job(source, "baseline", subset=chosen))
    tuned = measure_epochs(job(source, "build_loader", best, subset=chosen))
    assert baseline.epochs[0].samples == tuned.epochs[0].samples == 7
    # a first epoch and a timed one of each arm, and each arm's warm-up batch
    assert reads == {"imagefolder": 7 + 7 + 4 + 4, "tuner": 7 + 7}
    paths = source.paths[2:9]
    dataset = tutorial_dataset(source, recipes.from_config(RECIPE), paths)
    assert isinstance(dataset, Subset)
    assert [dataset.dataset.samples[i][0] for i in dataset.indices] == list(paths)
    assert subset_source(source, chosen).paths == paths


def test_an_epoch_is_timed_from_iter_to_the_last_step():
    ticks = iter([0.0, 0.5, 0.6, 0.9, 1.0])  # start, first batch, step done, step done, end
    started = []

    def batches():
        started.append(True)  # runs inside the clock: iter() is timed
        for _ in range(2):
            yield torch.zeros(2, 1), torch.zeros(2)

    steps = []
    epoch = time_epoch(
        batches(),
        lambda batch: steps.append(len(batch[1])),
        to_device=lambda batch: batch,
        clock=lambda: next(ticks),
    )
    assert started and steps == [2, 2]
    assert (epoch.samples, epoch.seconds, epoch.first_batch_s) == (4, 1.0, 0.5)
    assert epoch.step_done_s == (0.6, 0.9) and epoch.samples_per_s == 4.0


@pytest.mark.slow
def test_the_baseline_arm_in_a_real_child_reports_imagefolder(source):
    """Through the runtime's child process, as verify runs it."""
    outcome = run_trial(job(source, "baseline"), timeout_s=60)
    assert outcome.status == "ok", outcome.failure
    assert isinstance(outcome.measurement, EpochTimes)
    assert outcome.measurement.dataset == f"{ImageFolder.__module__}.ImageFolder"
    assert outcome.measurement.epochs[0].samples == 12


def test_a_class_folder_without_images_does_not_stop_the_tutorial_arms(tmp_path):
    for name in ("cat", "dog"):
        (tmp_path / name).mkdir()
    for i in range(4):
        Image.new("RGB", (48, 40), (60 * i, 90, 30)).save(tmp_path / "dog" / f"{i}.jpg")
    (tmp_path / "cat" / "notes.txt").write_text("no images here")
    source = scan_imagefolder(tmp_path)
    assert source.classes == ("dog",)
    measured = measure_epochs(job(source, "baseline"))
    assert measured.epochs[0].samples == 4  # ImageFolder's label 1 fits the model's classes


def own_job(arm, best=None, *, target="Spectrograms", subset=None, **kwargs):
    """An epochs job over the tests' own Dataset (padded clips of varying length)."""
    data = UserData.check(
        f"userdata_example.{target}", {"count": 10, **kwargs}, "userdata_example.pad_collate"
    )
    return TrialJob(
        pipeline=PipelineConfig(batch_size=4, decoder="as_is"),
        source=data,
        model=ModelConfig(_target_="userdata_example.SpecNet"),
        recipe=RECIPE,
        window=WindowConfig(),
        device="cpu",
        kind="epochs",
        epochs=EpochRun(arm, 1, str(best) if best else None, subset),
    )


def test_the_user_s_own_dataset_is_read_by_both_arms_with_its_collate(best, monkeypatch):
    write_best(
        best.parent,
        fingerprint="test",
        as_is=PipelineConfig(batch_size=3, decoder="as_is", main_threads=1),
        recipe=RECIPE,
    )
    jobs = own_job("baseline", vary=True), own_job("loader_kwargs", best, vary=True)
    reads = count_reads(monkeypatch, own=Spectrograms)  # what the arms read, not the check
    baseline, tuned = (measure_epochs(job) for job in jobs)
    # every sample once per epoch of each arm (a first one and a timed one), in this
    # process, and each arm's warm-up batch (4, then 3)
    assert reads == {"own": 2 * 20 + 4 + 3}
    assert baseline.dataset == tuned.dataset == "userdata_example.Spectrograms"
    assert baseline.reader == "its own __getitem__" and baseline.transform == ""
    # the baseline's batch of 4 and loader_kwargs' 3, the last partial batch kept
    assert [len(baseline.epochs[0].step_done_s), len(tuned.epochs[0].step_done_s)] == [3, 4]
    assert baseline.epochs[0].samples == tuned.epochs[0].samples == 10


def test_a_subset_of_the_user_s_own_dataset_and_a_stream_read_whole(monkeypatch):
    job = own_job("baseline", subset=(1, 4, 5, 8, 9))
    reads = count_reads(monkeypatch, own=Spectrograms)
    measured = measure_epochs(job)
    # a first epoch and a timed one, and the warm-up's batch
    assert measured.epochs[0].samples == 5 and reads == {"own": 2 * 5 + 4}
    stream = measure_epochs(own_job("baseline", target="ToneStream"))
    assert stream.epochs[0].samples == 10 and stream.reader == "its own __iter__"
    with pytest.raises(ValueError, match="cannot be read in part"):
        measure_epochs(own_job("baseline", target="ToneStream", subset=(1, 2)))
    with pytest.raises(ValueError, match="reads image folders"):
        measure_epochs(own_job("build_loader", "best.yaml"))

"""autotune.runtime.child: what a trial's child measures, run here in this process (no fork),
on a tiny model and a loader without workers."""

from __future__ import annotations

import pytest
import torch
import userdata_example
from helpers import count_reads
from torchvision.datasets import DatasetFolder

from autotune.errors import UsageError
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.loader import EncodedImageDataset
from autotune.pipeline.sources import synthetic
from autotune.pipeline.user_data import UserData
from autotune.runtime.child import UntilEnded, measure
from autotune.runtime.job import TrialJob
from autotune.runtime.window import WindowStopped
from autotune.schema import ModelConfig, RecipeConfig, StepConfig, WindowConfig

WINDOW = WindowConfig(
    warmup_extra_batches=1,
    sub_windows=3,
    batches_per_window=2,
    min_sub_window_s=0.0,
    target_spread=0.0,
)


@pytest.fixture(scope="module")
def source():
    return synthetic(count=16, num_classes=2)


@pytest.fixture(autouse=True)
def _keep_torch_as_it_was():
    """``measure`` sets the seed and threads of its process: this one's are put back."""
    threads = torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        yield
    torch.set_num_threads(threads)


def ignore(index: int, value: float) -> None:
    """A report that lets every window run to its end."""


def job(source, *, model: str = "tiny", **kwargs) -> TrialJob:
    pipeline = kwargs.pop("pipeline", PipelineConfig(batch_size=4))
    return TrialJob(
        pipeline=pipeline,
        source=source,
        model=ModelConfig(name=model),
        recipe=RecipeConfig(crop_size=32),
        window=WINDOW,
        device="cpu",
        **kwargs,
    )


def test_the_window_reports_each_epoch_but_the_last(source) -> None:
    reported: list[tuple[int, float]] = []
    m = measure(job(source), lambda index, value: reported.append((index, value)))
    assert [index for index, _ in reported] == [0]  # after the first of two real epochs
    assert reported[0][1] == pytest.approx(m.sub_window_samples_per_s[0])  # its rate so far
    assert len(m.sub_window_samples_per_s) == 2 and m.samples_per_s > 0
    # no workers: nothing buffered. 16 samples are 4 batches of 4: each sub-window is at
    # least 2 batches, so it is a real epoch of one pass (window.epoch_sub_windows: 2 of
    # them, where sub-windows inside an epoch are 3), its flow timed after its first batch
    assert (m.warmup_batches, m.timed_batches) == (1, 2 * (4 - 1)) and m.whole_passes
    assert m.gpu_peak_memory_bytes is None and m.gpu_utilization_pct is None  # no GPU


def test_the_ceiling_is_timed_without_reports(source) -> None:
    reported: list[int] = []
    m = measure(job(source, kind="ceiling"), lambda index, value: reported.append(index))
    assert reported == []
    assert m.timed_batches == 6 and m.samples_per_s > 0


def test_a_report_that_prunes_stops_the_window(source) -> None:
    def prune(index: int, value: float) -> None:
        raise WindowStopped(index)

    with pytest.raises(WindowStopped) as stopped:
        measure(job(source), prune)
    assert stopped.value.args == (0,)


def test_main_threads_is_set_for_the_process(source) -> None:
    torch.set_num_threads(2)
    measure(job(source, pipeline=PipelineConfig(batch_size=4, main_threads=1)), ignore)
    assert torch.get_num_threads() == 1


def test_an_unknown_model_is_a_usage_error(source) -> None:
    with pytest.raises(UsageError, match="unknown model"):
        measure(job(source, model="resnet7"), ignore)


@pytest.mark.slow
def test_the_baseline_window_reads_through_the_tutorial_s_image_folder(source, monkeypatch):
    """The baseline trial times what users run: ImageFolder's own __getitem__ (its PIL
    loader, the tutorial's transforms), never the tuner's decode path."""
    reads = count_reads(monkeypatch, imagefolder=DatasetFolder, tuner=EncodedImageDataset)
    baseline = PipelineConfig(batch_size=4, decoder="as_is")  # num_workers=0: read here
    m = measure(job(source, pipeline=baseline), ignore)
    assert m.samples_per_s > 0
    assert reads["imagefolder"] >= 4 * (1 + 1 + 6) and reads["tuner"] == 0
    measure(job(source), ignore)  # the tuner's own pipeline, for contrast
    assert reads["tuner"] > 0


def test_the_sampler_runs_on_until_its_epoch_is_ended() -> None:
    """In a real DataLoader with a persistent worker: no end for many passes over the data,
    then an end within the batches in flight, then a new epoch from the same workers."""
    sampler = UntilEnded(6, seed=0)
    loader = torch.utils.data.DataLoader(
        range(6), batch_size=2, sampler=sampler, num_workers=1, persistent_workers=True
    )
    it = iter(loader)
    seen = [next(it) for _ in range(9)]  # three passes over 6 samples
    assert sorted(torch.cat(seen[:3]).tolist()) == list(range(6))  # each pass a permutation
    sampler.end_epoch()
    rest = list(it)
    # what was in flight: the worker's prefetch (2 batches), one maybe cut short
    assert 1 <= len(rest) <= 3 and all(len(batch) <= 2 for batch in rest)
    again = iter(loader)
    assert len(next(again)) == 2  # a new epoch, endless again
    del again
    sampler.one_pass()  # the next epoch: one pass, then its end (a whole epoch timed)
    whole = list(iter(loader))
    assert len(whole) == 3 and sorted(torch.cat(whole).tolist()) == list(range(6))
    assert len([next(it) for it in [iter(loader)] for _ in range(5)]) == 5  # endless again


def test_the_window_reads_a_seeded_random_order_over_the_whole_dataset() -> None:
    """Uneven data (a folder sorted by size, say) is timed as training reads it: across the
    whole dataset, never its first files; the same seed, the same order."""
    first = [index for index, _ in zip(UntilEnded(1000, seed=0), range(64), strict=False)]
    assert first != sorted(first) and max(first) > 900 and min(first) < 100
    again = [index for index, _ in zip(UntilEnded(1000, seed=0), range(64), strict=False)]
    assert again == first
    # passes of whole batches: 10 samples in batches of 4 are passes of 8 distinct samples
    cut = UntilEnded(10, seed=0, batch_size=4)
    stream = [index for index, _ in zip(cut, range(24), strict=False)]
    assert cut.pass_batches == 2
    assert all(len(set(stream[i : i + 8])) == 8 for i in (0, 8, 16))
    assert UntilEnded(3, seed=0, batch_size=4).pass_batches is None  # less than a batch


def test_a_window_with_workers_times_the_next_epoch_s_start(source) -> None:
    persistent = PipelineConfig(
        batch_size=4, num_workers=1, prefetch_factor=2, persistent_workers=True
    )
    m = measure(job(source, pipeline=persistent), ignore)
    # timed, on this machine's clock: what it adds up is pinned on a scripted clock in
    # test_window (a wall time here, against another, would be the machine's noise)
    assert m.epoch_start_s is not None and m.epoch_start_s > 0


def test_a_trial_of_a_dataset_of_the_user_s_own_runs_its_getitem(monkeypatch) -> None:
    """The baseline trial (and every trial as it is) of a tutorial-style Dataset of the
    user's own reads through that Dataset's __getitem__, never the tuner's decode path."""
    reads = count_reads(monkeypatch, own=userdata_example.Spectrograms, tuner=EncodedImageDataset)
    data = UserData.check("userdata_example.Spectrograms", {"count": 16})
    baseline = PipelineConfig(batch_size=4, decoder="as_is")  # num_workers=0: read here
    model = ModelConfig(_target_="userdata_example.SpecNet")
    m = measure(
        TrialJob(
            pipeline=baseline,
            source=data,
            model=model,
            recipe=RecipeConfig(crop_size=32),
            window=WINDOW,
            device="cpu",
        ),
        ignore,
    )
    assert m.samples_per_s > 0 and reads["tuner"] == 0
    assert reads["own"] >= 4 * (1 + 1 + 6)  # start-up, warm-up and the timed batches


def test_a_stream_of_dict_batches_is_timed_with_the_user_s_loss() -> None:
    """An iterable Dataset with a dict collate and a loss of the user's own: read again and
    again by real workers (no epoch ends in the window), its samples counted batch by batch."""
    data = UserData.check(
        "userdata_example.ToneStream", {"count": 10}, "userdata_example.pad_dict_collate"
    )
    m = measure(
        TrialJob(
            pipeline=PipelineConfig(
                batch_size=4, num_workers=2, prefetch_factor=1, decoder="as_is"
            ),
            source=data,
            model=ModelConfig(_target_="userdata_example.SpecNet"),
            recipe=RecipeConfig(crop_size=32),
            window=WINDOW,
            device="cpu",
            step=StepConfig("userdata_example.smoothed_loss"),
            precision="bf16",
        ),
        ignore,
    )
    assert m.timed_batches == 3 * 2 and m.samples_per_s > 0
    assert m.epoch_start_s is None  # a stream makes no boundary of its own in the window


@pytest.mark.slow
def test_a_compiled_step_compiles_in_its_first_step_into_the_shared_cache(tmp_path) -> None:
    """compile=true: the model is compiled by the first step (timed apart, never inside the
    windows) and Inductor writes its code into the cache the trials share."""
    data = UserData.check(
        "userdata_example.Spectrograms",
        {"count": 16, "vary": False},
        "userdata_example.pad_collate",
    )
    cache = tmp_path / "compile-cache"
    m = measure(
        TrialJob(
            pipeline=PipelineConfig(batch_size=4, decoder="as_is"),
            source=data,
            model=ModelConfig(_target_="userdata_example.PooledNet"),
            recipe=RecipeConfig(crop_size=32),
            window=WINDOW,
            device="cpu",
            compile_cache=str(cache),
        ),
        ignore,
    )
    assert m.samples_per_s > 0 and m.first_step_s is not None and m.first_step_s > 0
    assert any(cache.rglob("*.py")) or any(cache.rglob("*.so"))  # compiled code, cached

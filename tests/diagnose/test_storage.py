"""Storage against CPU: the window that stays inside one pass, the rounds, and when a
comparison is not evidence."""

from __future__ import annotations

import pytest
from fake_diagnosis import measured
from helpers import make_session

from autotune.diagnose import page_cache
from autotune.diagnose.storage import STORAGE_ROUNDS, Storage, measure_storage, storage_window
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source, synthetic
from autotune.runtime.child import measure
from autotune.runtime.job import TrialJob
from autotune.schema import ModelConfig, RecipeConfig, WindowConfig
from autotune.session import Session


def test_io_bound_only_when_every_round_is_slower_from_storage() -> None:
    assert Storage().io_bound is None  # not compared
    slow = Storage(cold=(measured(60), measured(70)), warm=(measured(100), measured(100)))
    assert slow.io_bound is True
    assert slow.cold_samples_per_s == 65 and slow.warm_samples_per_s == 100
    noise = Storage(cold=(measured(60), measured(95)), warm=(measured(100), measured(100)))
    assert noise.io_bound is False  # one slow round is not evidence
    assert Storage(cold=(measured(90),), warm=(measured(100),)).io_bound is False  # within 15 %


def test_storage_window_is_fixed_and_inside_the_first_pass() -> None:
    window = WindowConfig(
        warmup_extra_batches=4, sub_windows=5, batches_per_window=4, min_sub_window_s=0.4
    )
    common = {"align": 1, "batch_size": 32}
    # a big dataset: sub-windows of 0.4 s at 800 samples/s, fixed (no rate-dependent length)
    big = storage_window(window, epoch_batches=10_000, buffered=0, rate=800, **common)
    fixed = {"batches_per_window": 10, "min_sub_window_s": 0.0, "target_spread": 0.0}
    fixed |= {"max_timed_s": 5 * 10 * 32 / 800}  # the timed batches at that rate: no pass fits
    assert big == WindowConfig(warmup_extra_batches=4, sub_windows=5, **fixed)  # no lengthening
    # a small one: shorter sub-windows, all inside one pass
    small = storage_window(window, epoch_batches=16, buffered=0, rate=250, **common)
    assert small is not None and small.min_sub_window_s == 0.0
    assert 1 + 4 + small.sub_windows * small.batches_per_window <= 16
    # workers fetch ahead and deliver whole rounds
    ahead = storage_window(window, epoch_batches=40, buffered=4, align=2, rate=250, batch_size=32)
    assert ahead is not None and ahead.batches_per_window % 2 == 0
    assert 1 + 4 + 4 + ahead.sub_windows * ahead.batches_per_window + 4 <= 40
    assert storage_window(window, epoch_batches=5, buffered=0, rate=250, **common) is None


@pytest.fixture(scope="module")
def source() -> Source:
    return synthetic(count=48, num_classes=3, size=(64, 48))


def test_a_real_storage_run_stays_inside_the_first_pass(source: Source) -> None:
    """The runtime rounds sub-windows up to whole passes (real epochs) where they fit its
    time cap; a storage run's must not be: its second pass reads what its first just cached."""
    pipeline = PipelineConfig(batch_size=4)  # 48 files: passes of 12 batches
    window = storage_window(
        WindowConfig(), epoch_batches=12, buffered=0, align=1, rate=1e4, batch_size=4
    )
    assert window is not None
    job = TrialJob(
        pipeline=pipeline,
        source=source,
        model=ModelConfig(name="none"),
        recipe=RecipeConfig(crop_size=32),
        window=window,
        device="cpu",
    )
    m = measure(job, lambda index, rate: None)
    assert not m.whole_passes and 1 + m.warmup_batches + m.timed_batches <= 12


def _alone(source: Source) -> Session:
    overrides = ["window=quick", "batch_size=4", "model.name=none"]
    return make_session(overrides, source=source)


def _evicts(source: Source) -> bool:
    """Whether this file system drops evicted pages (tmpfs keeps them)."""
    page_cache.evict(source.paths, flush=True)
    after = page_cache.resident_fraction(source.paths)
    page_cache.warm(source.paths)
    return after is not None and after <= 0.05


class _Recorder:
    """A stand-in for the child-process runs: each returns the next rate, or fails (None)."""

    def __init__(self, *rates: float | None) -> None:
        self.rates = list(rates)
        self.calls: list[tuple[str, Session, PipelineConfig]] = []

    def __call__(self, label: str, session: Session, pipeline: PipelineConfig):
        self.calls.append((label, session, pipeline))
        rate = self.rates.pop(0)
        return None if rate is None else measured(rate)


def test_storage_runs_interleaved_rounds_of_the_same_window(source: Source) -> None:
    if not _evicts(source):
        pytest.skip("this file system keeps evicted pages")
    alone, pipeline = _alone(source), PipelineConfig(batch_size=4)
    runs = _Recorder(100.0, 300.0, 110.0, 290.0)
    s = measure_storage(
        alone, pipeline, 1e4, runs, dataset_bytes=123, fits=True, paths=list(source.paths)
    )
    assert [m.samples_per_s for m in s.cold] == [100.0, 110.0]
    assert [m.samples_per_s for m in s.warm] == [300.0, 290.0]
    assert s.io_bound is True and s.fits_in_cache and s.dataset_bytes == 123
    assert s.cached_after_eviction == 0.0
    assert s.read_cold is not None and s.read_warm is not None
    labels = [label for label, _, _ in runs.calls]
    assert len(labels) == 2 * STORAGE_ROUNDS
    assert labels[0] == "the loader alone from storage (files evicted), round 1"
    assert labels[1] == "the loader alone from the page cache, round 1"
    # every run has the same fixed window, the loader alone's other settings, and the pipeline
    windows = [session.conf.window for _, session, _ in runs.calls]
    assert all(w == windows[0] for w in windows) and windows[0].min_sub_window_s == 0.0
    assert {session.conf.model.name for _, session, _ in runs.calls} == {"none"}
    assert all(p is pipeline for _, _, p in runs.calls)
    assert s.note.startswith("each run timed ")
    assert page_cache.resident_fraction(source.paths) == 1.0  # it fits: warmed again


def test_a_failed_run_ends_the_rounds(source: Source) -> None:
    if not _evicts(source):
        pytest.skip("this file system keeps evicted pages")
    runs = _Recorder(100.0, None)
    s = measure_storage(
        _alone(source),
        PipelineConfig(batch_size=4),
        1e4,
        runs,
        dataset_bytes=1,
        fits=False,
        paths=list(source.paths),
    )
    assert s.cold == s.warm == () and s.io_bound is None
    assert len(runs.calls) == 2


def test_too_few_files_for_a_window_are_not_run(source: Source) -> None:
    if not _evicts(source):
        pytest.skip("this file system keeps evicted pages")
    runs = _Recorder()
    big_batches = PipelineConfig(batch_size=16)  # 3 batches in a pass: no room after warm-up
    s = measure_storage(
        _alone(source),
        big_batches,
        1e4,
        runs,
        dataset_bytes=1,
        fits=True,
        paths=list(source.paths),
    )
    assert runs.calls == [] and s.cold == ()
    assert s.note.startswith("48 files are too few for a timed window inside one pass")

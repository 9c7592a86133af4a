"""GPU utilization sampling: the sampler's logic with an injected reader (there is no GPU
here), the absent figure without a GPU, and the figure a real trial reports."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from autotune import machine
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import synthetic
from autotune.runtime.gpu_monitor import UtilizationSampler, nvml_reader, open_sampler
from autotune.runtime.job import TrialJob
from autotune.runtime.trial import run_trial
from autotune.schema import ModelConfig, RecipeConfig, WindowConfig


class CountingReader:
    """Returns ``values`` in turn (then the last one again), noting when it was called."""

    def __init__(self, *values: float | None) -> None:
        self.values, self.calls = list(values), 0
        self.lock = threading.Lock()

    def __call__(self) -> float | None:
        with self.lock:
            value = self.values[min(self.calls, len(self.values) - 1)]
            self.calls += 1
            return value


def test_start_reads_at_once_and_stop_ends_the_reads() -> None:
    reader = CountingReader(40.0)
    sampler = UtilizationSampler(reader, interval_s=60.0)  # no periodic read in this test
    sampler.start()
    assert reader.calls == 1  # a span shorter than the interval still counts
    sampler.stop()
    assert sampler.samples == 1 and sampler.mean_pct == 40.0
    time.sleep(0.05)
    assert reader.calls == 1


def test_reads_about_ten_times_a_second_while_running() -> None:
    reader = CountingReader(50.0)
    sampler = UtilizationSampler(reader)  # 0.1 s
    started = time.monotonic()
    sampler.start()
    time.sleep(0.55)
    sampler.stop()
    ran_s, calls = time.monotonic() - started, reader.calls
    # 1 at start + one each 0.1 s it ran (0.55 s asked; a busy machine wakes this thread late,
    # and may delay the sampler's too, never add a read)
    assert 3 <= calls <= 1 + int(ran_s / 0.1)
    time.sleep(0.25)
    assert reader.calls == calls  # nothing after stop()
    assert sampler.mean_pct == 50.0


def test_mean_spans_every_started_span_and_skips_unreadable_values() -> None:
    reader = CountingReader(20.0, None, 80.0)
    sampler = UtilizationSampler(reader, interval_s=60.0)
    for _ in range(3):
        sampler.start()
        sampler.stop()
    assert reader.calls == 3
    assert sampler.samples == 2  # the None (an NVML error) is not a zero
    assert sampler.mean_pct == 50.0


def test_nothing_read_is_absent_not_zero() -> None:
    sampler = UtilizationSampler(CountingReader(None), interval_s=60.0)
    assert sampler.mean_pct is None
    sampler.start()
    sampler.stop()
    assert sampler.mean_pct is None


def test_bad_use_is_refused() -> None:
    with pytest.raises(ValueError, match="interval_s > 0"):
        UtilizationSampler(CountingReader(1.0), interval_s=0)
    sampler = UtilizationSampler(CountingReader(1.0), interval_s=60.0)
    sampler.start()
    with pytest.raises(RuntimeError, match="already running"):
        sampler.start()
    sampler.stop()
    sampler.stop()  # a second stop is harmless


def test_no_sampler_for_a_cpu_device() -> None:
    with nvml_reader(torch.device("cpu")) as read:
        assert read is None
    with open_sampler(torch.device("cpu")) as sampler:
        assert sampler is None


@pytest.mark.skipif(machine.detect_gpu() is not None, reason="a GPU is visible through NVML")
def test_no_sampler_without_a_gpu() -> None:
    with open_sampler(torch.device("cuda")) as sampler:
        assert sampler is None


@pytest.mark.gpu
@pytest.mark.skipif(machine.detect_gpu() is None, reason="needs a GPU visible through NVML")
def test_nvml_reads_a_percentage() -> None:
    with nvml_reader(torch.device("cuda")) as read:
        assert read is not None
        value = read()
        assert value is not None and 0.0 <= value <= 100.0


@pytest.mark.slow
def test_a_trial_without_a_gpu_reports_no_utilization() -> None:
    job = TrialJob(
        pipeline=PipelineConfig(batch_size=4),
        source=synthetic(count=12, num_classes=2),
        model=ModelConfig(name="tiny"),
        recipe=RecipeConfig(crop_size=32),
        window=WindowConfig(
            warmup_extra_batches=1,
            sub_windows=2,
            batches_per_window=1,
            min_sub_window_s=0.0,
            target_spread=0.0,
        ),
        device="cpu",
    )
    outcome = run_trial(job, timeout_s=120)
    assert outcome.status == "ok", outcome.failure
    assert outcome.measurement is not None
    assert outcome.measurement.gpu_utilization_pct is None

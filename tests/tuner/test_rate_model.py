"""The rate model, pinned on a study recorded on this project's 2-core machine (256 synthetic
ImageNet-sized JPEGs, the tiny model, batch 32, the quick window): its reference points, and
its 11 measured trials in the order they ran."""

from __future__ import annotations

import statistics

import pytest

from autotune.pipeline.config import PipelineConfig
from autotune.tuner.rate_model import ModelError, RateModel

CEILING = 1260.6  # samples/s: the step with its batch in memory
CPU_WORK_BOUND = {  # samples/s on 2 CPUs: 2 / CPU s per sample of each decoder's stages
    "as_is": 462.4,
    "pil": 743.0,
    "pil_reduced": 740.0,
    "opencv": 811.5,
    "torchvision": 974.8,
}
# (num_workers, decoder, main_threads) -> the measured steady samples/s, in the order run
TRIALS = [
    ((0, "as_is", 2), 218.6),
    ((1, "pil_reduced", 2), 232.9),
    ((1, "pil_reduced", 2), 238.7),  # pf8, persistent
    ((1, "as_is", 2), 143.9),
    ((2, "pil", 2), 259.8),
    ((1, "pil_reduced", 1), 308.3),
    ((0, "as_is", 1), 182.1),
    ((2, "pil_reduced", 1), 281.3),
    ((1, "pil_reduced", 1), 306.0),  # out of order
    ((1, "opencv", 1), 298.0),
    ((1, "torchvision", 1), 326.6),
]


def _model() -> RateModel:
    model = RateModel.of(CEILING, CPU_WORK_BOUND, cpus=2, batch_size=32, device="cpu")
    assert model is not None
    return model


def _config(workers: int, decoder: str, threads: int) -> PipelineConfig:
    return PipelineConfig(
        num_workers=workers,
        prefetch_factor=2 if workers else None,
        decoder=decoder,
        main_threads=threads,
        batch_size=32,
    )


@pytest.mark.parametrize(
    ("point", "bound", "binds"),
    [
        ((0, "as_is", 1), 195.4, "main process"),  # 1 / (4.3 ms read + 0.8 ms step)
        ((1, "pil_reduced", 1), 370.0, "workers"),  # one worker: 1 / 2.7 ms
        ((2, "pil", 1), 573.9, "CPUs"),  # 2 CPUs / (2.7 ms + 0.8 ms x 1 thread)
        ((2, "pil", 2), 467.5, "CPUs"),  # the step's 2 threads take more of the CPUs
        ((8, "torchvision", 1), 703.0, "CPUs"),  # 8 workers could make 3899
    ],
)
def test_each_point_is_bound_by_the_least_of_its_parts(point, bound: float, binds: str) -> None:
    predicted = _model().predict(_config(*point))
    assert predicted is not None
    assert (predicted.bound, predicted.binds) == (pytest.approx(bound, abs=0.2), binds)
    assert predicted.samples_per_s == predicted.bound  # no earlier trial to scale it


def test_no_prediction_where_there_is_no_profile() -> None:
    model = _model()
    copy = PipelineConfig(num_workers=1, prefetch_factor=2, decoder="pil", cache="decoded")
    assert model.predict(copy) is None  # a prepared copy: not the profiled stages
    assert model.predict(_config(1, "nvjpeg", 1)) is None  # decoded on the device
    assert model.predict(PipelineConfig(num_workers=1, prefetch_factor=2, batch_size=64)) is None
    assert RateModel.of(None, CPU_WORK_BOUND, cpus=2, batch_size=32, device="cpu") is None
    assert (
        RateModel.of(CEILING, CPU_WORK_BOUND, cpus=2, batch_size=32, device="cpu", ranks=2) is None
    )


def test_scaled_by_earlier_trials_its_error_on_the_recorded_study_is_a_quarter_of_the_bounds():
    """Each trial predicted from the trials before it only, as a study does: the bounds
    alone miss by about half at the median; scaled, by about an eighth."""
    model, earlier = _model(), []
    bounds, predictions = [], []
    for point, measured in TRIALS:
        predicted = model.predict(_config(*point), earlier)
        assert predicted is not None
        bounds.append((predicted.bound, measured))
        predictions.append((predicted.samples_per_s, measured))
        earlier.append((predicted.binds, predicted.bound, measured))
    unscaled, scaled = ModelError.of(bounds), ModelError.of(predictions)
    assert unscaled is not None and scaled is not None
    assert (unscaled.median, unscaled.trials) == (pytest.approx(0.49, abs=0.01), 11)
    assert scaled.median == pytest.approx(0.13, abs=0.01)
    assert scaled.worst < unscaled.worst
    # the worker-bound trials at one thread, scaled by the first worker-bound trials (at two)
    assert statistics.median(abs(p / m - 1) for p, m in predictions[5:]) < 0.2


def test_the_error_is_said_in_one_line() -> None:
    error = ModelError.of([(110.0, 100.0), (90.0, 100.0), (150.0, 100.0)])
    assert error == ModelError(median=0.1, worst=0.5, trials=3)
    assert error.text() == (
        "rate model: off by 10% at the median, 50% at worst, over 3 measured trial(s)"
    )
    assert ModelError.of([]) is None

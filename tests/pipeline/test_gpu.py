"""The CUDA paths on a real GPU: ``pytest -m gpu`` (skipped where CUDA is not usable).

nvJPEG batch decode, kornia/torch augmentation on CUDA, uint8 transfer, pinned non-blocking
copies, the side-stream prefetcher and channels_last, each against the CPU path, plus one
real trial on the device. Sized to run in well under 5 minutes.
"""

from __future__ import annotations

import pytest
import torch
from helpers import make_session

from autotune.pipeline import decoders, loader, recipes, sources
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source
from autotune.runtime.trial import run_trial

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


@pytest.fixture(scope="module")
def small_set(tmp_path_factory: pytest.TempPathFactory) -> Source:
    return sources.synthetic(count=32, num_classes=2, cache_dir=tmp_path_factory.mktemp("c"))


def _first(source: Source, config: PipelineConfig, recipe: recipes.Recipe, device: torch.device):
    tuned = loader.build(
        source, config, recipe=recipe, device=device, seed=0, sampler=range(len(source))
    )
    return next(iter(tuned))


def test_nvjpeg_decodes_like_pillow(small_set: Source) -> None:
    assert decoders.NvjpegDecoder.unavailable_reason() is None
    data = [torch.frombuffer(bytearray(small_set.read(i)), dtype=torch.uint8) for i in range(8)]
    on_gpu = decoders.NvjpegDecoder.decode_batch(data, CUDA)
    for i, image in enumerate(on_gpu):
        assert image.device.type == "cuda" and image.dtype == torch.uint8
        reference = decoders.get("pil").decode(small_set.read(i))
        assert image.shape == reference.shape
        # nvJPEG's IDCT and upsampling differ from libjpeg-turbo's by a level or two
        assert (image.cpu().float() - reference.float()).abs().mean() < 2.0


@pytest.mark.parametrize(
    "config",
    [
        PipelineConfig(batch_size=8, num_workers=2, pin_memory=True),
        PipelineConfig(batch_size=8, num_workers=2, transfer="float"),
        PipelineConfig(batch_size=8, num_workers=2, augment_on="gpu", pin_memory=True),
        PipelineConfig(batch_size=8, num_workers=2, decoder="nvjpeg"),
        PipelineConfig(batch_size=8, num_workers=2, device_prefetch=True, pin_memory=True),
        PipelineConfig(batch_size=8, num_workers=2, channels_last=True),
    ],
    ids=lambda c: c.short(),
)
def test_eval_batches_on_cuda_match_the_cpu_path(
    small_set: Source, config: PipelineConfig
) -> None:
    recipe = recipes.CenterCropEval(crop_size=64)
    images, labels = _first(small_set, config, recipe, CUDA)
    expected, expected_labels = _first(small_set, PipelineConfig(batch_size=8), recipe, "cpu")
    assert images.device.type == labels.device.type == "cuda"
    assert images.shape == expected.shape and images.dtype == torch.float32
    assert torch.equal(labels.cpu(), expected_labels)
    std = torch.tensor(recipe.std).view(1, 3, 1, 1) * 255
    diff = ((images.cpu() - expected) * std).abs()
    tolerance = 3.0 if config.decoder == "nvjpeg" else 1.0  # in 0-255 levels
    assert diff.mean() < tolerance, diff.mean()


def test_pinned_batches_are_pinned(small_set: Source) -> None:
    config = PipelineConfig(batch_size=8, num_workers=1, pin_memory=True)
    tuned = loader.build(
        small_set, config, recipe=recipes.CenterCropEval(crop_size=32), device=CUDA
    )
    images, _ = next(iter(tuned.dataloader))
    assert images.is_pinned() and images.dtype == torch.uint8  # uint8 crosses the bus
    assert tuned.stage.non_blocking


def test_prefetcher_yields_every_batch_in_order(small_set: Source) -> None:
    """Pinned, non-blocking copies on the side stream while the current stream is kept busy:
    a missing wait_stream or record_stream shows as a batch that differs from the plain path."""
    recipe = recipes.CenterCropEval(crop_size=32)
    plain = PipelineConfig(batch_size=4, num_workers=1, pin_memory=True)
    ahead = PipelineConfig(batch_size=4, num_workers=1, pin_memory=True, device_prefetch=True)
    expected = list(loader.build(small_set, plain, recipe=recipe, device=CUDA, sampler=range(32)))
    tuned = loader.build(small_set, ahead, recipe=recipe, device=CUDA, sampler=range(32))
    assert tuned.prefetches
    busy = torch.randn(2048, 2048, device=CUDA)
    seen = 0
    for (x, y), (x2, y2) in zip(expected, tuned, strict=True):
        for _ in range(20):  # a long queue of work on the current stream, as a step would be
            busy = busy @ busy / 2048
        # read the batch on the current stream before advancing: it must be complete
        assert torch.equal(x, x2) and torch.equal(y, y2)
        seen += 1
    assert seen == 8


def test_nvjpeg_with_the_prefetcher(small_set: Source) -> None:
    recipe = recipes.CenterCropEval(crop_size=64)
    config = PipelineConfig(batch_size=8, num_workers=2, decoder="nvjpeg", device_prefetch=True)
    tuned = loader.build(small_set, config, recipe=recipe, device=CUDA, sampler=range(32))
    reference = loader.build(
        small_set, PipelineConfig(batch_size=8), recipe=recipe, sampler=range(32)
    )
    std = torch.tensor(recipe.std).view(1, 3, 1, 1) * 255
    for (images, labels), (expected, expected_labels) in zip(tuned, reference, strict=True):
        assert torch.equal(labels.cpu(), expected_labels)
        assert ((images.cpu() - expected) * std).abs().mean() < 3.0


def test_a_trial_on_the_device(small_set: Source) -> None:
    session = make_session(
        ["window=quick", "recipe.crop_size=64", "batch_size=8"], source=small_set, device="cuda"
    )
    config = PipelineConfig(
        batch_size=8, num_workers=2, decoder="nvjpeg", device_prefetch=True, channels_last=True
    )
    outcome = run_trial(session.job(config), timeout_s=120)
    assert outcome.failure is None, outcome.failure
    assert outcome.measurement is not None and outcome.measurement.samples_per_s > 0
    assert outcome.measurement.gpu_peak_memory_bytes


def test_dali_on_the_gpu_matches_its_cpu_backend(small_set: Source) -> None:
    pytest.importorskip("nvidia.dali")
    recipe = recipes.CenterCropEval(crop_size=64)
    config = PipelineConfig(batch_size=8, decoder="dali", dali_num_threads=2)
    on_gpu, labels = _first(small_set, config, recipe, CUDA)
    on_cpu, cpu_labels = _first(small_set, config, recipe, torch.device("cpu"))
    assert on_gpu.device.type == "cuda" and torch.equal(labels.cpu(), cpu_labels)
    std = torch.tensor(recipe.std).view(1, 3, 1, 1) * 255
    assert ((on_gpu.cpu() - on_cpu) * std).abs().mean() < 3.0  # nvJPEG vs libjpeg-turbo

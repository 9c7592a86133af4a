"""The in-process paths ``python -m autotune.selfcheck`` checks, one small function each.

Each check runs the project's own code at a small size (``loader.build``, ``TrainStep``) on
the study's synthetic JPEGs and raises when the path does not work; it returns a few words on
what it saw. Decoders and recipes are taken from their traits (``on_device``,
``replaces_loader``, ``can_reduce``, ``deterministic``), never by name.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from autotune.app.composition import compose, to_config
from autotune.pipeline import decoders, loader, recipes
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source
from autotune.runtime.workload import TrainStep, build_model
from autotune.schema import AutotuneConfig
from autotune.session.data import load_source

# a real study in a minute (the tests' too), 2 sub-windows a trial: paths checked, not figures
QUICK = [
    "search_space=quick",
    "window=quick",
    "window.sub_windows=2",
    "dataset.count=48",
    "dataset.num_classes=3",
    "recipe.crop_size=64",
    "batch_size=8",
    "study.n_trials=4",
    "study.n_startup_trials=2",
    "study.confirm_top_k=1",
    "study.confirm_rounds=1",
    "study.worth_budget=0",
]
# each device's workload: QUICK's, then these; on CUDA the default space, for its CUDA knobs
ON_DEVICE = {
    "cpu": ["device=cpu", "model=tiny"],
    "cuda": ["search_space=default", "device=cuda", "model=resnet50", "precision=bf16"],
}
BATCH = 8
# mean differences in 0-255 levels: the same pixels on another device, another libjpeg-turbo
# build, a DCT-reduced decode (3.3 measured at crop 64), nvJPEG or DALI against libjpeg-turbo
SAME_LEVELS, DECODE_LEVELS, REDUCED_LEVELS, DEVICE_DECODE_LEVELS = 1.0, 1.0, 6.0, 3.0
AUTOCAST = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
Batch = tuple[torch.Tensor, torch.Tensor]  # (images, labels)


@dataclass
class Bench:
    """What the checks share: a temporary folder, the stop event and the trial runner bound
    to it, each device's composed config and the images, each made once."""

    folder: Path
    stop: threading.Event
    run_one: Callable[..., object]  # run_trial, stopped with ``stop``
    studied: set[str] = field(default_factory=set)  # devices whose study finished
    _confs: dict[str, AutotuneConfig] = field(default_factory=dict)

    def overrides(self, device: str) -> list[str]:
        """The device's study as ``python -m autotune`` overrides, its studies kept here."""
        return [*QUICK, *ON_DEVICE[device], f"studies_dir={self.folder / device}"]

    def conf(self, device: str) -> AutotuneConfig:
        """The config the CLI composes of ``overrides(device)``, composed as it does (in the
        temporary folder, where the CLI runs: a ``./conf`` of the caller's is not read)."""
        if device not in self._confs:
            with _inside(self.folder):
                self._confs[device] = to_config(compose(self.overrides(device)))
        return self._confs[device]

    @functools.cached_property
    def source(self) -> Source:
        """The study's synthetic JPEGs (generated once and cached, as the CLI does)."""
        return load_source(self.conf("cpu").dataset)[0]


@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    """``folder`` as the working directory (``contextlib.chdir`` needs Python 3.11)."""
    here = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(here)


class NotRun(Exception):
    """A check that cannot run for want of an earlier one (a verify without its study)."""


@dataclass(frozen=True)
class Check:
    name: str  # the path, its device first: "cpu ...", "cuda ..."
    run: Callable[[Bench], str]  # what it saw, in a few words; raises when the path fails
    skip_reason: Callable[[], str | None] = lambda: None  # why it cannot run here, or None


def no_cuda() -> str | None:
    return None if torch.cuda.is_available() else "no CUDA device"


def fewer_than_two_gpus() -> str | None:
    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return None if found >= 2 else f"needs 2 GPUs, found {found}"


# --- the pipeline: decoders, augmentation, what crosses to the device -----------------------


def _loader(
    bench: Bench, config: PipelineConfig, recipe: recipes.Recipe, device: str
) -> loader.TunedLoader:
    """``loader.build`` over the set, in the set's order."""
    order = range(len(bench.source))
    return loader.build(bench.source, config, recipe=recipe, device=device, sampler=order)


def _first(bench: Bench, config: PipelineConfig, recipe: recipes.Recipe, device: str) -> Batch:
    return next(iter(_loader(bench, config, recipe, device)))


def _eval_recipe(bench: Bench) -> recipes.Recipe:
    """A deterministic recipe at the study's crop size: its outputs compare pixel by pixel."""
    cls = next(c for c in recipes.RECIPES.values() if c.deterministic)
    return cls(crop_size=bench.conf("cpu").recipe.crop_size)


def _levels_from_cpu(
    bench: Bench, recipe: recipes.Recipe, got: Batch, reference: PipelineConfig
) -> float:
    """How far batch ``got`` is from ``reference``'s first batch on the CPU, in mean 0-255
    levels, once its shape, type and labels are checked."""
    expected, expected_labels = _first(bench, reference, recipe, "cpu")
    images, labels = got
    assert images.shape == expected.shape, f"shape {tuple(images.shape)}, not {expected.shape}"
    assert images.dtype == torch.float32, f"{images.dtype} batches"
    assert torch.equal(labels.cpu(), expected_labels), "labels differ from the CPU path's"
    std = torch.tensor(recipe.std).view(1, 3, 1, 1) * 255
    return ((images.cpu() - expected) * std).abs().mean().item()


def _within(levels: float, limit: float, against: str) -> str:
    assert levels < limit, f"{levels:.2f} levels from {against} (limit {limit})"
    return f"{levels:.2f} levels from {against}"


def cpu_decoder(cls: type[decoders.Decoder]) -> Callable[[Bench], str]:
    """A batch's files decoded whole against the default decoder, then that batch of the eval
    recipe through ``loader.build`` (reduced where the decoder can) against the default's."""

    def run(bench: Bench) -> str:
        decoder, reference = decoders.get(cls.name), decoders.get(PipelineConfig().decoder)
        for i in range(BATCH):
            data = bench.source.read(i)
            image, expected = decoder.decode(data), reference.decode(data)
            assert image.shape == expected.shape, f"file {i}: shape {tuple(image.shape)}"
            levels = (image.float() - expected.float()).abs().mean().item()
            assert levels < DECODE_LEVELS, f"file {i}: {levels:.2f} levels from {reference.name}"
        recipe, config = _eval_recipe(bench), PipelineConfig(batch_size=BATCH, decoder=cls.name)
        got = _first(bench, config, recipe, "cpu")
        levels = _levels_from_cpu(bench, recipe, got, PipelineConfig(batch_size=BATCH))
        limit = REDUCED_LEVELS if cls.can_reduce else DECODE_LEVELS
        return f"{BATCH} JPEGs whole and their batch: " + _within(levels, limit, reference.name)

    return run


def device_decoder(cls: type[decoders.Decoder]) -> Callable[[Bench], str]:
    """A batch decoded on CUDA against the CPU: a loader of its own (DALI) against the same
    graph on its CPU backend, a batch decoder (nvJPEG) against the default CPU path."""

    def run(bench: Bench) -> str:
        recipe = _eval_recipe(bench)
        config = PipelineConfig(batch_size=BATCH, num_workers=2, decoder=cls.name)
        got = _first(bench, config, recipe, "cuda")
        assert got[0].device.type == "cuda", f"batches on {got[0].device}"
        reference = config if cls.replaces_loader else PipelineConfig(batch_size=BATCH)
        levels = _levels_from_cpu(bench, recipe, got, reference)
        against = "its CPU backend" if cls.replaces_loader else "the CPU path"
        return _within(levels, DEVICE_DECODE_LEVELS, against)

    return run


def augment(cls: type[recipes.Recipe], device: str) -> Callable[[Bench], str]:
    """The recipe's device form (``augment_on=gpu``) on ``device`` against its worker form on
    the CPU: the same pixels for a deterministic recipe; same shapes and labels otherwise."""

    def run(bench: Bench) -> str:
        recipe = cls.from_config(bench.conf("cpu").recipe)
        on_device = PipelineConfig(batch_size=BATCH, num_workers=2, augment_on="gpu")
        got = _first(bench, on_device, recipe, device)
        assert got[0].device.type == device, f"batches on {got[0].device}"
        workers = PipelineConfig(batch_size=BATCH, num_workers=2, prefetch_factor=2)
        levels = _levels_from_cpu(bench, recipe, got, workers)
        if not recipe.deterministic:
            assert torch.isfinite(got[0]).all(), "non-finite values"
            return "device and worker forms: same shapes and labels (random crops)"
        return "device form " + _within(levels, SAME_LEVELS, "the worker form")

    return run


def _cuda_like_cpu(bench: Bench, config: PipelineConfig) -> tuple[loader.TunedLoader, str]:
    """``config``'s loader on CUDA, once its first batch is checked against the CPU path."""
    recipe = _eval_recipe(bench)
    tuned = _loader(bench, config, recipe, "cuda")
    levels = _levels_from_cpu(bench, recipe, next(iter(tuned)), PipelineConfig(batch_size=BATCH))
    return tuned, _within(levels, SAME_LEVELS, "the CPU path")


def uint8_transfer(bench: Bench) -> str:
    config = PipelineConfig(batch_size=BATCH, num_workers=2, transfer="uint8")
    tuned, seen = _cuda_like_cpu(bench, config)
    host, _ = next(iter(tuned.dataloader))
    assert host.dtype == torch.uint8, f"{host.dtype} crossed the bus"
    return f"uint8 crossed; {seen}"


def pin_memory(bench: Bench) -> str:
    config = PipelineConfig(batch_size=BATCH, num_workers=2, pin_memory=True)
    tuned, seen = _cuda_like_cpu(bench, config)
    host, _ = next(iter(tuned.dataloader))
    assert host.is_pinned() and tuned.stage.non_blocking, "batches not pinned, or blocking"
    return f"pinned, copied non-blocking; {seen}"


def device_prefetcher(bench: Bench) -> str:
    """Batches copied on the side stream while the current one is kept busy must be the
    plain path's: a missing wait_stream or record_stream shows as a difference."""
    recipe = _eval_recipe(bench)
    plain = PipelineConfig(batch_size=4, num_workers=1, pin_memory=True)
    expected = list(_loader(bench, plain, recipe, "cuda"))
    tuned = _loader(bench, replace(plain, device_prefetch=True), recipe, "cuda")
    assert tuned.prefetches, "device_prefetch=True, but the loader does not prefetch"
    busy = torch.randn(2048, 2048, device="cuda")
    for (x, y), (x2, y2) in zip(expected, tuned, strict=True):
        for _ in range(20):  # a queue of work on the current stream, as a step would be
            busy = busy @ busy / 2048
        assert torch.equal(x, x2) and torch.equal(y, y2), "a prefetched batch differs"
    return f"{len(expected)} batches equal to the plain path's"


# --- the training step ----------------------------------------------------------------------


def train_step(device: str, precision: str, channels_last: bool) -> Callable[[Bench], str]:
    """``TrainStep`` on a real batch of the device's workload: the autocast type the first
    conv ran in, NHWC batch and weights, parameters that moved and stayed finite, and under
    fp16 on CUDA its GradScaler."""

    def run(bench: Bench) -> str:
        conf = bench.conf(device)
        config = PipelineConfig(batch_size=BATCH, channels_last=channels_last)
        batch = _first(bench, config, recipes.from_config(conf.recipe), device)
        model = build_model(conf.model, num_classes=len(bench.source.classes))
        step = TrainStep(
            model, torch.device(device), lr=conf.model.lr, channels_last=channels_last,
            precision=precision,
        )  # fmt: skip
        conv = next(m for m in step.module.modules() if isinstance(m, nn.Conv2d))
        seen: list[torch.dtype] = []
        conv.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
        steps = _steps_until_moved(step, batch)
        assert seen[0] == AUTOCAST[precision], f"the first conv ran in {seen[0]}"
        assert all(p.isfinite().all() for p in step.module.parameters()), "non-finite weights"
        if channels_last:
            nhwc = torch.channels_last
            assert batch[0].is_contiguous(memory_format=nhwc), "the batch is not NHWC"
            assert conv.weight.is_contiguous(memory_format=nhwc), "the weights are not NHWC"
        if precision == "fp16" and device == "cuda":
            assert step.scaler is not None, "fp16 on CUDA without a GradScaler"
        scaler = f", GradScaler at {step.scaler.get_scale():g}" if step.scaler else ""
        return f"{conf.model.name}: {seen[0]} convs, moved after {steps} step(s){scaler}"

    return run


def _steps_until_moved(step: TrainStep, batch: Batch, most: int = 10) -> int:
    """Steps on ``batch`` until a parameter moved (a GradScaler skips the steps whose
    gradients overflow while it lowers its scale)."""
    before = [p.detach().clone() for p in step.module.parameters()]
    for steps in range(1, most + 1):
        step(batch)
        after = step.module.parameters()
        if any(not torch.equal(a, b) for a, b in zip(before, after, strict=True)):
            step.sync()
            return steps
    raise AssertionError(f"the parameters did not move in {most} steps")

"""Tests for autotune.pipeline.knob_table: every PipelineConfig field is a knob with traits,
and the lists the other layers use are read from them, tied to what torch and the search
spaces really accept."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from torch.utils.data import DataLoader

from autotune.errors import UsageError
from autotune.pipeline.config import (
    AS_IS_FIXED,
    INACTIVE,
    KNOBS,
    LOADER_KEYS,
    NEED_WORKERS,
    PIPELINE_KEYS,
    SWITCHABLE,
    PipelineConfig,
)
from autotune.pipeline.knob_table import NO_DEFAULT, TUNED, Layer, knob, table
from autotune.tuner.variants import PYTORCH_DEFAULTS

SPACES = Path(__file__).resolve().parents[2] / "conf" / "search_space"


def test_every_field_of_the_config_is_in_the_table_and_a_field_without_traits_is_refused() -> None:
    assert list(KNOBS) == [f.name for f in dataclasses.fields(PipelineConfig)]

    @dataclass(frozen=True)
    class Half:
        declared: int = knob(1, Layer.LOADER)
        forgotten: int = 2

    with pytest.raises(TypeError, match="Half.forgotten has no knob traits"):
        table(Half)


def test_the_loader_layer_is_exactly_what_the_dataloader_accepts() -> None:
    accepted = set(inspect.signature(DataLoader).parameters)
    assert set(LOADER_KEYS) <= accepted
    assert not set(PIPELINE_KEYS) & accepted  # a pipeline choice is not handed to torch
    assert set(LOADER_KEYS) | set(PIPELINE_KEYS) == set(KNOBS)


def test_a_worker_knob_set_without_workers_is_refused_and_inactive_is_accepted() -> None:
    assert NEED_WORKERS  # prefetch_factor, persistent_workers, ...
    for name in NEED_WORKERS:
        assert PipelineConfig(num_workers=0, **{name: INACTIVE[name]}).num_workers == 0
        active = next(v for v in (2, True, False) if v != INACTIVE[name])
        with pytest.raises(UsageError, match="need num_workers > 0"):
            PipelineConfig(num_workers=0, **{name: active})


def test_the_pipeline_as_it_is_holds_what_the_table_says_and_tunes_the_rest() -> None:
    config = PipelineConfig(decoder="as_is", channels_last=True, cache="decoded", num_workers=3)
    for name, value in AS_IS_FIXED.items():
        assert getattr(config, name) == value
    tuned = [n for n, t in KNOBS.items() if t.as_is is TUNED]
    assert "num_workers" in tuned and config.num_workers == 3


def test_every_knob_the_search_may_choose_is_in_the_default_space_and_only_those() -> None:
    default = yaml.safe_load((SPACES / "default.yaml").read_text())["knobs"]
    assert set(default) == set(INACTIVE)  # the knobs a search space may name
    for path in SPACES.glob("*.yaml"):
        named = yaml.safe_load(path.read_text())["knobs"]
        assert set(named) <= set(INACTIVE), path.name


def test_the_worth_table_puts_every_knob_with_a_pytorch_default_back_to_it() -> None:
    with_default = {n for n, t in KNOBS.items() if t.torch_default is not NO_DEFAULT}
    assert set(PYTORCH_DEFAULTS) == with_default
    ranks = [KNOBS[n].worth_rank for n in PYTORCH_DEFAULTS]
    assert ranks == sorted(ranks)  # in the table's order of worth


@pytest.mark.parametrize("name", [n for n, t in KNOBS.items() if t.label is not None])
def test_a_labelled_knob_shows_in_the_progress_line_when_it_changes(name: str) -> None:
    own_loader = KNOBS[name].own_loader_default is not None  # DALI's settings: with DALI
    base = PipelineConfig(num_workers=2, decoder="dali" if own_loader else "pil", main_threads=1)
    current = getattr(base, name)
    values = (3, 4, True, "gpu", "float", "resized", "decoded", "opencv", "dali")
    for value in [not current] if isinstance(current, bool) else values:
        try:
            changed = dataclasses.replace(base, **{name: value})
        except (UsageError, TypeError):
            continue
        if getattr(changed, name) != getattr(base, name):
            assert changed.short() != base.short(), (name, value)
            return
    pytest.fail(f"no value of {name} changed a config's progress line")


def test_an_unknown_decoder_is_refused_by_the_config() -> None:
    with pytest.raises(UsageError, match="decoder must be one of .*got 'nope'"):
        PipelineConfig(decoder="nope")


def test_a_config_without_workers_puts_every_worker_knob_back() -> None:
    config = PipelineConfig(
        num_workers=2, prefetch_factor=4, persistent_workers=True, in_order=False, main_threads=2
    )
    serial = config.without_workers(main_threads=1)
    assert (serial.num_workers, serial.main_threads) == (0, 1)
    assert all(getattr(serial, name) == KNOBS[name].inactive for name in NEED_WORKERS)


def test_what_a_training_run_may_switch_leaves_its_batches_as_they_are() -> None:
    assert SWITCHABLE == (
        "num_workers",
        "prefetch_factor",
        "persistent_workers",
        "pin_memory",
        "main_threads",
    )

"""Tests for autotune.pipeline.config: PipelineConfig's validation, its round trip through
a dict (best.yaml's sections), its DataLoader arguments and its short label."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import yaml
from torch.utils.data import DataLoader, TensorDataset

from autotune.errors import UsageError
from autotune.pipeline.config import PipelineConfig


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_workers": 0, "prefetch_factor": 2},
        {"num_workers": 0, "persistent_workers": True},
        {"num_workers": -1},
        {"batch_size": 0},
        {"num_workers": 2, "prefetch_factor": 0},
        {"main_threads": 0},
    ],
)
def test_config_validation(kwargs: dict) -> None:
    with pytest.raises(UsageError):
        PipelineConfig(**kwargs)


CONFIGS = [
    PipelineConfig(),
    PipelineConfig(batch_size=64, num_workers=2, prefetch_factor=3, persistent_workers=True),
    PipelineConfig(
        num_workers=2,
        prefetch_factor=2,
        pin_memory=True,
        decoder="pil_reduced",
        main_threads=1,
        drop_last=False,
    ),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.short())
def test_config_round_trip(cfg: PipelineConfig) -> None:
    data = cfg.to_dict()
    assert set(data) == {"loader", "pipeline"}
    assert PipelineConfig.from_dict(data) == cfg
    assert PipelineConfig.from_dict(yaml.safe_load(yaml.safe_dump(data))) == cfg  # best.yaml
    assert PipelineConfig.from_dict(dataclasses.asdict(cfg)) == cfg  # a flat dict too


def test_config_from_dict_refuses_unknown_settings() -> None:
    with pytest.raises(UsageError, match="num_wrokers"):
        PipelineConfig.from_dict({"loader": {"num_wrokers": 2}})
    with pytest.raises(UsageError, match="turbo"):
        PipelineConfig.from_dict({"turbo": True})


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.short())
def test_loader_kwargs_go_straight_into_a_dataloader(cfg: PipelineConfig) -> None:
    dataset = TensorDataset(torch.arange(200.0), torch.arange(200))
    dl = DataLoader(dataset, **cfg.loader_kwargs())
    assert dl.batch_size == cfg.batch_size and dl.num_workers == cfg.num_workers
    if cfg.num_workers:
        assert dl.prefetch_factor == cfg.prefetch_factor
    else:
        images, _ = next(iter(dl))
        assert len(images) == cfg.batch_size


def test_buffered_batches() -> None:
    assert PipelineConfig().buffered_batches == 0
    assert PipelineConfig(num_workers=3, prefetch_factor=4).buffered_batches == 12
    assert PipelineConfig(num_workers=3).buffered_batches == 6  # DataLoader's default of 2


def test_short() -> None:
    assert PipelineConfig().short() == "w0 pil t-default bs32"
    cfg = PipelineConfig(
        batch_size=64,
        num_workers=4,
        prefetch_factor=2,
        persistent_workers=True,
        pin_memory=True,
        decoder="pil_reduced",
        main_threads=1,
    )
    assert cfg.short() == "w4 pf2 persist pin pil_reduced t1 bs64"


def test_short_with_default_prefetch() -> None:
    assert "None" not in PipelineConfig(num_workers=2).short()

"""Fixtures the pipeline tests share: small synthetic sets, generated once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.pipeline import sources
from autotune.pipeline.sources import Source


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pipeline-cache")


@pytest.fixture(scope="session")
def small_set(cache: Path) -> Source:
    """16 ImageNet-sized JPEGs in 2 classes."""
    return sources.synthetic(count=16, num_classes=2, cache_dir=cache)


@pytest.fixture(scope="session")
def hd_set(cache: Path) -> Source:
    """2 JPEGs at 1920x1080."""
    return sources.synthetic(count=2, num_classes=1, size=(1920, 1080), cache_dir=cache)

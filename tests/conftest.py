"""Shared fixtures: one real quick study, run through the real CLI, reused by several tests;
and a real PostgreSQL server, started for the session, with a fresh database per test."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import postgres
import pytest
import torch
from helpers import QUICK, run_cli


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``@pytest.mark.gpu`` tests run only where CUDA is usable (``pytest -m gpu`` there)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: run `pytest -m gpu` on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Synthetic datasets go to a per-session cache, not the user's ~/.cache."""
    os.environ["AUTOTUNE_CACHE"] = str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def quick_study(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A finished quick study: (working directory, completed CLI process)."""
    cwd = tmp_path_factory.mktemp("quick_study")
    result = run_cli(QUICK, cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return cwd, result


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.Server]:
    """A real PostgreSQL server on loopback, for this test session."""
    server = postgres.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: postgres.Server) -> str:
    """A fresh database on the session's PostgreSQL server: its SQLAlchemy URL."""
    return postgres_server.new_database()

"""Shared fixtures: one real quick study, run through the real CLI, reused by several tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import machine
from autotune.pipeline.sources import Source
from autotune.session import SearchSpace, Session

TESTS = Path(__file__).parent
# Small but real: JPEGs on disk, DataLoader workers, SQLite storage, forked trials.
QUICK = [
    "search_space=quick",
    "window=quick",
    "dataset.count=48",
    "dataset.num_classes=3",
    "recipe.crop_size=64",
    "batch_size=8",
    "study.n_trials=4",
    "study.n_startup_trials=2",
    "study.confirm_top_k=1",
    "study.confirm_rounds=1",
]


def run_cli(
    args: list[str], cwd: Path, *, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m autotune ARGS`` in ``cwd``, as a user would run it."""
    full_env = {**os.environ, "PYTHONPATH": str(TESTS), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def make_session(
    overrides: list[str] = (),  # type: ignore[assignment]
    *,
    source: Source | None = None,
    facts: machine.MachineFacts | None = None,
    device: str = "cpu",
) -> Session:
    """A session from ``python -m autotune OVERRIDES``'s config, without loading its dataset:
    ``source`` (None where the test's fake runner never reads it) stands in for it."""
    from autotune.app.cli import compose, to_config  # the app only for the tests that ask

    config = to_config(compose(list(overrides)))
    facts = facts or machine.detect(want_cuda=False)
    space = SearchSpace.from_config(
        config.search_space, facts, device=device, batch_size=config.batch_size
    )
    return Session(config, facts, device, source, space, "test")  # type: ignore[arg-type]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``@pytest.mark.gpu`` tests run only where CUDA is usable (``pytest -m gpu`` there)."""
    import torch

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

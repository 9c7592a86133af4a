"""The order the test modules run in (``tests/run_order.py``): the longest recorded first,
each module's tests together and in the order they came."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import run_order


def _items(*nodeids: str) -> list[pytest.Item]:
    return [SimpleNamespace(nodeid=n) for n in nodeids]  # type: ignore[misc]


def test_the_longest_recorded_modules_come_first_and_unknown_ones_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seconds = tmp_path / "module_seconds.json"
    seconds.write_text(json.dumps({"tests/b.py": 90.0, "tests/c.py": 5.0}))
    monkeypatch.setattr(run_order, "SECONDS", seconds)
    items = _items("tests/new.py::x", "tests/c.py::y", "tests/b.py::z", "tests/c.py::w")
    ordered = [i.nodeid for i in run_order.longest_first(items)]
    assert ordered == ["tests/b.py::z", "tests/c.py::y", "tests/c.py::w", "tests/new.py::x"]


def test_a_run_s_seconds_are_recorded_per_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seconds = tmp_path / "module_seconds.json"
    monkeypatch.setattr(run_order, "SECONDS", seconds)
    recorder = run_order.Recorder()
    for nodeid, duration in (
        ("tests/a.py::x", 1.25),
        ("tests/a.py::y", 2.0),
        ("tests/b.py::z", 9),
    ):
        recorder.add(SimpleNamespace(nodeid=nodeid, duration=duration))  # type: ignore[arg-type]
    recorder.write()
    assert json.loads(seconds.read_text()) == {"tests/b.py": 9.0, "tests/a.py": 3.2}
    assert list(json.loads(seconds.read_text())) == ["tests/b.py", "tests/a.py"]


def test_every_recorded_module_is_a_test_module_of_this_folder() -> None:
    """A module renamed or removed leaves its seconds behind: record a full run again."""
    recorded = json.loads(run_order.SECONDS.read_text())
    tests = Path(run_order.__file__).parent
    missing = [m for m in recorded if not (tests.parent / m).is_file()]
    assert not missing, f"{missing}: run `pytest --record-module-seconds` to record them again"

"""The order the test modules run in: the longest first, so that under pytest-xdist
(``--dist loadscope --no-loadscope-reorder``) a run does not end on one worker's long module
while the other has nothing left. xdist's own order (the most tests first) ran the longest
modules last: an end-to-end module holds a few long tests.

Each module's seconds come from ``module_seconds.json``, written by a full run with
``pytest --record-module-seconds`` (one worker or several: the seconds are the tests' own). A
module not in it counts 0 and runs after the known ones. Modules of equal seconds, and the
tests inside each, keep pytest-random-order's shuffled order."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

SECONDS = Path(__file__).with_name("module_seconds.json")


def _module(nodeid: str) -> str:
    return nodeid.split("::")[0]


def longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` by module, the modules in order of their recorded seconds, longest first."""
    seconds = json.loads(SECONDS.read_text()) if SECONDS.is_file() else {}
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(_module(item.nodeid), []).append(item)
    order = sorted(modules, key=lambda module: -seconds.get(module, 0.0))
    return [item for module in order for item in modules[module]]


class Recorder:
    """Each module's seconds in this run (setup, call and teardown of its tests), written to
    ``SECONDS`` at its end."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = defaultdict(float)

    def add(self, report: pytest.TestReport) -> None:
        self._seconds[_module(report.nodeid)] += report.duration

    def write(self) -> None:
        ranked = sorted(self._seconds.items(), key=lambda kv: -kv[1])
        SECONDS.write_text(json.dumps({m: round(s, 1) for m, s in ranked}, indent=1) + "\n")

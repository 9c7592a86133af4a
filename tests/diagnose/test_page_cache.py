"""The page cache of a set of files: evicted, warmed, and asked what is resident."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune.diagnose import page_cache


def test_eviction_makes_the_files_cold_and_reading_warms_them(tmp_path: Path) -> None:
    paths = []
    for i in range(6):
        (tmp_path / f"{i}.bin").write_bytes(os.urandom(100_000))
        paths.append(str(tmp_path / f"{i}.bin"))
    assert page_cache.resident_fraction(paths) == 1.0  # just written
    assert page_cache.evict(paths, flush=True)  # written moments ago: dirty until flushed
    after = page_cache.resident_fraction(paths)
    if after is None or after > 0.05:
        pytest.skip(f"this file system keeps evicted pages ({after=})")
    assert after == 0.0
    assert page_cache.warm(paths[:3]) == 300_000
    assert page_cache.resident_fraction(paths) == pytest.approx(0.5, abs=0.1)
    page_cache.evict(paths)  # clean now: no flush needed
    assert page_cache.resident_fraction(paths) == 0.0


def test_missing_and_empty_files_are_passed_over(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.touch()
    missing = str(tmp_path / "missing")
    assert page_cache.evict([missing, str(empty)])
    assert page_cache.warm([missing, str(empty)]) == 0
    assert page_cache.resident_fraction([missing, str(empty)]) is None  # no pages to ask about

"""Loose files against shards of the same samples: real loader-alone runs, from storage and
from the page cache, and nothing left behind."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from helpers import make_session

from autotune import machine
from autotune.diagnose import files_vs_shards, page_cache
from autotune.diagnose.measure import _Trials
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source, synthetic
from autotune.runtime.trial import run_trial
from autotune.schema import ModelConfig


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    return synthetic(
        count=96, num_classes=3, size=(96, 72), cache_dir=tmp_path_factory.mktemp("s")
    )


@pytest.mark.slow
def test_the_same_samples_are_read_as_files_and_as_shards_cold_and_warm(
    source: Source, tmp_path: Path
) -> None:
    page_cache.evict(source.paths, flush=True)
    after = page_cache.resident_fraction(source.paths)
    if after is None or after > 0.05:
        pytest.skip("this file system keeps evicted pages")
    overrides = ["window=quick", "recipe.crop_size=48", "batch_size=4", f"studies_dir={tmp_path}"]
    facts = dataclasses.replace(machine.detect(want_cuda=False), usable_cpus=2)
    session = make_session(overrides, source=source, facts=facts)
    alone = session.with_conf(dataclasses.replace(session.conf, model=ModelConfig(name="none")))
    pipeline = PipelineConfig(batch_size=4, num_workers=2, prefetch_factor=2, decoder="pil")
    trials = _Trials(run_trial)
    folder = tmp_path / ".diagnose-shards"
    fs = files_vs_shards.measure(alone, pipeline, 2000.0, trials, folder)
    assert not trials.failures, trials.failures
    rounds = files_vs_shards.ROUNDS
    assert (len(fs.files_cold), len(fs.files_warm)) == (rounds, rounds)
    assert (len(fs.shards_cold), len(fs.shards_warm)) == (rounds, rounds)
    assert all(m.samples_per_s > 0 for m in (*fs.files_cold, *fs.shards_warm))
    assert fs.samples == 96 and fs.shard_count == 8  # 4 shards for each of 2 workers
    assert fs.cold_ratio > 0 and fs.note.startswith("96 of the 96 files, and the same samples")
    assert not folder.exists()  # written for the comparison, then removed

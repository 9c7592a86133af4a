"""mode=diagnose, measured: which runs it makes, and end to end on real JPEGs with real
child-process trials.

Speed is measured, not asserted: the end-to-end tests check that the report names a binding
limit, every stage and the slowest files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
from pathlib import Path

import pytest
import yaml
from helpers import QUICK_WINDOW, make_session

from autotune import machine
from autotune.app import cli
from autotune.diagnose import measure as diagnose
from autotune.diagnose import page_cache
from autotune.diagnose.markdown import to_markdown
from autotune.errors import UsageError
from autotune.pipeline import recipes
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source, synthetic
from autotune.runtime.failures import Failure
from autotune.runtime.job import TrialJob
from autotune.runtime.measurement import Measurement
from autotune.runtime.trial import TrialOutcome
from autotune.schema import AutotuneConfig, RecipeConfig
from autotune.session import Session

SMALL = [
    "mode=diagnose",
    *QUICK_WINDOW,
    "search_space=quick",
    "dataset.count=48",
    "dataset.num_classes=3",
    "recipe.crop_size=64",
    "batch_size=8",
    "diagnose.samples=24",  # above the 10 slowest files the report lists
    "diagnose.decoder_samples=16",
    "study.name=small",
]


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, str]:
    """``mode=diagnose`` on a small set, as the CLI runs it: (exit code, stdout,
    diagnosis.md)."""
    studies = tmp_path_factory.mktemp("studies")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main([*SMALL, f"studies_dir={studies}"])
    report = studies / "small" / "diagnosis.md"
    return code, out.getvalue(), report.read_text() if report.is_file() else ""


@pytest.mark.slow
def test_diagnose_names_the_binding_limit(diagnosed: tuple[int, str, str]) -> None:
    code, stdout, report = diagnosed
    assert code == 0, stdout[-2000:]
    verdict = next(line for line in report.splitlines() if line.startswith("**Verdict.**"))
    assert re.search(r"\((ceiling|CPU-work bound) binds\)", verdict), verdict
    assert re.search(r"(data|compute)-bound: the model waits (only )?\d+% of each step", verdict)
    assert re.search(r"decode|augment|read|collate", verdict)
    assert verdict in stdout  # printed as well as written
    # suggestions name knobs of the quick space only (its decoders are pil and opencv)
    tried = re.search(r"Try (.*)\.$", verdict)
    for knob in tried.group(1).split(", ") if tried else []:
        # either decoder: the cheaper of two by a profile of 16 samples, which noise can swap
        allowed = ("decoder=pil", "decoder=opencv", "num_workers=1", "num_workers=2")
        assert knob in allowed, knob


@pytest.mark.slow
def test_diagnosis_reports_every_stage_and_the_tail(diagnosed: tuple[int, str, str]) -> None:
    _, _, report = diagnosed
    # the default: the baseline, whose decode is the tutorial's (ImageFolder's PIL loader)
    for row in ("read bytes", "decode (as_is)", "augment", "collate", "host→device copy", "train"):
        match = re.search(rf"^\| {re.escape(row)}[^|]* \| ([\d.]+) \| ([\d.]+) \|", report, re.M)
        assert match, row
        # as it is on a CPU device, the tutorial's .to("cpu") moves nothing: no time
        assert float(match.group(2)) > 0 or row == "host→device copy", row
    assert re.search(r"^p50 [\d.]+ ms · p90 [\d.]+ ms · p99 [\d.]+ ms$", report, re.M)
    # diagnose.shards on (the default): files against shards is run and written (the
    # benchmark's tests turn it off; its measuring is test_files_vs_shards's job)
    assert "## Loose files vs shards" in report and "diagnose.shards=false" not in report
    listed = re.findall(r"^\| (/\S+\.jpg) \|", report, re.M)
    assert len(listed) == 10 and all(Path(p).is_file() for p in listed)
    # the accounting line is there; whether it adds up is test_stages's job
    assert re.search(r"stages / measured = [\d.]+\); in CPU time", report)
    assert "eviction checked with mincore" in report


def test_pipeline_to_diagnose(tmp_path: Path) -> None:
    # the baseline: the pipeline as it is under PyTorch's defaults
    assert diagnose.pipeline_to_diagnose(AutotuneConfig(batch_size=16)) == PipelineConfig(
        batch_size=16, decoder="as_is"
    )
    best = tmp_path / "best.yaml"
    tuned = PipelineConfig(num_workers=2, prefetch_factor=3, decoder="opencv", main_threads=1)
    best.write_text(yaml.safe_dump(tuned.to_dict()))
    assert diagnose.pipeline_to_diagnose(AutotuneConfig(pipeline=str(best))) == tuned
    best.write_text(yaml.safe_dump({"loader": {"batch_size": 8}, "pipeline": {"decoder": "x"}}))
    with pytest.raises(UsageError, match="decoder must be one of .*got 'x'"):
        diagnose.pipeline_to_diagnose(AutotuneConfig(pipeline=str(best)))


def test_missing_pipeline_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    code = cli.main(["mode=diagnose", f"pipeline={missing}", f"studies_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and str(missing) in err
    assert not (tmp_path / "synthetic-tiny").exists()  # nothing run or written


@pytest.fixture(scope="module")
def source() -> Source:
    return synthetic(count=48, num_classes=3, size=(96, 72))


def _session(source: Source, batch_size: int) -> Session:
    overrides = [
        "window=quick",
        "search_space=quick",
        "recipe.crop_size=64",
        f"batch_size={batch_size}",
        "diagnose.samples=16",
        "diagnose.decoder_samples=8",
        "study.name=fake",
        "diagnose.shards=false",  # the storage runs alone (files against shards: below)
    ]
    facts = dataclasses.replace(machine.detect(want_cuda=False), usable_cpus=2)
    return make_session(overrides, source=source, facts=facts)


class _FakeRuns:
    """Stands in for the child-process trials: the ceiling gives 300 samples/s on one thread
    and 500 on two, the loader alone 400; the jobs named in ``fail`` fail."""

    def __init__(self, *fail: str) -> None:
        self.fail = fail
        self.jobs: list[TrialJob] = []

    @staticmethod
    def name(job: TrialJob) -> str:
        if job.kind == "ceiling":
            return f"ceiling {job.pipeline.main_threads}"
        if job.model.name != "none":
            return "full"
        return "serial" if job.pipeline.num_workers == 0 else "loader"

    def __call__(self, job: TrialJob, timeout_s: float) -> TrialOutcome:
        self.jobs.append(job)
        name = self.name(job)
        if name in self.fail:
            return TrialOutcome("failed", failure=Failure("error", f"{name} broke"))
        rate = {"ceiling 1": 300.0, "ceiling 2": 500.0}.get(name, 400.0)
        return TrialOutcome("ok", Measurement(rate, (rate,), 0.1, 0.5, 2, 6, None, None, 2e-3))


def test_each_run_once_and_what_failed_is_kept(source: Source) -> None:
    session = _session(source, batch_size=8)
    pipeline = PipelineConfig(batch_size=8, num_workers=1, prefetch_factor=2)
    runs = _FakeRuns("full")
    d = diagnose.diagnose(session, pipeline, run=runs)
    # 48 files hold no storage window at 8 a batch: the loader alone runs on its own
    ran = [runs.name(j) for j in runs.jobs]
    assert ran == ["ceiling 1", "ceiling 2", "full", "loader", "serial"]
    assert d.ceiling is not None and d.ceiling.samples_per_s == 500.0  # the better one
    assert d.full is None
    assert d.failures == (f"full training, {pipeline.short()}: error: full broke",)
    assert d.loader_only is not None and d.serial is not None
    serial = runs.jobs[-1].pipeline
    assert (serial.num_workers, serial.main_threads, serial.prefetch_factor) == (0, 1, None)
    assert [j.pipeline for j in runs.jobs[2:4]] == [pipeline, pipeline]
    assert d.storage.note.startswith("48 files are too few")
    # the pipeline as it is profiles its own stages (the tutorial's PIL and transforms.v2)
    assert set(d.decoders) == {"as_is", "pil", "opencv"} and d.profile.decoder == "pil"
    assert len(d.profile.samples) == 16 and d.copy.cpu_s > 0
    assert (d.name, d.device, d.images, d.usable_cpus) == ("fake", "cpu", 48, 2)
    # the ceiling is the session's: a second diagnosis does not measure it again
    again = _FakeRuns()
    diagnose.diagnose(session, pipeline, run=again)
    assert [again.name(j) for j in again.jobs] == ["full", "loader", "serial"]


def test_a_pipeline_with_a_decoded_copy_is_diagnosed_on_its_copy(source, tmp_path) -> None:
    """What the loader reads is the copy: no decode in its stages, no decoders to compare,
    no loose files against shards; the copy to the device is timed on the copy too."""
    session = _session(source, batch_size=8)
    session = session.with_conf(dataclasses.replace(session.conf, studies_dir=str(tmp_path)))
    pipeline = PipelineConfig(batch_size=8, num_workers=1, prefetch_factor=2, cache="decoded")
    d = diagnose.diagnose(session, pipeline, run=_FakeRuns())
    assert d.profile.stages["decode"].cpu_s == 0 and d.profile.stages["augment"].cpu_s > 0
    assert d.decoders == {} and d.copy.cpu_s > 0
    assert d.shards.note == "not compared: the pipeline reads its decoded copy"
    assert list((tmp_path / "prepared").glob("decoded-*/pixels.u8"))
    assert "It reads its decoded copy: the stages below are the copy's." in to_markdown(d, 3)


def test_the_page_cache_runs_stand_for_the_loader_alone(source: Source) -> None:
    page_cache.evict(source.paths, flush=True)
    after = page_cache.resident_fraction(source.paths)
    if after is None or after > 0.05:
        pytest.skip("this file system keeps evicted pages")
    serial = PipelineConfig(batch_size=2, num_workers=0, main_threads=1)
    runs = _FakeRuns()
    d = diagnose.diagnose(_session(source, batch_size=2), serial, run=runs)
    # two rounds from storage and from the page cache; already serial: no run of its own
    assert [runs.name(j) for j in runs.jobs] == ["ceiling 1", "ceiling 2", "full", *["serial"] * 4]
    assert len(d.storage.warm) == 2 and d.serial is d.loader_only
    assert d.loader_only is not None
    assert d.loader_only.sub_window_samples_per_s == (400.0, 400.0)
    assert d.loader_only.timed_batches == 12


def test_a_pipeline_of_another_batch_size_is_diagnosed_at_its_own(source: Source) -> None:
    session = _session(source, 8)
    session.measure_ceiling(run=_FakeRuns())  # at 8 a batch
    runs = _FakeRuns("ceiling 1", "ceiling 2")
    d = diagnose.diagnose(session, PipelineConfig(batch_size=4), run=runs)
    # every run at 4 a batch, the ceiling measured again at 4 (and its failures said)
    assert {j.pipeline.batch_size for j in runs.jobs} == {4}
    assert [runs.name(j) for j in runs.jobs][:2] == ["ceiling 1", "ceiling 2"]
    assert d.ceiling is None and len(d.failures) == 2
    assert d.failures[0].startswith("the ceiling (the train step on a batch already on the")


@pytest.mark.slow
def test_copy_is_timed_on_fresh_batches_even_with_few_images() -> None:
    source = synthetic(count=33, num_classes=3)  # one batch of 32 per pass
    serial = PipelineConfig(batch_size=32, main_threads=1)
    copy = diagnose.time_copy(
        AutotuneConfig(), source, recipes.from_config(RecipeConfig()), serial, "cpu"
    )
    assert copy.cpu_s > 0 and copy.wall_s > 0

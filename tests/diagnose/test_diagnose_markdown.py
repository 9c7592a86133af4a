"""``diagnosis.md``: the sections, in order, and what each shows."""

from __future__ import annotations

import re

from fake_diagnosis import diagnosis, measured, stage_profile

from autotune.diagnose.files_vs_shards import FilesVsShards
from autotune.diagnose.markdown import shards_lines, storage_lines, tail_lines, to_markdown
from autotune.diagnose.storage import Storage
from autotune.runtime.measurement import Measurement
from autotune.runtime.stages import StageTime


def _headings(text: str) -> list[str]:
    return re.findall(r"^#+ (.*)$", text, re.M)


def test_the_report_opens_with_the_verdict_and_marks_the_binding_limit() -> None:
    text = to_markdown(diagnosis())
    lines = text.splitlines()
    assert lines[0] == "# Diagnosis: x"
    assert lines[2].startswith("**Verdict.** data-bound: the GPU waits 61% of each step")
    assert lines[4] == (
        "Pipeline `"
        + diagnosis().pipeline.short()
        + "` on cuda, model `resnet50`, 100 images, 2 usable CPUs."
    )
    assert [h.split(" (")[0] for h in _headings(text)] == [
        "Diagnosis: x",
        "Rates",
        "Per-sample time by stage",
        "Decoders",
        "Storage vs CPU",
        "Loose files vs shards",
        "Latency tail",
    ]
    bound = "| CPU-work bound: 2 CPUs / 4.20 ms of loader CPU per sample | 476 | **binds** |"
    assert bound in text
    assert "| ceiling: the train step on a batch already on the device | 5,000 |  |" in text
    assert "| full training, this pipeline | 450 | data wait 61% of each step |" in text
    assert "| decode (pil) | 3.00 | 3.00 | 71% |" in text
    assert text.endswith("\n") and not text.endswith("\n\n")


def test_decoders_are_listed_cheapest_first_and_only_when_compared() -> None:
    text = to_markdown(diagnosis())
    rows = re.findall(r"^\| (pil|torchvision) \| ", text, re.M)
    assert rows == ["torchvision", "pil"]
    one = {"pil": stage_profile("pil", 3.0)}
    assert "## Decoders" not in to_markdown(diagnosis(decoders=one))


def test_failures_warnings_and_the_accounting_have_their_sections() -> None:
    serial = Measurement(250.0, (250.0,), 0.0, 0.0, 0, 2, None, None, 4e-3)
    d = diagnosis(
        full=Measurement(6000.0, (6000.0,), 0.1, 1.0, 8, 40),
        serial=serial,
        failures=("the ceiling, 1 thread(s): error: boom",),
    )
    text = to_markdown(d)
    assert _headings(text)[-2:] == ["Runs that failed", "Warnings"]
    assert "- the ceiling, 1 thread(s): error: boom" in text
    assert "(stages / measured = 1.05); in CPU time 4.21 ms against the 4.00 ms" in text
    # no ceiling: its row and the train step's are left out, the verdict says so
    bare = to_markdown(diagnosis(ceiling=None))
    assert "| ceiling:" not in bare and "| train step" not in bare
    assert "(the ceiling was not measured)" in bare


def test_storage_lines_say_what_was_compared() -> None:
    assert storage_lines(Storage(note="posix_fadvise is not available here")) == [
        "- posix_fadvise is not available here"
    ]
    s = Storage(
        cold=(measured(200), measured(210)),
        warm=(measured(470), measured(460)),
        read_cold=StageTime(0.0, 2e-3),
        read_warm=StageTime(0.0, 1e-4),
        cached_after_eviction=0.0,
    )
    lines = storage_lines(s)
    assert lines[0].endswith(": 2.00 ms each from storage, 0.10 ms from the page cache")
    assert lines[1] == "- eviction checked with mincore: 0% of the pages still cached after it"
    assert "200 vs 470, 210 vs 460: **I/O-bound**" in lines[2]
    # a FUSE mount that answers every read itself, 42 ms a file, read again or not
    fuse = Storage(
        cold=(measured(11), measured(12)),
        warm=(measured(12), measured(12)),
        read_cold=StageTime(0.0, 42.1e-3),
        read_warm=StageTime(0.0, 42.4e-3),
        cached_after_eviction=0.0,
    )
    assert fuse.never_cached and not fuse.io_bound and not s.never_cached
    lines = storage_lines(fuse)
    assert lines[2].startswith("- **every read comes from storage**: a file read again right")
    assert (
        lines[3]
        == "- the loader alone, the same runs (samples/s, interleaved rounds): 11 vs 12, 12 vs 12"
    )
    assert "I/O-bound" not in "\n".join(lines)


def test_the_tail_lists_the_slowest_files_and_the_undecodable() -> None:
    profile = stage_profile("pil", 3.0)
    skipped = tuple(f"/bad/{i}.jpg" for i in range(7))
    damaged = type(profile)(profile.decoder, profile.stages, profile.samples, skipped)
    lines = tail_lines(damaged, 10)
    assert lines[0] == "## Latency tail (read + decode + augment per sample, 1 samples)"
    assert "| /data/a.jpg | 4.10 | 1 KiB | 400x300 |" in lines
    assert lines[-1] == (
        "7 files could not be decoded: /bad/0.jpg, /bad/1.jpg, /bad/2.jpg, /bad/3.jpg, "
        "/bad/4.jpg and 2 more"
    )


def test_loose_files_and_shards_are_a_table_from_storage_and_from_the_page_cache() -> None:
    files = (measured(100.0), measured(110.0))
    shards = (measured(250.0), measured(240.0))
    fs = FilesVsShards(files, files, shards, shards, 512, 8, note="512 of the 2048 files")
    text = "\n".join(shards_lines(fs))
    assert "| loose files | 100, 110 | 100, 110 |" in text
    assert "| 8 shards | 250, 240 | 250, 240 |" in text
    assert "shards read 2.33x as fast as loose files: **worth writing (python -m " in text
    assert text.endswith("- 512 of the 2048 files")
    assert shards_lines(FilesVsShards(note="not compared")) == [
        "## Loose files vs shards",
        "",
        "- not compared",
    ]
    assert "## Loose files vs shards" in to_markdown(diagnosis(shards=fs))

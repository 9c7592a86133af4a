"""The verdict: which limit binds, what to try, and when the figures contradict each other."""

from __future__ import annotations

import pytest
from fake_diagnosis import MS, diagnosis, measured, stage_profile

from autotune.diagnose.files_vs_shards import FilesVsShards
from autotune.diagnose.markdown import to_markdown
from autotune.diagnose.storage import Storage
from autotune.diagnose.verdict import suggestions, verdict
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.measurement import Measurement
from autotune.runtime.stages import SampleTime, StageProfile, StageTime


def test_verdict_when_the_cpu_work_bound_binds() -> None:
    d = diagnosis()
    assert d.binding == ("CPU-work bound", pytest.approx(2 / 4.2e-3))
    text = verdict(d)
    assert text.startswith("data-bound: the GPU waits 61% of each step for data")
    assert "decode is 71% of per-sample CPU time" in text
    assert (
        "the CPU-work bound is 476 samples/s vs a ceiling of 5,000 (CPU-work bound binds)" in text
    )
    assert text.endswith("Try decoder=torchvision.")  # 2 workers already: no more to add
    # only knobs of this machine's space are suggested
    assert "Try" not in verdict(diagnosis(choices={"num_workers": [0, 1, 2], "decoder": ["pil"]}))


def test_verdict_when_the_step_binds() -> None:
    fast = {"pil": stage_profile("pil", 0.1, 0.1)}
    d = diagnosis(
        profile=fast["pil"],
        decoders=fast,
        ceiling=measured(400.0),
        full=Measurement(380.0, (380.0,), 0.04, 1.0, 8, 40),
    )
    text = verdict(d)
    assert text.startswith("compute-bound: the GPU waits only 4% of each step for data")
    assert "(ceiling binds)" in text and "Try" not in text
    assert text.endswith("This pipeline reaches 95% of that limit.")


def test_verdict_says_io_bound_only_with_every_round_slower() -> None:
    rounds = {"cold": (measured(200), measured(210)), "warm": (measured(470), measured(460))}
    big = Storage(**rounds, dataset_bytes=2**40, fits_in_cache=False)
    assert verdict(diagnosis(storage=big)).startswith(
        "I/O-bound: from storage the loader alone gives 205 samples/s, from the page cache 465"
    )
    # data that fits in memory is read from storage in the first epoch only
    small = Storage(**rounds, dataset_bytes=50 * 2**20, fits_in_cache=True)
    text = verdict(diagnosis(storage=small))
    assert text.startswith("data-bound")
    assert "the loader alone is 56% slower (205 vs 465 samples/s): I/O-bound in the first " in text
    assert "50.0 MiB of files fit in the page cache" in text
    noisy = Storage(cold=(measured(200), measured(470)), warm=(measured(470), measured(460)))
    assert "I/O" not in verdict(diagnosis(storage=noisy))


def test_a_cpu_device_counts_the_step_on_the_same_cpus() -> None:
    d = diagnosis(
        device="cpu", ceiling=Measurement(300.0, (300.0,), 0.0, 0.1, 4, 20, None, None, 6e-3)
    )
    # 4.2 ms loader + 0.01 ms copy + 6 ms step per sample on 2 CPUs
    assert d.shared_cpu_bound == pytest.approx(2 / 10.21e-3)
    assert "together at most 196 samples/s" in verdict(d)


def test_more_workers_are_suggested_while_the_loader_is_short_of_its_bound() -> None:
    one_worker = PipelineConfig(num_workers=1, decoder="pil")
    d = diagnosis(pipeline=one_worker, loader_only=measured(200.0))
    assert suggestions(d) == ["num_workers=2", "decoder=torchvision"]
    # never more workers than usable CPUs, whatever the space offers
    d = diagnosis(
        pipeline=one_worker,
        loader_only=measured(200.0),
        choices={"num_workers": [0, 8], "decoder": ["pil"]},
    )
    assert suggestions(d) == ["num_workers=2"]


def test_a_step_that_does_not_wait_gets_no_suggestion() -> None:
    waits_little = Measurement(450.0, (450.0,), 0.05, 1.0, 8, 40)
    assert suggestions(diagnosis(full=waits_little)) == []


def test_device_decoders_leave_decode_out_of_the_workers() -> None:
    assert diagnosis(pipeline=PipelineConfig(decoder="nvjpeg")).worker_stages == (
        "read",
        "collate",
    )
    on_gpu = diagnosis(pipeline=PipelineConfig(augment_on="gpu"))
    assert on_gpu.worker_stages == ("read", "decode", "collate")
    # the bound counts only what the workers do: 0.1 + 3 + 0.1 ms on 2 CPUs
    assert on_gpu.cpu_work_bound == pytest.approx(2 / 3.2e-3)


def test_contradicting_rates_are_a_warning() -> None:
    assert diagnosis().warnings == []
    d = diagnosis(full=Measurement(6000.0, (6000.0,), 0.1, 1.0, 8, 40))
    assert d.warnings[0].startswith("training ran at 6,000 samples/s, above its ceiling of 5,000")
    assert "faster than the loader alone (470)" in d.warnings[1]
    assert d.warnings[-1] == "re-run the diagnosis on a quiet machine"


def test_the_accounting_compares_the_stages_with_the_serial_run() -> None:
    assert diagnosis().accounting == {}  # no serial run
    serial = Measurement(250.0, (200.0, 400.0), 0.0, 0.0, 0, 2, None, None, 4e-3)
    wall, cpu = diagnosis(serial=serial).accounting.values()
    assert wall == pytest.approx((4.2e-3 + 1e-5, (1 / 200 + 1 / 400) / 2))
    assert cpu == pytest.approx((4.2e-3 + 1e-5, 4e-3))


def test_storage_that_waits_is_named_and_workers_beyond_the_cpus_suggested() -> None:
    local = verdict(diagnosis())
    assert "; not storage-bound: reading a sample takes 0.1 ms of its 4.2 ms in a worker" in local
    # 20 ms of waiting on each read, for the same CPU time
    slow = stage_profile("pil", 3.0)
    slow.stages["read"] = StageTime(cpu_s=0.1 * MS, wall_s=20.1 * MS)
    d = diagnosis(
        profile=slow,
        loader_only=measured(90.0),
        choices={"num_workers": [0, 16], "decoder": ["pil", "torchvision"]},
    )
    assert d.storage_bound
    text = verdict(d)
    assert (
        "; storage-bound: a sample takes 24.2 ms in a worker for 4.2 ms of CPU (reading it: "
        "20.1 ms), so more workers than the 2 CPUs keep them busy" in text
    )
    assert suggestions(d)[0] == "num_workers=16"  # as far as the space goes, past the CPUs
    # 2 workers, each with one sample of 24.2 ms in hand: at most 83 samples/s, below the
    # CPU-work bound of 2 CPUs / 4.2 ms (476): the waiting reads are what binds
    assert d.read_wait_bound == pytest.approx(2 / 24.2e-3)
    assert d.binding == ("waiting reads", pytest.approx(2 / 24.2e-3))
    assert "(waiting reads bind: 2 workers, each with one sample in hand, give at most 83" in text
    assert "| waiting reads: 2 workers / 24.20 ms a sample in hand | 83 | **binds** |" in (
        to_markdown(d, 1)
    )
    assert diagnosis().read_wait_bound is None  # local reads: no such limit


def test_shards_that_read_faster_from_storage_are_named_in_the_verdict() -> None:
    files = (measured(100.0), measured(110.0))
    fast = FilesVsShards(files, files, (measured(250.0), measured(240.0)), files, 512, 8)
    assert fast.shards_pay and fast.cold_ratio == pytest.approx(245 / 105)
    assert (
        "; from storage, shards of the same samples read 2.3x as fast as loose files "
        "(python -m autotune.shard)" in verdict(diagnosis(shards=fast))
    )
    once = FilesVsShards(files, files, (measured(250.0), measured(112.0)), files, 512, 8)
    assert not once.shards_pay  # one round alone: not enough
    assert "shards" not in verdict(diagnosis(shards=once))


def own_profile(read_cpu_ms: float, read_wall_ms: float) -> StageProfile:
    """The user's own Dataset: its read as one stage, then its collate."""
    stages = {
        "getitem": StageTime(read_cpu_ms * MS, read_wall_ms * MS),
        "collate": StageTime(0.2 * MS, 0.2 * MS),
    }
    samples = tuple(
        SampleTime(f"index {i}", 0, 0, 0, 0.0, 0.0, 0.0, own_s=(read_wall_ms + i) * MS)
        for i in range(3)
    )
    return StageProfile("as_is", stages, samples)


def test_the_user_s_own_dataset_is_judged_on_its_read_and_collate() -> None:
    own = {"profile": own_profile(4.0, 4.0), "decoders": {}, "choices": {"num_workers": [0, 2]}}
    d = diagnosis(**own, pipeline=PipelineConfig(decoder="as_is"), loader_only=measured(200.0))
    assert d.worker_stages == ("getitem", "collate")
    assert d.cpu_work_bound == pytest.approx(2 / 4.2e-3)
    text = verdict(d)
    assert "not storage-bound: a sample of your Dataset takes 4.2 ms in a worker" in text
    assert "your Dataset's read is 95% of per-sample CPU time" in text
    assert text.endswith("Try num_workers=2.")
    report = to_markdown(d)
    assert "| your Dataset's read | 4.00 | 4.00 | 95% |" in report
    assert "## Latency tail (your Dataset's read per sample, 3 samples)" in report
    assert "| slowest samples | ms |\n|---|---:|\n| index 2 | 6.00 |" in report
    assert "slowest files" not in report and "100 samples" in report
    # a read that waits (its wall time far above its CPU time) asks for more workers
    own["profile"] = own_profile(1.0, 20.0)
    waiting = diagnosis(**own, pipeline=PipelineConfig(decoder="as_is"))
    assert waiting.storage_bound and waiting.read_wait_bound == pytest.approx(1 / 20.2e-3)
    assert "storage-bound: a sample of your Dataset takes 20.2 ms in a worker for 1.2 ms" in (
        verdict(waiting)
    )


def test_a_busy_machine_stretching_every_stage_is_not_read_as_storage_that_waits() -> None:
    # another process on the cores: every stage's wall three times its CPU, the read's too
    busy = stage_profile("pil", 3.0)
    busy.stages.update({k: StageTime(v.cpu_s, 3 * v.wall_s) for k, v in busy.stages.items()})
    assert not diagnosis(profile=busy).storage_bound
    own = own_profile(1.0, 3.0)
    own.stages["collate"] = StageTime(0.2 * MS, 0.6 * MS)
    assert not diagnosis(
        profile=own, decoders={}, pipeline=PipelineConfig(decoder="as_is")
    ).storage_bound
    # the read alone stretched further than the rest: it waits on storage
    busy.stages["read"] = StageTime(0.1 * MS, 20.1 * MS)
    assert diagnosis(profile=busy).storage_bound

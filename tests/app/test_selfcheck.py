"""``python -m autotune.selfcheck``: the whole command as a user runs it (slow), and its runner:
the table, a failing check recorded without stopping the others, a stop, bad arguments."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch
from helpers import TESTS, run_python

from autotune.app import selfcheck
from autotune.app.selfcheck import CheckResult, run_checks, table
from autotune.app.selfcheck_paths import Bench, Check
from autotune.runtime.trial import run_trial


def _rows(text: str) -> dict[str, tuple[str, str, float]]:
    """The table's rows: path -> (result, why, seconds)."""
    lines = text.splitlines()
    start = lines.index("| path | result | why | seconds |")
    assert lines[start + 1] == "|---|---|---|---:|"
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        name, result, why, seconds = (cell.strip() for cell in line.strip("|").split(" | "))
        rows[name] = (result, why, float(seconds))
    return rows


def _bench(tmp_path: Path) -> Bench:
    return Bench(tmp_path, threading.Event(), run_trial)


def _broken(bench: Bench) -> str:
    raise ValueError("the path is broken\nhere")  # a fault, on two lines


@pytest.mark.slow
def test_the_cpu_half_passes_and_every_gpu_path_says_why_it_was_skipped(tmp_path):
    out = tmp_path / "report" / "selfcheck.md"
    done = run_python(
        ["-m", "autotune.selfcheck", "--out", str(out)],
        tmp_path,
        timeout=400,
        env={**os.environ, "PYTHONPATH": str(TESTS.parent)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    written = out.read_text()
    assert written in done.stdout  # the same table, printed
    rows = _rows(written)
    assert list(rows) == [check.name for check in selfcheck.checks()]  # every path, once
    for check in selfcheck.checks():  # skipped exactly where it cannot run here, for its reason
        result, why, _ = rows[check.name]
        reason = check.skip_reason()
        expected = ("skipped", reason) if reason else ("passed", why)
        assert (result, why) == expected, check.name
    if not torch.cuda.is_available():
        for name, (result, why, _) in rows.items():
            device = name.split()[0]
            assert device in ("cpu", "cuda"), name
            assert result == ("passed" if device == "cpu" else "skipped"), (name, result, why)
            assert why, name  # what a passed check saw, or why it was skipped


def test_the_table_has_a_row_per_result_in_order() -> None:
    results = [
        CheckResult("cpu decoder pil", "passed", "0.00 levels from pil", 0.42),
        CheckResult("cpu study", "failed", "RuntimeError: exit code 1: a | b", 3.0),
        CheckResult("cuda pin_memory", "skipped", "no CUDA device", 0.0),
    ]
    text = table(results)
    assert text.startswith("# autotune self-check\n")
    assert "1 passed, 1 failed, 1 skipped in 3 s" in text
    assert _rows(text) == {
        "cpu decoder pil": ("passed", "0.00 levels from pil", 0.4),
        "cpu study": ("failed", "RuntimeError: exit code 1: a \\| b", 3.0),  # | escaped
        "cuda pin_memory": ("skipped", "no CUDA device", 0.0),
    }


def test_a_failing_check_is_recorded_and_the_others_still_run(tmp_path) -> None:
    chosen = [
        Check("cpu before", lambda bench: "fine"),
        Check("cpu broken", _broken),
        Check("cpu after", lambda bench: "ran all the same"),
        Check("cuda elsewhere", _broken, skip_reason=lambda: "no CUDA device"),
    ]
    results = run_checks(chosen, _bench(tmp_path))
    assert [(r.name, r.status, r.why) for r in results] == [
        ("cpu before", "passed", "fine"),
        ("cpu broken", "failed", "ValueError: the path is broken here"),  # one line
        ("cpu after", "passed", "ran all the same"),
        ("cuda elsewhere", "skipped", "no CUDA device"),  # never run
    ]
    assert all(r.seconds >= 0 for r in results)


def test_a_failed_check_exits_1_with_the_table_written(tmp_path, monkeypatch, capsys) -> None:
    forced = [Check("cpu fine", lambda bench: "fine"), Check("cpu broken", _broken)]
    monkeypatch.setattr(selfcheck, "checks", lambda: forced)  # to force a fault
    out = tmp_path / "selfcheck.md"
    assert selfcheck.main(["--out", str(out)]) == 1
    assert out.read_text() in capsys.readouterr().out
    assert {n: r for n, (r, _, _) in _rows(out.read_text()).items()} == {
        "cpu fine": "passed",
        "cpu broken": "failed",
    }


def test_after_a_stop_the_checks_left_are_skipped(tmp_path) -> None:
    bench = _bench(tmp_path)

    def stopped_mid_check(bench: Bench) -> str:
        bench.stop.set()  # what the Ctrl-C handler does while the check runs
        raise RuntimeError("the trial was taken down")

    chosen = [Check("cpu stopped", stopped_mid_check), Check("cpu next", lambda bench: "ran")]
    results = run_checks(chosen, bench)
    assert [(r.status, r.why) for r in results] == [
        ("skipped", selfcheck.INTERRUPTED),
        ("skipped", selfcheck.INTERRUPTED),
    ]


def test_a_real_cpu_decoder_check_passes(tmp_path) -> None:
    out = tmp_path / "selfcheck.md"
    assert selfcheck.main(["--only", "cpu decoder torchvision", "--out", str(out)]) == 0
    assert _rows(out.read_text())["cpu decoder torchvision"][0] == "passed"


def test_a_verify_without_its_study_is_skipped_with_why(tmp_path) -> None:
    out = tmp_path / "selfcheck.md"
    assert selfcheck.main(["--only", "cpu verify", "--out", str(out)]) == 0
    assert _rows(out.read_text())["cpu verify"][:2] == (
        "skipped",
        "no best.yaml to verify: the cpu study did not run or finish",
    )


def test_only_that_matches_nothing_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        selfcheck.main(["--only", "no such path", "--out", str(tmp_path / "x.md")])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("autotune.selfcheck: error: no path")
    assert not (tmp_path / "x.md").exists()

"""A report rebuilt (``mode=report``) from a study that the code before the layer restructuring
wrote is byte-identical to the report that code wrote then.

``data/study_before_layers.db`` and ``data/report_before_layers.md`` come from
``python -m autotune study.n_trials=6 window=quick study.confirm_rounds=1
studies_dir=/tmp/before/studies study.storage=sqlite:////tmp/before/studies/autotune.db
quiet=true``. The report names its storage in its last section, so that URL is swapped for the
copy's before comparing.

Lines differ, on purpose:
- the old report never showed "best (steady) / CPU-work bound" for a study read back from
  storage (it looked for the decoder one level too high in the trial's record); the store reads
  it where it is. That line is added to the old text.
- a result now names the way of applying it each pick is for: "(best)" reads
  "(build_loader)", the speedup line names build_loader and its trial, and the history plot's
  caption calls its dotted line the baseline.
- finalists are ranked, ties (overlapping IQRs) "=N"; on a CPU device the verdict names the
  shared cores when the loader's own bound is far above the best; the importances say which
  of the dashboard's and the report's they are (``SINCE_WORTH``).
Nothing else may differ.
"""

from __future__ import annotations

import difflib
import re
import shutil
from pathlib import Path

import pytest
from helpers import run_cli

DATA = Path(__file__).parent / "data"
STUDY_DB = DATA / "study_before_layers.db"
REPORT_MD = DATA / "report_before_layers.md"
STORAGE_THEN = "sqlite:////tmp/before/studies/autotune.db"
# the line the old reader dropped, before the line it precedes (see the module docstring)
BOUND_LINE = b"- best (steady) / CPU-work bound: 0.41\n"
SPREAD_LINE = b"- spread of the best:"
NAMED_WAYS = (  # (then, now)
    (b"**trial 3 (best)**", b"**trial 3 (build_loader)**"),
    (
        b"- speedup vs PyTorch defaults: 14.36x",
        b"- build_loader(best.yaml), the whole tuned pipeline (trial 3): 14.36x the baseline "
        b"(IQR 9.41-14.58)",  # the range its rounds measured: its IQR over the baseline's median
    ),
    (b"PyTorch's defaults dotted", b"the baseline dotted"),
)
SINCE_WORTH = (  # (then, now): ranks and ties, the CPU verdict, which importances
    (
        b"| | samples/s | IQR | config |\n|---|---:|---|---|\n",
        b"| rank | | samples/s | IQR | config |\n|---|---|---:|---|---|\n",
    ),
    (b"| **trial 3 (build_loader)** |", b"| =1 | **trial 3 (build_loader)** |"),
    (b"| trial 4 |", b"| =1 | trial 4 |"),
    (b"| trial 2 |", b"| =1 | trial 2 |"),
    (b"| baseline: PyTorch defaults |", b"| 4 | baseline: PyTorch defaults |"),
    (b"| ceiling |", b"|  | ceiling |"),
    (
        b"\n\n- build_loader(best.yaml)",
        b"\n\n=N: a tie, their IQRs overlap: not ranked on this machine."
        b"\n\n- build_loader(best.yaml)",
    ),
    (
        b"0.29: the input pipeline limits",
        b"0.29: the shared cores limit: on a CPU device the step and the loader share them "
        b"(the loader's CPU work alone: 1498 samples/s on all cores)",
    ),
    (
        b"each setting explains (rough",
        b"each setting explains across the search (rough",
    ),
    (
        b"are left out).\n",
        b"are left out). optuna-dashboard's own importance panel uses PED-ANOVA, which asks "
        b"another question (which settings set the top trials apart from the rest); these are "
        b"the ones stored on the study (`importances_fanova`) and shown in its note. What each "
        b"setting of the winner is worth is measured directly in the summary's last table.\n",
    ),
)
PLOTS = {
    "optimization_history.png",
    "param_importances.png",
    "throughput_vs_workers.png",
    "data_wait_vs_throughput.png",
}


@pytest.mark.slow  # ~7 s: a python -m autotune run (torch import, importances, four plots)
def test_a_report_rebuilt_from_a_study_written_before_the_layers_is_the_same(
    tmp_path: Path,
) -> None:
    db = tmp_path / "autotune.db"
    shutil.copy(STUDY_DB, db)
    storage = f"sqlite:///{db}"
    result = run_cli(
        [
            "mode=report",
            "study.name=synthetic-tiny",
            f"study.storage={storage}",
            f"studies_dir={tmp_path / 'studies'}",
        ],
        tmp_path,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]

    then = REPORT_MD.read_bytes()
    assert then.count(STORAGE_THEN.encode()) == 1  # the one line that names the storage
    expected = then.replace(STORAGE_THEN.encode(), storage.encode()).replace(
        SPREAD_LINE, BOUND_LINE + SPREAD_LINE
    )
    for old, new in NAMED_WAYS + SINCE_WORTH:
        assert expected.count(old) == 1, old
        expected = expected.replace(old, new)
    expected = re.sub(rb"\| CPU-work bound", b"|  | CPU-work bound", expected)
    # each CPU-work bound's words, since it is also of the user's own Dataset's read
    expected = expected.replace(
        b"decode + augment on all usable", b"the loader's CPU work on all usable"
    )
    report_md = tmp_path / "studies" / "synthetic-tiny" / "report.md"
    rebuilt = report_md.read_bytes()
    diff = "".join(
        difflib.unified_diff(
            expected.decode().splitlines(keepends=True),
            rebuilt.decode().splitlines(keepends=True),
            "report_before_layers.md (storage swapped)",
            "rebuilt report.md",
        )
    )
    assert rebuilt == expected, f"the rebuilt report differs:\n{diff}"

    named = set(re.findall(r"!\[[^]]*]\(([^)]+)\)", rebuilt.decode()))
    assert named == PLOTS
    for name in sorted(named):
        png = report_md.parent / name
        assert png.is_file() and png.stat().st_size > 0, png

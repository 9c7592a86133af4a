"""The real optuna-dashboard, served on loopback, shows the study and its trials' figures."""

from __future__ import annotations

import json

import optuna
import pytest
from helpers import SUB_WINDOWS, dashboard_serving, get_json


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.slow
def test_dashboard_lists_the_study_and_trial_attributes(quick_study):
    cwd, _ = quick_study
    storage = f"sqlite:///{cwd}/studies/autotune.db"
    with dashboard_serving(storage) as base:
        studies = get_json(f"{base}/api/studies")["study_summaries"]
        (study,) = [s for s in studies if s["study_name"] == "synthetic-tiny"]
        detail = get_json(f"{base}/api/studies/{study['study_id']}")
        assert detail["objective_names"] == ["samples_per_s"]  # study.set_metric_names
        study_attrs = {a["key"] for a in detail["user_attrs"]}
        assert {"ceiling_samples_per_s", "confirmation", "fingerprint"} <= study_attrs
        assert {"winner", "workload", "machine"} <= study_attrs  # report.md rebuilds from these
        # the study's note: the summary table of report.md, in Markdown
        note = detail["note"]["body"]
        assert detail["note"]["version"] >= 1
        assert "| samples/s | IQR | config |" in note and "PyTorch's defaults" in note
        # one importance answer: the report's fANOVA, in the note and among the study's attrs
        assert "Settings that mattered across the search" in note and "fANOVA" in note
        assert "importances_fanova" in study_attrs
        assert "| ceiling |" in note and "x the baseline" in note
        assert "studies/synthetic-tiny/report.md" in note
        stored = optuna.load_study(study_name="synthetic-tiny", storage=storage)
        assert len(detail["trials"]) == len(stored.trials) >= 3
        complete = [t for t in detail["trials"] if t["state"] == "Complete"]
        attrs = {a["key"]: a["value"] for a in complete[0]["user_attrs"]}
        for key in (
            "samples_per_s_sub_windows",
            "samples_per_s_steady",
            "samples_per_s_epoch",
            "spread",
            "data_wait_fraction",
            "time_to_first_batch_s",
            "warmup_batches",
            "peak_memory_mb",
            "wall_s",
            "config",
            "pipeline",
        ):
            assert key in attrs
        # sets of the window's sub-windows: uneven ones are followed by a set of twice the length
        assert len(json.loads(attrs["samples_per_s_sub_windows"])) % SUB_WINDOWS == 0
        assert 0 <= float(attrs["data_wait_fraction"]) <= 1
        assert float(attrs["time_to_first_batch_s"]) > 0 and float(attrs["peak_memory_mb"]) > 10
        assert "failure" not in attrs
        if not _has_gpu():  # measured only where there is one: absent, not zero
            assert "gpu_utilization_pct" not in attrs and "gpu_peak_memory_mb" not in attrs

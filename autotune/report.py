"""What a study hands back: ``best.yaml``, a short ``report.md``, and the table it prints."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import yaml

from autotune.machine import MachineFacts
from autotune.study import StudyResult, failure_table


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def best_document(
    result: StudyResult, facts: MachineFacts, context: dict[str, Any]
) -> dict[str, Any]:
    """The contents of ``best.yaml``: loader kwargs, pipeline choices, what was measured."""
    winner, baseline = result.winner, result.baseline
    assert result.best is not None and winner is not None
    ceiling = result.ceiling_samples_per_s
    doc = result.best.to_dict()
    doc["measured"] = {
        "samples_per_s": round(winner.median, 1),
        "samples_per_s_iqr": [round(v, 1) for v in winner.iqr],
        "steady_samples_per_s": round(winner.steady, 1),
        "baseline_samples_per_s": _round(baseline.median if baseline else None),
        "ceiling_samples_per_s": _round(ceiling),
        "speedup_vs_baseline": _round(result.speedup, 2),
        "of_ceiling": _round(winner.steady / ceiling if ceiling else None, 2),
        "picked": result.best_label,
        "peak_memory_mb": _round(
            winner.peak_memory_bytes / 2**20 if winner.peak_memory_bytes else None
        ),
        "notes": list(result.notes),
    }
    doc["workload"] = context
    doc["machine"] = {
        "usable_cpus": facts.usable_cpus,
        "gpu": facts.gpu.name if facts.gpu else None,
        "torch": facts.torch_version,
        "torchvision": facts.torchvision_version,
        "python": facts.python_version,
        "platform": facts.platform,
    }
    doc["study"] = {
        "name": result.study_name,
        "storage": result.storage,
        "trials": result.counts,
        "interrupted": result.interrupted,
        "written": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    return doc


def table(result: StudyResult) -> str:
    """The summary printed at the end: finalists, baseline and ceiling, speedup, notes."""
    rows = [("", "samples/s", "IQR", "config")]
    for c in sorted(result.confirmed, key=lambda c: -c.median):
        mark = "  <- best" if c.label == result.best_label else ""
        rows.append(
            (c.label, f"{c.median:.1f}", f"{c.iqr[0]:.0f}-{c.iqr[1]:.0f}", c.config.short() + mark)
        )
    if result.ceiling_samples_per_s:
        rows.append(
            (
                "ceiling",
                f"{result.ceiling_samples_per_s:.1f}",
                "",
                "train step on a batch already on the device",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if result.speedup is not None:
        lines.append(f"speedup vs PyTorch defaults: {result.speedup:.2f}x")
    winner = result.winner
    if result.ceiling_samples_per_s and winner is not None:
        lines.append(
            f"best (steady) / ceiling: {winner.steady / result.ceiling_samples_per_s:.2f}"
        )
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def failures_text(result: StudyResult) -> str:
    rows = failure_table(result.failures)
    if not rows:
        return ""
    lines = ["failed trials:"]
    lines += [f"  {kind:<15} {n:>3}  hint: {hint}" for kind, n, hint in rows]
    return "\n".join(lines)


def dashboard_command(storage: str) -> str:
    return f"optuna-dashboard {storage}"


def write(result: StudyResult, facts: MachineFacts, context: dict[str, Any], folder: Path) -> Path:
    """Writes ``best.yaml`` and ``report.md`` into ``folder``; returns the best.yaml path."""
    folder.mkdir(parents=True, exist_ok=True)
    best = folder / "best.yaml"
    header = (
        "# autotune: the fastest input pipeline measured on this machine.\n"
        "# loader: torch.utils.data.DataLoader(dataset, **loader)\n"
        "# or: autotune.build_loader(source_or_dataset, this_file) for the whole pipeline\n"
    )
    best.write_text(
        header + yaml.safe_dump(best_document(result, facts, context), sort_keys=False)
    )
    failures = failures_text(result)
    (folder / "report.md").write_text(
        f"# autotune study `{result.study_name}`\n\n```\n{table(result)}\n```\n\n"
        + (f"```\n{failures}\n```\n\n" if failures else "")
        + f"Trials: {result.counts}\n\nDashboard: `{dashboard_command(result.storage)}`\n"
    )
    return best

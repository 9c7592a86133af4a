"""What a study hands back: ``best.yaml``, ``report.md`` with its plots, the dashboard note,
and the table it prints.

``report.md`` is rendered from the stored study alone (its user attributes and trials), so
``python -m autotune mode=report`` rebuilds the same report later.
"""

from __future__ import annotations

import datetime
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import TrialState

from autotune.errors import UsageError
from autotune.machine import MachineFacts
from autotune.report import plots
from autotune.runtime.trial import HINTS
from autotune.schema import AutotuneConfig
from autotune.tuner.study import StudyResult, failure_table

UNIT = "samples/s"
Row = dict[str, Any]  # a Confirmed.to_dict(): label, config, samples_per_s, steady, iqr


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True)
class Summary:
    """The figures of the summary table, from a run's result or from storage alone."""

    confirmed: tuple[Row, ...]
    best_label: str | None
    best_decoder: str | None
    ceiling: float | None
    cpu_work_bound: float | dict[str, float] | None
    notes: tuple[str, ...]
    complete_trials: int

    @classmethod
    def of_result(cls, result: StudyResult) -> Summary:
        return cls(
            tuple(c.to_dict() for c in result.confirmed),
            result.best_label if result.best is not None else None,
            result.best.decoder if result.best is not None else None,
            result.ceiling_samples_per_s,
            result.cpu_work_bound_samples_per_s,
            result.notes,
            result.counts.get("complete", 0),
        )

    @classmethod
    def of_study(cls, study: optuna.Study) -> Summary:
        attrs = study.user_attrs
        confirmed = tuple(attrs.get("confirmation", ()))
        best = attrs.get("winner")
        if best is None and confirmed:  # stored before the winner was: the fastest
            best = max(confirmed, key=lambda r: r["samples_per_s"])["label"]
        trial = _trial_of(study, best) if best else None
        decoder = trial.user_attrs.get("pipeline", {}).get("decoder") if trial else None
        return cls(
            confirmed,
            best,
            decoder,
            attrs.get("ceiling_samples_per_s"),
            attrs.get("cpu_work_bound_samples_per_s"),
            tuple(attrs.get("notes", ())),
            len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))),
        )

    def row(self, label: str | None) -> Row | None:
        return next((r for r in self.confirmed if r["label"] == label), None)

    @property
    def winner(self) -> Row | None:
        return self.row(self.best_label)

    @property
    def baseline(self) -> Row | None:
        return self.row("baseline")

    @property
    def speedup(self) -> float | None:
        winner, base = self.winner, self.baseline
        if not winner or not base or not base["samples_per_s"]:
            return None
        return winner["samples_per_s"] / base["samples_per_s"]

    def bounds(self) -> list[tuple[str, float]]:
        """The CPU-work bound(s), labelled: one, or one per decoder."""
        bound = self.cpu_work_bound
        if isinstance(bound, dict):
            return [(f"CPU-work bound ({d})", v) for d, v in sorted(bound.items())]
        return [("CPU-work bound", bound)] if bound else []

    def ratios(self) -> list[str]:
        """Speedup, how far from each limit, and the winner's spread."""
        winner, lines = self.winner, []
        if self.speedup is not None:
            lines.append(f"speedup vs PyTorch defaults: {self.speedup:.2f}x")
        if winner is None:
            return lines
        if self.ceiling:
            share = winner["steady"] / self.ceiling
            if share > 1.05:  # faster than the step alone: the ceiling run was disturbed
                verdict = "above 1: the ceiling measurement is suspect, re-run to check it"
            elif share >= 0.9:
                verdict = "the train step (compute) limits"
            else:
                verdict = "the input pipeline limits"
            lines.append(f"best (steady) / ceiling: {share:.2f}: {verdict}")
        bound = self.cpu_work_bound
        if isinstance(bound, dict):
            bound = bound.get(self.best_decoder or "")
        if bound:
            lines.append(f"best (steady) / CPU-work bound: {winner['steady'] / bound:.2f}")
        low, high = winner["iqr"]
        if winner["samples_per_s"]:
            spread = (high - low) / winner["samples_per_s"]
            lines.append(
                f"spread of the best: IQR {low:.0f}-{high:.0f} {UNIT} ({spread:.0%} of the median)"
            )
        return lines

    def rows(self) -> list[tuple[str, str, str, str, bool]]:
        """(label, samples/s, IQR, config, is best): finalists fastest first, then limits."""
        out = []
        for r in sorted(self.confirmed, key=lambda r: -r["samples_per_s"]):
            iqr = f"{r['iqr'][0]:.0f}-{r['iqr'][1]:.0f}"
            best = r["label"] == self.best_label
            out.append((r["label"], f"{r['samples_per_s']:.1f}", iqr, r["config"], best))
        if self.ceiling:
            on_device = "train step on a batch already on the device"
            out.append(("ceiling", f"{self.ceiling:.1f}", "", on_device, False))
        for label, value in self.bounds():
            out.append((label, f"{value:.1f}", "", "decode + augment on all usable CPUs", False))
        return out


def _trial_of(study: optuna.Study, label: str) -> optuna.trial.FrozenTrial | None:
    trials = study.get_trials(deepcopy=False)
    if label == "baseline":
        return next((t for t in trials if t.user_attrs.get("role") == "baseline"), None)
    number = label.removeprefix("trial ")
    return next((t for t in trials if str(t.number) == number), None)


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
    doc["machine"] = _machine(facts)
    doc["study"] = {
        "name": result.study_name,
        "storage": result.storage,
        "trials": result.counts,
        "interrupted": result.interrupted,
        "written": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    return doc


def _machine(facts: MachineFacts) -> dict[str, Any]:
    return {
        "usable_cpus": facts.usable_cpus,
        "gpu": facts.gpu.name if facts.gpu else None,
        "torch": facts.torch_version,
        "torchvision": facts.torchvision_version,
        "python": facts.python_version,
        "platform": facts.platform,
    }


def _text_table(summary: Summary) -> list[str]:
    rows = [("", UNIT, "IQR", "config")]
    rows += [(a, b, c, d + ("  <- best" if best else "")) for a, b, c, d, best in summary.rows()]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def table(result: StudyResult) -> str:
    """The summary printed at the end: finalists, baseline and limits, ratios, notes."""
    summary = Summary.of_result(result)
    lines = _text_table(summary) + summary.ratios()
    lines += [f"note: {n}" for n in summary.notes]
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
    """Writes ``best.yaml``, ``report.md`` and its plots into ``folder``, and the summary as the
    study's dashboard note; returns the best.yaml path."""
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
    study = optuna.load_study(study_name=result.study_name, storage=result.storage)
    keep_context(study, facts, context)
    write_report(result.storage, result.study_name, folder)
    return best


def keep_context(study: optuna.Study, facts: MachineFacts, context: dict[str, Any]) -> None:
    """Stores the workload and machine on the study, so its report can be rebuilt."""
    study.set_user_attr("workload", {k: v for k, v in context.items() if k != "skipped"})
    study.set_user_attr("machine", _machine(facts))


def write_report(storage: str, study_name: str, folder: Path) -> Path:
    """Writes ``report.md`` and its plots from the stored study alone; saves the summary as
    the study's note in optuna-dashboard. Returns the report.md path."""
    study = optuna.load_study(study_name=study_name, storage=storage)
    folder.mkdir(parents=True, exist_ok=True)
    summary = Summary.of_study(study)
    baseline = summary.baseline
    figures = plots.draw(
        study,
        folder,
        plots.References(
            baseline=baseline["samples_per_s"] if baseline else None,
            ceiling=summary.ceiling,
            cpu_work_bound=summary.cpu_work_bound,
        ),
    )
    path = folder / "report.md"
    path.write_text(render(study, storage, summary, figures))
    _save_note(study, f"{_summary_markdown(summary)}\nReport: `{path}`\n")
    return path


def _save_note(study: optuna.Study, body: str) -> None:
    from optuna_dashboard import save_note

    save_note(study, body)


def render(
    study: optuna.Study, storage: str, summary: Summary, figures: list[plots.Figure]
) -> str:
    """The whole report.md (no timestamps: a rebuild from the same storage is identical)."""
    trials = study.get_trials(deepcopy=False)
    attrs = study.user_attrs
    parts = [f"# autotune study `{study.study_name}`\n", _workload_line(attrs)]
    parts += ["## Summary\n", _summary_markdown(summary)]
    parts += ["## Trials\n", _counts_line(trials), _failures_markdown(trials)]
    parts += ["## Settings that mattered\n", _importances_markdown(study, summary)]
    parts.append("## Plots\n")
    for fig in figures:
        parts.append(
            f"### {fig.title}\n\n![{fig.title}]({fig.file})\n\n{fig.caption}\n"
            if fig.drawn
            else f"### {fig.title}\n\n{fig.caption}\n"
        )
    parts.append(f"## Look further\n\n```bash\n{dashboard_command(storage)}\n```\n")
    return "\n".join(p for p in parts if p)


def _workload_line(attrs: dict[str, Any]) -> str:
    work, machine = attrs.get("workload"), attrs.get("machine")
    if not work or not machine:
        return ""
    crop = (work.get("recipe") or {}).get("crop_size")
    return (
        f"Dataset `{work.get('dataset')}` ({work.get('images')} images), model "
        f"`{work.get('model')}`, crop {crop}, device `{work.get('device')}`; "
        f"{machine.get('usable_cpus')} usable CPUs, GPU {machine.get('gpu') or 'none'}, "
        f"torch {machine.get('torch')}.\n"
    )


def _summary_markdown(summary: Summary) -> str:
    lines = []
    if not summary.confirmed:
        lines.append(
            "The run stopped before naming a best config: see the trials below.\n"
            if summary.complete_trials
            else "No trial finished: there is no best config.\n"
        )
    rows = summary.rows()
    if rows:
        lines += [f"| | {UNIT} | IQR | config |", "|---|---:|---|---|"]
    for label, rate, iqr, config, best in rows:
        shown = f"`{config}`" if label.startswith(("trial", "baseline")) else config
        name = f"**{label} (best)**" if best else label
        if label == "baseline":
            name += ": PyTorch defaults"
        lines.append(f"| {name} | {rate} | {iqr} | {shown} |")
    lines.append("")
    lines += [f"- {line}" for line in summary.ratios()]
    lines += [f"- note: {n}" for n in summary.notes]
    return "\n".join(lines).strip() + "\n"


def _counts_line(trials: list[optuna.trial.FrozenTrial]) -> str:
    counts = Counter(t.state for t in trials)
    skipped = sum(1 for t in trials if "skipped" in t.user_attrs)
    line = (
        f"{len(trials)} trials: {counts[TrialState.COMPLETE]} complete, "
        f"{counts[TrialState.PRUNED]} pruned, {counts[TrialState.FAIL]} failed"
    )
    if skipped:
        line += f" ({skipped} of the pruned skipped before running: they would not fit)"
    return line + ".\n"


def _failures_markdown(trials: list[optuna.trial.FrozenTrial]) -> str:
    by_kind: dict[str, list[optuna.trial.FrozenTrial]] = {}
    for t in trials:
        if t.state == TrialState.FAIL:
            kind = t.user_attrs.get("failure", {}).get("kind", "error")
            by_kind.setdefault(kind, []).append(t)
    skipped = [t for t in trials if "skipped" in t.user_attrs]
    if not by_kind and not skipped:
        return "No trial failed.\n"
    lines = ["| failure | trials | example | hint |", "|---|---|---|---|"]
    for kind, failed in sorted(by_kind.items()):
        numbers = ", ".join(str(t.number) for t in failed)
        message = _cell(failed[0].user_attrs.get("failure", {}).get("message", ""))
        hint = _cell(failed[0].user_attrs.get("failure", {}).get("hint", HINTS["error"]))
        lines.append(f"| {kind} | {len(failed)}: {numbers} | {message} | {hint} |")
    if skipped:
        numbers = ", ".join(str(t.number) for t in skipped)
        reason = _cell(skipped[0].user_attrs["skipped"])
        lines.append(f"| skipped (would not fit) | {len(skipped)}: {numbers} | {reason} | |")
    return "\n".join(lines) + "\n"


def _cell(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _importances_markdown(study: optuna.Study, summary: Summary) -> str:
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 2:
        return "Not computed: importances need at least two complete trials.\n"
    with warnings.catch_warnings():  # "experimental", "few trials": the text says so
        warnings.simplefilter("ignore")
        importances = optuna.importance.get_param_importances(
            study, evaluator=plots.importance_evaluator()
        )
    best = _trial_of(study, summary.best_label) if summary.best_label else None
    lines = ["| setting | importance | best's value | values tried |", "|---|---:|---|---|"]
    # ties (often all zeros) in a fixed order, so a rebuilt report is identical
    for name, share in sorted(importances.items(), key=lambda kv: (-round(kv[1], 2), kv[0])):
        tried = sorted({t.params[name] for t in complete if name in t.params}, key=str)
        value = best.params.get(name, "(not used)") if best else ""
        lines.append(f"| `{name}` | {share:.2f} | {value} | {', '.join(map(str, tried))} |")
    lines.append(
        f"\nOptuna's fANOVA importances over {len(complete)} complete trials: the share of the "
        "variance of samples/s that each setting explains (rough with few trials; settings "
        "that only some trials have, such as prefetch_factor, are left out).\n"
    )
    return "\n".join(lines)


def rebuild(config: AutotuneConfig) -> int:
    """``mode=report``: rewrites report.md and its plots from the stored study alone."""
    storage, name = config.study.storage, config.study.name
    if storage.startswith("sqlite:///") and not Path(storage.removeprefix("sqlite:///")).exists():
        raise UsageError(f"no study storage at {storage}: run python -m autotune first")
    names = optuna.get_all_study_names(storage)
    if name not in names:
        have = ", ".join(sorted(names)) or "none"
        raise UsageError(
            f"no study {name!r} in {storage} (studies there: {have}): "
            "pick one with study.name=NAME"
        )
    path = write_report(storage, name, Path(config.studies_dir) / name)
    print(f"report:    {path}", flush=True)
    print(f"dashboard: {dashboard_command(storage)}", flush=True)
    return 0

"""``report.md``: the summary, the trials, the settings that mattered and the plots, rendered
from the stored study alone (its user attributes and trials), so ``python -m autotune
mode=report`` rebuilds the same report later.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import UsageError
from autotune.report import dashboard, importances, plots
from autotune.report.summary import UNIT, WORTH_HEADER, Summary
from autotune.runtime.failures import FailureKind
from autotune.schema import AutotuneConfig
from autotune.tuner import rate_model, store, study_trials
from autotune.tuner.result import StudyResult
from autotune.tuner.storage import sqlite_file
from autotune.tuner.store import StudyKey, TrialKey


def write_report(storage: str, study_name: str, folder: Path) -> Path:
    """Writes ``report.md`` and its plots from the stored study alone; saves the summary as
    the study's note in optuna-dashboard. Returns the report.md path."""
    study = optuna.load_study(study_name=study_name, storage=storage)
    folder.mkdir(parents=True, exist_ok=True)
    summary = Summary.of_study(study, storage)
    baseline = summary.result.baseline
    figures = plots.draw(
        study,
        folder,
        plots.References(
            baseline=baseline["samples_per_s"] if baseline else None,
            ceiling=summary.result.ceiling,
            cpu_work_bound=summary.result.cpu_work_bound,
        ),
    )
    path = folder / "report.md"
    found = importances.compute(study)
    mattered = importances.markdown(study, summary.result.best_params, found)
    path.write_text(render(study, storage, summary, figures, mattered))
    # one importance answer: the report's, stored where the dashboard lists it and in its note
    store.set_study_attr(study, StudyKey.IMPORTANCES, found)
    note = (
        f"{_summary_markdown(summary)}\n### Settings that mattered across the search\n\n"
        f"{mattered}\nReport: `{path}`\n"
    )
    dashboard.save_note(study, note)
    return path


def render(
    study: optuna.Study,
    storage: str,
    summary: Summary,
    figures: list[plots.Figure],
    mattered: str,
) -> str:
    """The whole report.md (no timestamps: a rebuild from the same storage is identical)."""
    trials = study.get_trials(deepcopy=False)
    parts = [f"# autotune study `{study.study_name}`\n", _workload_line(summary.result)]
    parts += ["## Summary\n", _summary_markdown(summary)]
    parts += ["## Trials\n", _counts_line(trials), _failures_markdown(trials)]
    parts.append(_model_markdown(study, trials))
    parts += ["## Settings that mattered\n", mattered]
    parts.append("## Plots\n")
    for fig in figures:
        parts.append(
            f"### {fig.title}\n\n![{fig.title}]({fig.file})\n\n{fig.caption}\n"
            if fig.drawn
            else f"### {fig.title}\n\n{fig.caption}\n"
        )
    parts.append(f"## Look further\n\n```bash\n{dashboard.command(storage)}\n```\n")
    return "\n".join(p for p in parts if p)


def _workload_line(result: StudyResult) -> str:
    work, machine = result.workload, result.machine
    if not work or not machine:
        return ""
    crop = (work.recipe or {}).get("crop_size")
    ranks = work.ranks or 1
    together = (
        f"; {ranks} ranks (DDP) measured together, every setting below per rank"
        if ranks > 1
        else ""
    )
    return (
        f"Dataset `{work.dataset}` ({work.images} images), model "
        f"`{work.model}`, crop {crop}, device `{work.device}`; "
        f"{machine.usable_cpus} usable CPUs, GPU {machine.gpu or 'none'}, "
        f"torch {machine.torch}{together}.\n"
    )


def _summary_markdown(summary: Summary) -> str:
    lines = []
    result = summary.result
    if not result.confirmed and result.online_kept is not None:
        rate = f" at {result.online_kept_rate:.1f} {UNIT}" if result.online_kept_rate else ""
        how = (
            "the run's own settings first, then each setting the sampler proposed, timed "
            "once on its share of the run (no confirmation rounds; twice, pooled, where a "
            "setting read faster than the run's own within their noise)"
            if any(result.counts.values())
            else "the setting the run started at (its own, or an offline study's pick), "
            "nothing else tried"
        )
        lines.append(
            f"`autotune.DataLoader` kept `{result.online_kept.short()}`{rate}, measured on "
            f"the training run itself: {how}. The next run of the job starts there.\n"
        )
    elif not result.confirmed:
        lines.append(
            "The run stopped before naming a best config: see the trials below.\n"
            if result.complete_trials
            else "No trial finished: there is no best config.\n"
        )
    rows = summary.rows()
    if rows:
        lines += [f"| rank | | {UNIT} | IQR | config |", "|---|---|---:|---|---|"]
    for rank, label, rate, iqr, config, marks in rows:
        shown = f"`{config}`" if label.startswith(("trial", "baseline")) else config
        name = f"**{label} ({marks})**" if marks else label
        if label == "baseline":  # a study of an older autotune timed its own decode there
            name += (
                ": your pipeline, PyTorch's defaults"
                if summary.result.baseline_text
                else ": PyTorch defaults"
            )
        lines.append(f"| {rank} | {name} | {rate} | {iqr} | {shown} |")
    if any(rank.startswith("=") for rank, *_ in rows):
        lines.append("\n=N: a tie, their IQRs overlap: not ranked on this machine.")
    if any("(spread" in iqr for _, _, _, iqr, _, _ in rows):
        lines.append(
            "\nIQR: of every sub-window of every round; spread: (max - min) / median of the "
            "sub-windows each run ended with (window.target_spread), the median run's."
        )
    lines.append("")
    lines += [f"- {line}" for line in summary.ratios()]
    lines += [f"- note: {n}" for n in summary.result.notes]
    lines.append(_worth_markdown(summary))
    return "\n".join(lines).strip() + "\n"


def _worth_markdown(summary: Summary) -> str:
    """The table "what each setting is worth": the winner with one setting changed."""
    rows, lines = summary.worth_rows(), []
    if rows:
        lines += [
            "\n### What each setting is worth\n",
            "The winner with one setting put back to PyTorch's default (the decoder: swapped "
            "for each other decoder), measured interleaved with the winner in the same "
            "rounds. Below 1.00: the winner's setting is worth that much here.\n",
            "| " + " | ".join(WORTH_HEADER) + " |",
            "|---|---|---|---:|---:|---|---|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
    lines += [f"- {line}" for line in summary.worth_lines()]
    return "\n".join(lines)


def _counts_line(trials: list[optuna.trial.FrozenTrial]) -> str:
    own = study_trials.measured(trials)
    counts = Counter(t.state for t in own)
    losing = sum(1 for t in own if store.is_predicted_to_lose(t))
    too_big = sum(1 for t in own if store.is_skipped(t)) - losing
    line = (
        f"{len(own)} trials: {counts[TrialState.COMPLETE]} complete, "
        f"{counts[TrialState.PRUNED]} pruned, {counts[TrialState.FAIL]} failed"
    )
    if too_big:
        line += f" ({too_big} of the pruned skipped before running: they would not fit)"
    if losing:
        line += (
            f" ({losing} of the pruned skipped before running: the rate model predicted them "
            "to lose by more than its worst error)"
        )
    repeats = sum(store.is_repeat(t) for t in trials)
    if repeats:
        line += (
            f"; {repeats} more repeated a config already measured and took its outcome, not "
            "measured again"
        )
    queued = sum(t.state == TrialState.WAITING for t in trials)
    if queued:
        line += f"; {queued} queued, which a run with more study.n_trials measures first"
    return line + ".\n"


def _failures_markdown(trials: list[optuna.trial.FrozenTrial]) -> str:
    by_kind: dict[str, list[optuna.trial.FrozenTrial]] = {}
    trials = study_trials.measured(trials)
    for t in trials:
        if t.state == TrialState.FAIL:
            kind = store.failure_kind(t)
            by_kind.setdefault(kind, []).append(t)
    skipped = [t for t in trials if store.is_skipped(t)]
    if not by_kind and not skipped:
        return "No trial failed.\n"
    lines = ["| failure | trials | example | hint |", "|---|---|---|---|"]
    for kind, failed in sorted(by_kind.items()):
        numbers = ", ".join(str(t.number) for t in failed)
        failure = store.trial_attr(failed[0], TrialKey.FAILURE, {})
        message = _cell(failure.get("message", ""))
        hint = _cell(failure.get("hint", FailureKind.ERROR.hint))
        lines.append(f"| {kind} | {len(failed)}: {numbers} | {message} | {hint} |")
    for why, these in (
        ("would not fit", [t for t in skipped if not store.is_predicted_to_lose(t)]),
        ("predicted to lose", [t for t in skipped if store.is_predicted_to_lose(t)]),
    ):
        if these:
            numbers = ", ".join(str(t.number) for t in these)
            reason = _cell(store.trial_attr(these[0], TrialKey.SKIPPED))
            lines.append(f"| skipped ({why}) | {len(these)}: {numbers} | {reason} | |")
    return "\n".join(lines) + "\n"


def _model_markdown(study: optuna.Study, trials: list[FrozenTrial]) -> str:
    """Each measured trial's steady rate beside the rate model's, predicted before it ran."""
    predicted = rate_model.predicted_trials(trials)
    error = store.study_attr(study, StudyKey.MODEL_ERROR)
    if not predicted or not error:
        return ""
    lines = [
        "### The rate model\n",
        "Each trial's steady rate as the model predicted it before the trial ran: the least of "
        "the ceiling, the main process, the workers and the CPUs, from the ceiling and the "
        "stage profile, scaled by the trials before it. "
        f"{rate_model.ModelError(**error).text().capitalize()}.\n",
        f"| trial | config | {UNIT} | predicted | binds |",
        "|---:|---|---:|---:|---|",
    ]
    for t in predicted:
        config = store.trial_attr(t, TrialKey.CONFIG)
        lines.append(
            f"| {t.number} | `{config}` | {store.trial_attr(t, TrialKey.STEADY)} | "
            f"{store.trial_attr(t, TrialKey.PREDICTED)} | "
            f"{store.trial_attr(t, TrialKey.PREDICTED_BINDS)} |"
        )
    return "\n".join(lines) + "\n"


def _cell(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def rebuild(conf: AutotuneConfig) -> int:
    """``mode=report``: rewrites report.md and its plots from the stored study alone."""
    storage, name = conf.study.storage, conf.study.name
    database = sqlite_file(storage)
    if database is not None and not database.exists():
        raise UsageError(f"no study storage at {storage}: run python -m autotune first")
    names = optuna.get_all_study_names(storage)
    if name not in names:
        have = ", ".join(sorted(names)) or "none"
        raise UsageError(
            f"no study {name!r} in {storage} (studies there: {have}): "
            "pick one with study.name=NAME"
        )
    path = write_report(storage, name, Path(conf.studies_dir) / name)
    print(f"report:    {path}", flush=True)
    print(f"dashboard: {dashboard.command(storage)}", flush=True)
    return 0

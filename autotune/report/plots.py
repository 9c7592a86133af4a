"""The study's figures, as PNGs beside ``report.md``: Optuna's optimization history and
parameter importances, throughput against ``num_workers`` per decoder, and data wait against
throughput.

Drawn with matplotlib on the Agg backend (no display needed). In the throughput plots, pruned
trials sit at the last rate they reported (over their sub-windows until they were stopped),
hollow; failed trials sit at 0 samples/s, as crosses; trials skipped because they could not
fit in memory were never measured and are left out.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import optuna
from matplotlib.ticker import MaxNLocator
from optuna.trial import FrozenTrial, TrialState
from optuna.visualization.matplotlib import plot_optimization_history, plot_param_importances

from autotune.tuner import importance, store
from autotune.tuner.store import TrialKey

UNIT = "samples/s"
DPI = 110
SIZE = (8.0, 5.0)  # inches: 880 x 550 pixels at DPI
OFF_SCALE = 2.5  # a reference line this many times above the best trial is not drawn


@dataclass(frozen=True)
class Figure:
    """One PNG of the report, or why it could not be drawn."""

    file: str  # name beside report.md
    title: str
    caption: str  # what it shows, or why it was not drawn
    drawn: bool


@dataclass(frozen=True)
class References:
    """Horizontal reference lines, samples/s; None where not measured."""

    baseline: float | None = None  # the pipeline as it is under PyTorch's defaults
    ceiling: float | None = None  # the train step fed a batch already on the device
    cpu_work_bound: float | dict[str, float] | None = None  # one, or one per decoder


@dataclass(frozen=True)
class _Point:
    number: int
    decoder: str
    num_workers: int
    rate: float  # samples/s; 0 for a failed trial
    state: str  # complete | pruned | failed
    data_wait: float | None  # fraction of timed wall time


def draw(study: optuna.Study, folder: Path, references: References) -> list[Figure]:
    """Writes every figure it can into ``folder``; returns all four, drawn or not."""
    plt.switch_backend("Agg")  # files only: no display, no GUI event loop
    trials = study.get_trials(deepcopy=False)
    points = _points(trials)
    figures = []
    for file, title, draw_one in (
        ("optimization_history.png", "Optimization history", _history),
        ("param_importances.png", "Settings that mattered", _importances),
        ("throughput_vs_workers.png", "Throughput vs num_workers", _throughput_vs_workers),
        ("data_wait_vs_throughput.png", "Data wait vs throughput", _data_wait),
    ):
        path = folder / file
        path.unlink(missing_ok=True)  # a figure not drawn this time must not linger
        with _style():
            caption, fig = draw_one(study, points, references)
            if fig is not None:
                fig.savefig(path, dpi=DPI, bbox_inches="tight")
                plt.close(fig)
        figures.append(Figure(file, title, caption, fig is not None))
    return figures


@contextmanager
def _style() -> Iterator[None]:
    """Optuna's plot functions switch the global style; keep that inside each figure. Their
    warnings ("experimental", "few trials") are not the user's to act on: the captions say."""
    with matplotlib.rc_context(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        matplotlib.style.use("ggplot")
        yield


def _points(trials: list[FrozenTrial]) -> list[_Point]:
    points = []
    for t in trials:
        decoder = store.setting_of(t, "decoder")
        workers = store.setting_of(t, "num_workers")
        if decoder is None or workers is None or store.is_skipped(t) or store.is_repeat(t):
            continue
        if t.state == TrialState.COMPLETE and t.value is not None:
            rate, state = t.value, "complete"
        elif t.state == TrialState.PRUNED and t.intermediate_values:
            rate, state = t.intermediate_values[max(t.intermediate_values)], "pruned"
        elif t.state == TrialState.FAIL:
            rate, state = 0.0, "failed"
        else:
            continue
        wait = store.trial_attr(t, TrialKey.DATA_WAIT)
        points.append(_Point(t.number, decoder, int(workers), rate, state, wait))
    return points


def _colours(points: list[_Point]) -> dict[str, Any]:
    decoders = sorted({p.decoder for p in points})
    palette = matplotlib.colormaps["tab10"]
    return {d: palette(i % 10) for i, d in enumerate(decoders)}


def _reference_lines(ax: Any, references: References, colours: dict[str, Any], top: float) -> None:
    """Baseline, ceiling and CPU-work bound as horizontal lines. One far above the data
    (``top``: the highest measured rate) is named in the legend only, so it does not squash
    the trials into the bottom of the plot."""
    lines: list[tuple[float, str, dict[str, Any]]] = []
    if references.baseline:
        style = {"color": "0.35", "linestyle": ":"}
        lines.append((references.baseline, "baseline, re-measured", style))
    if references.ceiling:
        style = {"color": "black", "linestyle": "--"}
        lines.append((references.ceiling, "ceiling: train step on a ready batch", style))
    bound = references.cpu_work_bound
    bounds = bound if isinstance(bound, dict) else {"": bound} if bound else {}
    for decoder, value in bounds.items():
        style = {"color": colours.get(decoder, "0.5"), "linestyle": "-."}
        lines.append((value, f"CPU-work bound{f' ({decoder})' if decoder else ''}", style))
    for value, name, style in lines:
        if value <= OFF_SCALE * top:
            ax.axhline(value, label=f"{name} ({value:.0f} {UNIT})", **style)
        else:
            ax.plot([], [], label=f"{name} ({value:.0f} {UNIT}, off the scale)", **style)


def _history(study: optuna.Study, points: list[_Point], references: References) -> tuple[str, Any]:
    if not any(p.state == "complete" for p in points):
        return "Not drawn: no trial completed", None
    ax = plot_optimization_history(study, target_name=UNIT)
    ax.figure.set_size_inches(*SIZE)
    ax.set_title("Optimization history: each complete trial and the best so far")
    ax.set_xlabel("trial number")
    ax.set_ylabel(f"throughput, {UNIT}")
    top = max(p.rate for p in points)
    _reference_lines(ax, References(baseline=references.baseline), {}, top)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = ax.get_legend_handles_labels()
    names = {UNIT: "complete trial", "Best Value": "best so far"}
    ax.legend(handles, [names.get(label, label) for label in labels], loc="best")
    return (
        f"Each complete trial's {UNIT} (the objective) in the order run, the best so far as a "
        "line, the baseline dotted. Pruned and failed trials are not shown here.",
        ax.figure,
    )


def _importances(
    study: optuna.Study, points: list[_Point], references: References
) -> tuple[str, Any]:
    complete = [p for p in points if p.state == "complete"]
    if len(complete) < 2:
        return "Not drawn: importances need at least two complete trials", None
    ax = plot_param_importances(study, evaluator=importance.evaluator(), target_name=UNIT)
    ax.figure.set_size_inches(*SIZE)
    ax.set_title("", loc="left")  # Optuna's own title, replaced by one that says more
    ax.set_title(f"Which settings moved {UNIT} (Optuna's fANOVA importance)")
    ax.set_xlabel(f"importance for {UNIT} (shares, summing to 1)")
    ax.set_ylabel("setting")
    if legend := ax.get_legend():
        legend.remove()  # one objective: its name is on the axis already
    return (
        f"Share of the variance of {UNIT} across trials that each setting explains "
        f"(over {len(complete)} complete trials; rough with few trials).",
        ax.figure,
    )


def _throughput_vs_workers(
    study: optuna.Study, points: list[_Point], references: References
) -> tuple[str, Any]:
    if not any(p.state != "failed" for p in points):
        return "Not drawn: no trial was measured", None
    colours = _colours(points)
    fig, ax = plt.subplots(figsize=SIZE)
    decoders = list(colours)
    for i, decoder in enumerate(decoders):
        offset = (i - (len(decoders) - 1) / 2) * 0.08  # side by side, not on top of each other
        mine = [p for p in points if p.decoder == decoder]
        complete = [p for p in mine if p.state == "complete"]
        best_per_count: dict[int, float] = {}
        for p in complete:
            best_per_count[p.num_workers] = max(p.rate, best_per_count.get(p.num_workers, 0.0))
        counts = sorted(best_per_count)
        ax.plot(
            [c + offset for c in counts],
            [best_per_count[c] for c in counts],
            color=colours[decoder],
            marker="o",
            label=f"{decoder}: complete (line: best per count)",
        )
        ax.scatter(
            [p.num_workers + offset for p in complete],
            [p.rate for p in complete],
            color=colours[decoder],
            zorder=3,
        )
        for state, style in (
            ("pruned", {"facecolors": "none", "edgecolors": colours[decoder]}),
            ("failed", {"color": colours[decoder], "marker": "x", "s": 60}),
        ):
            some = [p for p in mine if p.state == state]
            if some:
                ax.scatter(
                    [p.num_workers + offset for p in some],
                    [p.rate for p in some],
                    label=f"{decoder}: {state}",
                    zorder=3,
                    **style,
                )
    _reference_lines(ax, references, colours, max(p.rate for p in points))
    ax.set_xticks(sorted({p.num_workers for p in points}))
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput vs num_workers, by decoder")
    ax.set_xlabel("num_workers (DataLoader worker processes)")
    ax.set_ylabel(f"throughput, {UNIT}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return (
        f"{UNIT} of every measured trial by worker count, one colour per decoder. Pruned "
        "trials (hollow) at the rate they had reached when stopped; failed trials "
        "(crosses) at 0.",
        fig,
    )


def _data_wait(
    study: optuna.Study, points: list[_Point], references: References
) -> tuple[str, Any]:
    measured = [p for p in points if p.state == "complete" and p.data_wait is not None]
    if not measured:
        return "Not drawn: no trial completed", None
    colours = _colours(measured)
    fig, ax = plt.subplots(figsize=SIZE)
    for decoder, colour in colours.items():
        mine = [p for p in measured if p.decoder == decoder]
        ax.scatter(
            [100 * (p.data_wait or 0.0) for p in mine],
            [p.rate for p in mine],
            color=colour,
            label=decoder,
            zorder=3,
        )
        for p in mine:
            ax.annotate(
                f"{p.number}",
                (100 * (p.data_wait or 0.0), p.rate),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize="x-small",
            )
    best = max(measured, key=lambda p: p.rate)
    right_half = (best.data_wait or 0.0) > 0.5  # label towards the middle, inside the axes
    ax.annotate(
        f"fastest in the search: trial {best.number}",
        (100 * (best.data_wait or 0.0), best.rate),
        textcoords="offset points",
        xytext=(-8 if right_half else 8, -14),
        ha="right" if right_half else "left",
        fontsize="small",
        fontweight="bold",
    )
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 1.1 * best.rate)  # headroom for the labels
    ax.set_title("Data wait vs throughput (labels: trial numbers)")
    ax.set_xlabel("data wait, % of timed wall time spent waiting for the next batch")
    ax.set_ylabel(f"throughput, {UNIT}")
    ax.legend(title="decoder", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return (
        "Each complete trial: the share of the timed window the train step waited for data, "
        f"against its {UNIT}. Near 0 % the model step binds; high, the input pipeline does.",
        fig,
    )

"""The ``online`` benchmark's results: each arm's medians over the rounds, the ratios it is
judged by, and its results.md."""

from __future__ import annotations

import statistics
from typing import Any

UNTOUCHED, FIRST, SECOND, OFFLINE = (
    "untouched",
    "online, first run",
    "online, second run",
    "offline pick",
)
ARMS = (UNTOUCHED, FIRST, SECOND, OFFLINE)
LAST = 5  # the settled rate: the median of the last epochs


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def _round_ratios(round_: dict[str, dict[str, float]], study_s: float) -> dict[str, float | None]:
    """The ratios of one round's four runs, each arm's wall time, first and last epochs."""
    untouched, first = round_[UNTOUCHED], round_[FIRST]
    second, offline = round_[SECOND], round_[OFFLINE]
    gain = untouched["wall_s"] - offline["wall_s"]
    return {
        "first_run_vs_offline_pick": offline["wall_s"] / first["wall_s"],
        "share_of_offline_gain": (untouched["wall_s"] - first["wall_s"]) / gain
        if gain > 0
        else None,
        "last_epochs_vs_offline_pick": offline["last_epochs_s"] / first["last_epochs_s"],
        "second_first_epoch_vs_first_last": first["last_epochs_s"] / second["first_epoch_s"],
        # a first epoch starts the workers cold, the offline pick's too: the same start
        "second_first_epoch_vs_offline_first": offline["first_epoch_s"] / second["first_epoch_s"],
        # the row above on torch's loader with the pick: what a fresh process's first epoch
        # costs (workers started, the model's first steps) with nothing to tune
        "offline_first_epoch_vs_its_last": offline["last_epochs_s"] / offline["first_epoch_s"],
        "first_run_vs_untouched": untouched["wall_s"] / first["wall_s"],
        "offline_with_its_study_vs_untouched": untouched["wall_s"] / (offline["wall_s"] + study_s),
    }


def _timed(run: dict[str, Any]) -> dict[str, float]:
    return {
        "wall_s": run["wall_s"],
        "first_epoch_s": run["epochs_s"][0],
        "last_epochs_s": statistics.median(run["epochs_s"][-LAST:]),
    }


def results(
    runs: dict[str, list[dict[str, Any]]], *, study_s: float, epochs: int, rounds: int
) -> dict[str, Any]:
    """Each arm's medians over the rounds, and the ratios the scenario is judged by: each
    the median of its rounds' own. A round's four runs ran back to back, so a machine slower
    for a while slows one round's arms alike; arms' medians may come from different rounds."""
    arms = {
        arm: {
            "wall_s": _median([r["wall_s"] for r in rows]),
            "wall_range_s": [min(r["wall_s"] for r in rows), max(r["wall_s"] for r in rows)],
            "first_epoch_s": _median([_timed(r)["first_epoch_s"] for r in rows]),
            "last_epochs_s": _median([_timed(r)["last_epochs_s"] for r in rows]),
            "kept": [r.get("kept") for r in rows],
            "tried": [r.get("tried") for r in rows],
            "switches": [r.get("switches") for r in rows],
            "rechecks": [r.get("rechecks") for r in rows],
        }
        for arm, rows in runs.items()
    }
    each_round = [
        _round_ratios({arm: _timed(runs[arm][i]) for arm in ARMS}, study_s)
        for i in range(min(len(rows) for rows in runs.values()))
    ]
    ratios = {}
    for key in each_round[0]:
        measured = [r[key] for r in each_round if r[key] is not None]
        ratios[key] = round(statistics.median(measured), 3) if measured else None
    return {
        "epochs": epochs,
        "rounds": rounds,
        "offline_study_s": round(study_s, 1),
        "arms": arms,
        "ratios": ratios,
        "runs": runs,
    }


TARGETS = {
    "first_run_vs_offline_pick": ">= 0.93",
    "last_epochs_vs_offline_pick": ">= 0.95",
    "second_first_epoch_vs_first_last": ">= 0.95",
}


def markdown(results: dict[str, Any]) -> str:
    """results.md of the online scenario."""
    n, rounds = results["epochs"], results["rounds"]
    lines = [
        "# Online: tuning inside the run against the untouched script and the offline pick",
        "",
        f"The tutorial script, {n} epochs a run, fresh processes, medians of {rounds} "
        f"interleaved rounds. The offline study took {results['offline_study_s']:.0f} s "
        "(once, before the rounds).",
        "",
        f"{results.get('about', '')}. Command: `{results.get('command', '')}`",
        "",
        "| arm | run (s) | range | first epoch (s) | last epochs (s) | kept |",
        "|---|---:|---|---:|---:|---|",
    ]
    for arm, row in results["arms"].items():
        low, high = row["wall_range_s"]
        kept = ", ".join(sorted({k for k in row["kept"] if k})) or "-"
        lines.append(
            f"| {arm} | {row['wall_s']:.1f} | {low:.1f}-{high:.1f} | {row['first_epoch_s']:.2f} "
            f"| {row['last_epochs_s']:.2f} | {kept} |"
        )
    lines += [
        "",
        "Each measure is the median of its rounds' own: a round's runs ran back to back.",
        "",
        "| measure | value | target |",
        "|---|---:|---|",
    ]
    for key, value in results["ratios"].items():
        target = TARGETS.get(key, "")
        shown = "-" if value is None else f"{value:.3f}"
        if target and value is not None:
            target += " met" if value >= float(target.split()[1]) else " MISSED"
        lines.append(f"| {key} | {shown} | {target} |")
    second = results["arms"][SECOND]
    lines += ["", f"The second runs switched {second['switches']} times (0: it explored nothing)."]
    return "\n".join(lines) + "\n"

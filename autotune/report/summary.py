"""The summary of a study: its finalists beside the baseline and the limits, the ratios
between them, and the notes; from a run's result or from the storage alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna

from autotune.runtime.failures import FailureKind
from autotune.tuner.metrics import ties
from autotune.tuner.result import STUDY_PHASES, StudyResult

UNIT = "samples/s"
Row = dict[str, Any]  # a Confirmed.to_dict(): label, config, samples_per_s, steady, iqr


@dataclass(frozen=True)
class Summary:
    """The summary's table and sentences, read from a study's result (this run's, or the
    storage's alone)."""

    result: StudyResult

    @classmethod
    def of_study(cls, study: optuna.Study, storage: str) -> Summary:
        return cls(StudyResult.load(study, storage=storage))

    @property
    def best_decoder(self) -> str | None:
        return self.result.best.decoder if self.result.best is not None else None

    def ways(self) -> list[str]:
        """What each way of applying the result gives, against the baseline."""
        lines = [f"baseline: {self.result.baseline_text}"] if self.result.baseline_text else []
        for way, label, what in (
            ("build_loader(best.yaml)", self.result.winner_label, "the whole tuned pipeline"),
            ("loader_kwargs(best.yaml)", self.result.as_is_label, "your pipeline as it is"),
        ):
            ratio, spread = self.result.speedup_of(label), self.result.speedup_range_of(label)
            if ratio is not None:
                measured = f" (IQR {spread[0]:.2f}-{spread[1]:.2f})" if spread else ""
                lines.append(f"{way}, {what} ({label}): {ratio:.2f}x the baseline{measured}")
        return lines

    def marks(self, label: str) -> str:
        """Which ways picked the row ``label``: "build_loader", "loader_kwargs", both or ""."""
        ways = [
            w
            for w, picked in (
                ("build_loader", self.result.winner_label),
                ("loader_kwargs", self.result.as_is_label),
            )
            if picked == label
        ]
        return " + ".join(ways)

    def ranks(self) -> dict[str, str]:
        """Each finalist's rank; "=N" where IQRs overlap: a tie, not ranked."""
        return ties(
            [(r["label"], r["samples_per_s"], tuple(r["iqr"])) for r in self.result.confirmed]
        )

    def bounds(self) -> list[tuple[str, float]]:
        """The CPU-work bound(s), labelled: one, or one per decoder."""
        bound = self.result.cpu_work_bound
        if isinstance(bound, dict):
            return [(f"CPU-work bound ({d})", v) for d, v in sorted(bound.items())]
        return [("CPU-work bound", bound)] if bound else []

    def ratios(self) -> list[str]:
        """Speedup, how far from each limit, and the winner's spread."""
        winner, lines = self.result.winner, self.ways()
        if winner is None:
            return lines
        bound = self.result.cpu_work_bound
        if isinstance(bound, dict):
            bound = bound.get(self.best_decoder or "")
        if self.result.ceiling:
            share = winner["steady"] / self.result.ceiling
            lines.append(f"best (steady) / ceiling: {share:.2f}: {self._verdict(share, bound)}")
        if bound:
            lines.append(f"best (steady) / CPU-work bound: {winner['steady'] / bound:.2f}")
        low, high = winner["iqr"]
        if winner["samples_per_s"]:
            spread = (high - low) / winner["samples_per_s"]
            lines.append(
                f"spread of the best: IQR {low:.0f}-{high:.0f} {UNIT} ({spread:.0%} of the median)"
            )
        return lines

    def _verdict(self, share: float, bound: float | None) -> str:
        """Which limit binds, from the best's share of the ceiling and of the CPU-work bound.
        On a CPU device the step and the loader's workers share the cores: far below both
        limits, neither binds alone."""
        winner = self.result.winner
        assert winner is not None
        if share > 1.05:  # faster than the step alone: the ceiling run was disturbed
            return "above 1: the ceiling measurement is suspect, re-run to check it"
        if share >= 0.9:
            return "the train step (compute) limits"
        if self.result.device != "cpu":
            return "the input pipeline limits"
        if bound and winner["steady"] >= 0.8 * bound:
            return "the input pipeline's decode and augmentation limit"
        alone = f" (the loader's CPU work alone: {bound:.0f} {UNIT} on all cores)" if bound else ""
        return f"the shared cores limit: on a CPU device the step and the loader share them{alone}"

    def worth_rows(self) -> list[tuple[str, str, str, str, str, str, str]]:
        """(setting, the winner's value, changed to, samples/s, ratio to the winner, IQR,
        effect): the winner in the worth's rounds first, then each variant."""
        worth = self.result.worth
        if not worth or not worth["rows"]:
            return []
        top = worth["winner"]
        iqr = f"{top['iqr'][0]:.0f}-{top['iqr'][1]:.0f}"
        out = [("(the winner)", "", "", f"{top['samples_per_s']:.1f}", "1.00", iqr, "")]
        for r in worth["rows"]:
            implied = r.get("also_changed") or []
            changed_to = str(r["value"]) + (f" (so also {', '.join(implied)})" if implied else "")
            out.append(
                (
                    r["knob"],
                    str(r["winner_value"]),
                    changed_to,
                    f"{r['samples_per_s']:.1f}",
                    f"{r['ratio']:.2f}",
                    f"{r['iqr'][0]:.0f}-{r['iqr'][1]:.0f}",
                    r["effect"],
                )
            )
        return out

    def worth_lines(self) -> list[str]:
        """How the worth was measured, what it cost against the search, what it left out."""
        worth = self.result.worth
        if not worth:
            return []
        lines = []
        searched = worth["search_seconds"]
        if worth["rows"]:
            rounds = worth["winner"].get("rounds", 0)
            share = worth["seconds"] / searched if searched else 0.0
            lines.append(
                f"what each setting is worth: measured interleaved with the winner in {rounds} "
                f"round{'s' if rounds != 1 else ''}, in {worth['seconds']:.0f} s: "
                f"{share:.0%} of the search's {searched:.0f} s (study.worth_budget "
                f"{worth['budget']:.0%})"
            )
            reused = [r["label"] for r in worth["rows"] if r.get("from_confirmation")]
            if reused:
                lines.append(
                    f"from the confirmation, not run again (finalists, interleaved with the "
                    f"winner there): {', '.join(reused)}"
                )
            quiet = [r["label"] for r in worth["rows"] if r["verdict"] == "none"]
            noise = worth.get("run_to_run", 0.0) if rounds < 2 else 0.0
            if noise:
                lines.append(
                    f"one round each: a change no larger than two runs of one config differed "
                    f"by in the confirmation ({noise:.0%}, the finalists' median) is no "
                    "measurable effect"
                )
            if quiet:
                why = "inside the spread" + (" or the runs' variation" if noise else "")
                lines.append(f"no measurable effect here ({why}): {', '.join(quiet)}")
        else:
            lines.append(
                f"what each setting is worth: not measured, one round of the winner and one "
                f"variant would pass study.worth_budget ({worth['budget']:.0%} of the "
                f"search's {searched:.0f} s)"
            )
        if worth["left_out"]:
            lines.append(
                f"left out by the budget: {', '.join(worth['left_out'])} (raise "
                "study.worth_budget to measure them)"
            )
        if worth.get("failed"):
            lines.append(f"failed in every round: {', '.join(worth['failed'])}")
        return lines

    def rows(self) -> list[tuple[str, str, str, str, str, str]]:
        """(rank, label, samples/s, IQR, config, which ways picked it): finalists fastest
        first ("=N": a tie), then the limits."""
        out = []
        rank = self.ranks()
        for r in sorted(self.result.confirmed, key=lambda r: -r["samples_per_s"]):
            iqr = f"{r['iqr'][0]:.0f}-{r['iqr'][1]:.0f}"
            if r.get("spread") is not None:  # stored since windows lengthen on uneven data
                iqr += f" (spread {r['spread']:.0%})"
            marks = self.marks(r["label"])
            if r.get("raced_out"):  # stored since the finalists race
                marks = f"left the race after round {r['raced_out']}"
            rate = f"{r['samples_per_s']:.1f}"
            out.append((rank[r["label"]], r["label"], rate, iqr, r["config"], marks))
        if self.result.ceiling:
            on_device = "train step on a batch already on the device"
            out.append(("", "ceiling", f"{self.result.ceiling:.1f}", "", on_device, ""))
        for label, value in self.bounds():
            decode = "the loader's CPU work on all usable CPUs"
            out.append(("", label, f"{value:.1f}", "", decode, ""))
        return out


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _text_table(summary: Summary) -> list[str]:
    rows = [("", "", UNIT, "IQR", "config")]
    rows += [(k, a, b, c, d + (f"  <- {m}" if m else "")) for k, a, b, c, d, m in summary.rows()]
    return _aligned(rows)


WORTH_HEADER = ("setting", "winner's", "changed to", UNIT, "x winner", "IQR", "effect")


def table(result: StudyResult) -> str:
    """The summary printed at the end: finalists, baseline and limits, ratios, notes, and
    what each setting of the winner is worth."""
    if result.published is None:
        summary = Summary(result)
    else:  # confirmed by another host: its figures, from the storage
        study = optuna.load_study(study_name=result.study_name, storage=result.storage)
        summary = Summary.of_study(study, result.storage)
    lines = _text_table(summary) + summary.ratios()
    lines += [f"note: {n}" for n in summary.result.notes]
    worth = summary.worth_rows()
    if worth:
        lines += ["", "what each setting of the winner is worth:"]
        lines += _aligned([WORTH_HEADER, *worth])
    lines += summary.worth_lines()
    spent = time_line(result.time_split)
    return "\n".join([*lines, spent] if spent else lines)


def time_line(split: dict[str, float]) -> str:
    """Where the run's time went, phase by phase, in minutes; "" where nothing was timed."""
    phases = [(p, split[p]) for p in STUDY_PHASES if p in split]
    if not phases:
        return ""
    each = ", ".join(f"{phase} {seconds / 60:.1f}" for phase, seconds in phases)
    return f"time: {each} min; {sum(s for _, s in phases) / 60:.1f} min in all"


def failure_table(failures: dict[str, int]) -> list[tuple[str, int, str]]:
    """(kind, trials, hint) per failure kind."""
    return [(kind, n, FailureKind.of(kind).hint) for kind, n in sorted(failures.items())]


def failures_text(result: StudyResult) -> str:
    rows = failure_table(result.failures)
    if not rows:
        return ""
    lines = ["failed trials:"]
    lines += [f"  {kind:<15} {n:>3}  hint: {hint}" for kind, n, hint in rows]
    return "\n".join(lines)

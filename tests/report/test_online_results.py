"""The online benchmark's figures from recorded runs: medians over rounds, the ratios it is
judged by, and its table."""

from __future__ import annotations

from autotune.report.online_results import FIRST, OFFLINE, SECOND, UNTOUCHED, markdown, results


def _run(wall_s: float, epochs_s: list[float], kept: str | None = None) -> dict:
    run = {"wall_s": wall_s, "epochs_s": epochs_s, "loop_s": wall_s - 5}
    if kept is not None:
        run.update(kept=kept, tried=3, switches=0 if "second" in kept else 4)
    return run


def test_each_arm_is_its_median_and_the_ratios_compare_whole_runs_and_last_epochs() -> None:
    runs = {
        UNTOUCHED: [_run(w, [3.0] * 10) for w in (30.0, 34.0, 32.0)],
        FIRST: [_run(w, [3.0, 2.0, *[1.1] * 8], "w2 first") for w in (13.0, 12.0, 15.0)],
        SECOND: [_run(w, [1.2, *[1.0] * 9], "w2 second") for w in (11.0, 11.0, 12.0)],
        OFFLINE: [_run(w, [1.5, *[1.0] * 9]) for w in (12.0, 11.0, 13.0)],
    }
    got = results(runs, study_s=600.0, epochs=10, rounds=3)
    arms = got["arms"]
    assert arms[UNTOUCHED]["wall_s"] == 32.0 and arms[UNTOUCHED]["wall_range_s"] == [30.0, 34.0]
    assert arms[FIRST]["first_epoch_s"] == 3.0 and arms[FIRST]["last_epochs_s"] == 1.1
    ratios = got["ratios"]
    assert ratios["first_run_vs_offline_pick"] == round(12.0 / 13.0, 3)
    assert ratios["share_of_offline_gain"] == round((32 - 13) / (32 - 12), 3)
    assert ratios["last_epochs_vs_offline_pick"] == round(1.0 / 1.1, 3)
    assert ratios["second_first_epoch_vs_first_last"] == round(1.1 / 1.2, 3)
    assert ratios["second_first_epoch_vs_offline_first"] == round(1.5 / 1.2, 3)  # both cold
    assert ratios["offline_first_epoch_vs_its_last"] == round(1.0 / 1.5, 3)
    assert ratios["offline_with_its_study_vs_untouched"] == round(32 / 612, 3)

    table = markdown({**got, "about": "a set", "command": "python -m autotune.benchmark"})
    assert "| online, first run | 13.0 | 12.0-15.0 | 3.00 | 1.10 | w2 first |" in table
    assert "| first_run_vs_offline_pick | 0.923 | >= 0.93 MISSED |" in table
    assert "| last_epochs_vs_offline_pick | 0.909 | >= 0.95 MISSED |" in table
    assert "switched [0, 0, 0] times" in table
    assert "The offline study took 600 s" in table


def test_no_gain_offline_leaves_the_share_unset() -> None:
    same = [_run(10.0, [1.0] * 6)]
    runs = {UNTOUCHED: same, FIRST: same, SECOND: same, OFFLINE: same}
    got = results(runs, study_s=1.0, epochs=6, rounds=1)
    assert got["ratios"]["share_of_offline_gain"] is None
    assert "| share_of_offline_gain | - |  |" in markdown(got)

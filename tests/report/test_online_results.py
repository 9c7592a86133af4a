"""The online benchmark's figures from recorded runs: medians over rounds, the ratios it is
judged by, and its table."""

from __future__ import annotations

from autotune.report.online_results import FIRST, OFFLINE, SECOND, UNTOUCHED, markdown, results


def _run(wall_s: float, epochs_s: list[float], kept: str | None = None) -> dict:
    run = {"wall_s": wall_s, "epochs_s": epochs_s, "loop_s": wall_s - 5}
    if kept is not None:
        run.update(kept=kept, tried=3, switches=0 if "second" in kept else 4)
    return run


def test_each_arm_is_its_median_and_each_ratio_the_median_of_its_rounds_own() -> None:
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
    assert ratios["first_run_vs_offline_pick"] == round(11.0 / 12.0, 3)  # round 2's
    assert ratios["share_of_offline_gain"] == round((30 - 13) / (30 - 12), 3)  # round 1's
    assert ratios["last_epochs_vs_offline_pick"] == round(1.0 / 1.1, 3)
    assert ratios["second_first_epoch_vs_first_last"] == round(1.1 / 1.2, 3)
    assert ratios["second_first_epoch_vs_offline_first"] == round(1.5 / 1.2, 3)  # both cold
    assert ratios["offline_first_epoch_vs_its_last"] == round(1.0 / 1.5, 3)
    assert ratios["offline_with_its_study_vs_untouched"] == round(32 / 613, 3)  # round 3's

    table = markdown({**got, "about": "a set", "command": "python -m autotune.benchmark"})
    assert "| online, first run | 13.0 | 12.0-15.0 | 3.00 | 1.10 | w2 first |" in table
    assert "| first_run_vs_offline_pick | 0.917 | >= 0.93 MISSED |" in table
    assert "| last_epochs_vs_offline_pick | 0.909 | >= 0.95 MISSED |" in table
    assert "switched [0, 0, 0] times" in table
    assert "The offline study took 600 s" in table


def test_a_ratio_pairs_the_runs_of_one_round_where_the_machine_drifted_between_rounds() -> None:
    # a recorded benchmark's epochs (seconds): the third round ran on a slower machine
    first_last = [2.160, 2.478, 2.403]  # the first run's last epochs, each round
    second_first = [2.199, 2.585, 2.727]  # the second run's first epoch, same rounds
    runs = {
        UNTOUCHED: [_run(95.0, [3.0] * 6) for _ in range(3)],
        FIRST: [_run(70.0, [3.0, *[last] * 5], "w2 first") for last in first_last],
        SECOND: [_run(70.0, [first, *[2.2] * 5], "w2 second") for first in second_first],
        OFFLINE: [_run(70.0, [2.3] * 6) for _ in range(3)],
    }
    got = results(runs, study_s=200.0, epochs=6, rounds=3)
    # arm by arm, the medians come from rounds 3 and 2: 2.403 / 2.585
    assert got["arms"][FIRST]["last_epochs_s"] / got["arms"][SECOND]["first_epoch_s"] < 0.93
    # round by round: 0.982, 0.959, 0.881
    assert got["ratios"]["second_first_epoch_vs_first_last"] == round(2.478 / 2.585, 3)


def test_no_gain_offline_leaves_the_share_unset() -> None:
    same = [_run(10.0, [1.0] * 6)]
    runs = {UNTOUCHED: same, FIRST: same, SECOND: same, OFFLINE: same}
    got = results(runs, study_s=1.0, epochs=6, rounds=1)
    assert got["ratios"]["share_of_offline_gain"] is None
    assert "| share_of_offline_gain | - |  |" in markdown(got)

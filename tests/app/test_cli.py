"""The command line end to end: real runs in a subprocess, and every kind of bad input."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path

import optuna
import pytest
import torch
import yaml
from helpers import QUICK, SUB_WINDOWS, run_cli

from autotune.app import cli
from autotune.tuner import store, study_trials
from autotune.tuner.result import StudyResult


@pytest.mark.slow
def test_quick_study_writes_a_usable_best_yaml(quick_study):
    cwd, result = quick_study
    best = yaml.safe_load((cwd / "studies" / "synthetic-tiny" / "best.yaml").read_text())
    assert set(best) >= {"loader", "pipeline", "measured", "machine"}
    torch.utils.data.DataLoader(list(range(64)), **best["loader"])  # accepted as it stands
    measured = best["measured"]
    assert measured["samples_per_s"] > 0 and measured["baseline_samples_per_s"] > 0
    assert measured["ceiling_samples_per_s"] > 0
    assert measured["speedup_vs_baseline"] == pytest.approx(
        measured["samples_per_s"] / measured["baseline_samples_per_s"], rel=0.02
    )
    assert measured["speedup_vs_baseline"] >= 1.0  # never exports something slower
    low, high = measured["speedup_vs_baseline_iqr"]  # the range its rounds measured
    assert low - 0.01 <= measured["speedup_vs_baseline"] <= high + 0.01
    assert best["machine"]["usable_cpus"] >= 1 and best["machine"]["torch"]
    # the study it came from, found from any folder (the run's storage was relative)
    assert best["study"]["storage"] == f"sqlite:///{cwd.resolve()}/studies/autotune.db"
    # the other way: DataLoader arguments for the user's pipeline as it is, never slower
    # than the baseline (the baseline is one of its candidates), against the same baseline
    assert best["baseline"].startswith("ImageFolder(root) with its PIL loader")
    as_is = best["loader_kwargs"]
    torch.utils.data.DataLoader(list(range(64)), **as_is["loader"])
    assert as_is["main_threads"] >= 1 and as_is["measured"]["speedup_vs_baseline"] >= 1.0
    assert "build_loader(best.yaml), the whole tuned pipeline" in result.stdout
    assert "loader_kwargs(best.yaml), your pipeline as it is" in result.stdout
    assert "optuna-dashboard sqlite:///studies/autotune.db" in result.stdout
    assert "baseline" in result.stdout and "ceiling" in result.stdout
    # where the run's time went (a worth table only where a finalist beat the baseline)
    assert re.search(
        r"^time: references [\d.]+, search [\d.]+, confirmation [\d.]+(, worth [\d.]+)? min; "
        r"[\d.]+ min in all$",
        result.stdout,
        re.M,
    )


@pytest.mark.slow
def test_quick_study_leaves_only_studies_behind(quick_study):
    cwd, _ = quick_study
    assert sorted(p.name for p in cwd.iterdir()) == ["studies"]  # no outputs/, no .log


def _charged_per_epoch(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> float:
    """Seconds an epoch of whole batches was charged beyond its samples at the steady rate."""
    batch_size = trial.user_attrs["pipeline"]["loader"]["batch_size"]
    epoch = study.user_attrs["workload"]["images"] // batch_size * batch_size
    return epoch / trial.value - epoch / trial.user_attrs["samples_per_s_steady"]


@pytest.mark.slow
def test_trials_carry_their_measurements(quick_study):
    cwd, _ = quick_study
    study = optuna.load_study(
        study_name="synthetic-tiny", storage=f"sqlite:///{cwd}/studies/autotune.db"
    )
    trials = study_trials.measured(study.get_trials())  # a repeat measured nothing
    # the rate model may end the search once 3 of its predictions were measured
    assert len(trials) in (3, 4)
    baseline = trials[0]
    assert baseline.params["num_workers"] == 0 and baseline.params["decoder"] == "as_is"
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert complete
    for t in complete:
        attrs = t.user_attrs
        rates = attrs["samples_per_s_sub_windows"]
        overhead = attrs.get("epoch_overhead_s")
        # whole sets of the window's sub-windows, all of one length; or real epochs, which
        # stop where the next would end past the window's time (a busy machine's can be one)
        assert len(rates) % SUB_WINDOWS == 0 or overhead is not None
        # all timed samples over all timed seconds: the harmonic mean of the rates (never the
        # median, which a burst can pull up)
        steady = statistics.harmonic_mean(rates)
        assert attrs["samples_per_s_steady"] == pytest.approx(steady, rel=0.01)
        # the objective is the rate over an epoch: start-up charged unless workers persist
        assert t.value == pytest.approx(attrs["samples_per_s_epoch"], rel=0.01)
        if overhead is not None:  # a whole epoch timed: what it took beyond its samples
            assert _charged_per_epoch(study, t) == pytest.approx(overhead, abs=0.01)
        else:
            assert t.value <= steady * 1.01
            if t.params.get("persistent_workers"):
                assert t.value == pytest.approx(steady, rel=0.01)
        assert 0 <= attrs["data_wait_fraction"] <= 1
        assert attrs["time_to_first_batch_s"] > 0
        assert attrs["peak_memory_mb"] > 10
        # a full prefetch buffer is drained before timing, unless the sub-windows were real
        # epochs (whole epochs timed: each starts with an empty buffer)
        buffer = t.params["num_workers"] * t.params.get("prefetch_factor", 0)
        assert attrs["warmup_batches"] >= buffer or overhead is not None
        # the rate so far, reported where it is evidence and more is left to time: not after
        # the first sub-window inside an epoch (no rate yet), nor after the last real epoch
        # (nothing left to save), from the end of the first sub-window of real epochs on: none
        # where one set of two timed it within an epoch (a busy machine's rate can ask that)
        steps = sorted(t.intermediate_values)
        if steps:
            assert steps == list(range(steps[0], steps[-1] + 1)) and steps[-1] < len(rates)
        else:
            assert len(rates) <= SUB_WINDOWS
        assert len(steps) < len(rates)
    polish = [t for t in trials if t.user_attrs.get("role") == "polish"]
    if len(trials) == 4:  # the last quarter polishes the best so far
        assert polish and polish[-1] is trials[-1]
    else:  # ended on the rate model's word: the quick space has no knob it cannot see
        assert not polish
    assert study.user_attrs["ceiling_samples_per_s"] > 0
    assert study.metric_names == ["samples_per_s"]
    # the rate model's prediction beside each measured rate, and its error over the study
    uncopied = [t for t in complete if t.user_attrs["pipeline"]["pipeline"]["cache"] == "none"]
    for t in uncopied:
        assert t.user_attrs["samples_per_s_predicted"] > 0
        assert t.user_attrs["predicted_binds"] in ("ceiling", "main process", "workers", "CPUs")
    error = study.user_attrs["rate_model_error"]
    assert error["trials"] == len(uncopied) and 0 <= error["median"] <= error["worst"]
    summary = quick_study[1].stdout
    assert re.search(r"rate model: off by \d+% at the median, \d+% at worst", summary)
    binds = "(main process|workers|CPUs|ceiling)"
    assert re.search(rf"data wait +\d+%, model [\d.]+ \({binds}\)", summary)
    report = (cwd / "studies" / "synthetic-tiny" / "report.md").read_text()
    assert re.search(rf"^\| \d+ \| `[^`]+` \| [\d.]+ \| [\d.]+ \| {binds} \|$", report, re.M)


@pytest.mark.slow
def test_resume_continues_refuses_a_changed_workload_and_a_new_study_starts_warm(
    quick_study, tmp_path, monkeypatch, capsys
):
    # a copy: the shared quick study must stay as it is for the tests that read it
    cwd = tmp_path / "resumed"
    shutil.copytree(quick_study[0], cwd)
    storage = f"sqlite:///{cwd}/studies/autotune.db"
    study = optuna.load_study(study_name="synthetic-tiny", storage=storage)
    before = len(study_trials.measured(study.trials))
    # a trial queued in the study (as the worth table queues a variant that beat the winner)
    # is what the resumed search measures first
    queued = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    if not queued:
        measured = {(t.params["num_workers"], t.params["decoder"]) for t in study.trials}
        w, decoder = next(
            (w, d) for w in (0, 1, 2) for d in ("pil", "opencv") if (w, d) not in measured
        )
        params = {"num_workers": w, "decoder": decoder, "main_threads": 1}
        params |= {"prefetch_factor": 2} if w else {}
        study.enqueue_trial(params, user_attrs={"role": "polish", "polish_knob": "num_workers"})
        queued = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    # no confirmation in either run: what is checked is which trials run, and in what order
    again = run_cli([*QUICK, f"study.n_trials={before + 1}", "study.confirm_top_k=0"], cwd)
    assert again.returncode == 0, again.stderr[-2000:]
    resumed = optuna.load_study(study_name="synthetic-tiny", storage=storage)
    measured = study_trials.measured(resumed.trials)
    assert len(measured) == before + 1  # resumed, not restarted
    fixed = queued[0].system_attrs["fixed_params"]
    assert measured[-1].number == queued[0].number and measured[-1].params == fixed
    # refused before anything runs: through main() in this process (the real command's
    # one-line refusal is test_bad_input_through_the_real_cli_has_no_traceback's)
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    assert cli.main([*QUICK, "recipe.crop_size=72"]) == 2
    err = capsys.readouterr().err
    assert "pick a new study.name" in err and len(err.strip().splitlines()) == 1

    # a new study of the same job in the same storage starts from the earlier winners
    earlier = StudyResult.load(resumed, storage=storage)
    rows = [r for r in (earlier.winner, earlier.as_is_winner) if r and r["label"] != "baseline"]
    picks = list(dict.fromkeys(r["config"] for r in rows))
    warm_args = ["study.name=again", f"study.n_trials={1 + len(picks)}", "study.confirm_top_k=0"]
    warm = run_cli([*QUICK, *warm_args], cwd)
    assert warm.returncode == 0, warm.stderr[-2000:]
    again = optuna.load_study(study_name="again", storage=storage).trials
    assert [store.role_of(t) for t in again[1:]] == [store.WARM_START] * len(picks)
    assert [store.trial_attr(t, store.TrialKey.CONFIG) for t in again[1:]] == picks
    assert ("warm start: the picks of earlier studies" in warm.stdout) == bool(picks)


COPY_SPACE = """name: copy
knobs:
  num_workers: {type: int, low: 0, high: 2}
  prefetch_factor: {type: int, low: 2, high: 2, when: "num_workers > 0"}
  persistent_workers: {type: fixed, value: true, when: "num_workers > 0"}
  decoder: {type: choice, choices: [as_is, pil]}
  cache: {type: fixed, value: decoded}
  main_threads: {type: int, low: 1, high: 1}
  batch_size: {type: fixed, value: "${batch_size}"}
"""


@pytest.mark.slow
def test_a_study_over_many_epochs_charges_each_prepared_copy_once(tmp_path):
    # a space of the user's own (./conf/search_space/copy.yaml): quick's, with a decoded copy
    (tmp_path / "conf" / "search_space").mkdir(parents=True)
    (tmp_path / "conf" / "search_space" / "copy.yaml").write_text(COPY_SPACE)
    args = [*QUICK, "search_space=copy", "study.epochs=90", "study.n_trials=3"]
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    (copy,) = (tmp_path / "studies" / "prepared").glob("decoded-*")  # made once, for all
    seconds = json.loads((copy / "prepared.json").read_text())["seconds"]
    study = optuna.load_study(
        study_name="synthetic-tiny", storage=f"sqlite:///{tmp_path}/studies/autotune.db"
    )
    tuned = [
        t
        for t in study_trials.measured(study.trials)
        if t.params.get("decoder") not in (None, "as_is")
    ]
    assert tuned, [t.params for t in study.trials]
    for t in tuned:  # its share of the preparation, in the value of every trial that used it
        assert t.user_attrs["pipeline"]["pipeline"]["cache"] == "decoded"
        if t.state == optuna.trial.TrialState.COMPLETE:
            share = t.user_attrs["preparation_per_epoch_s"]
            assert share == pytest.approx(seconds / 90, abs=1e-3)
            overhead = t.user_attrs.get("epoch_overhead_s")
            if overhead is not None:  # a whole epoch timed, and the share on top
                assert _charged_per_epoch(study, t) == pytest.approx(overhead + share, abs=0.01)
            else:
                assert t.value < t.user_attrs["samples_per_s_steady"]
    best = yaml.safe_load((tmp_path / "studies" / "synthetic-tiny" / "best.yaml").read_text())
    assert best["workload"]["prepared_dir"] == str((tmp_path / "studies" / "prepared").resolve())
    notes = " ".join(best["measured"]["notes"])
    if best["pipeline"]["cache"] == "decoded":
        assert f"the decoded copy took {seconds:.1f} s to prepare, once" in notes
    elif any(t.state == optuna.trial.TrialState.COMPLETE for t in tuned):
        # a pipeline without the copy won (the baseline or another): the notes say why
        assert "cache=decoded tried, not picked: with its preparation charged over" in notes


@pytest.mark.slow
def test_a_failing_trial_is_recorded_and_the_study_goes_on(tmp_path):
    args = [
        *QUICK,
        "model._target_=faulty.SingleThreadAllergy",
        "study.n_trials=5",
        "search_space.knobs.main_threads.high=2",
        "study.confirm_top_k=0",
    ]
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    study = optuna.load_study(
        study_name="synthetic-singlethreadallergy",
        storage=f"sqlite:///{tmp_path}/studies/autotune.db",
    )
    failed = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert complete and all(t.params["main_threads"] == 2 for t in complete)
    for t in failed:
        assert t.params["main_threads"] == 1
        assert t.user_attrs["failure"]["kind"] == "error"
        assert "refuses to run on one thread" in t.user_attrs["failure"]["message"]


SPECTROGRAMS = [
    "dataset._target_=userdata_example.Spectrograms",
    "model._target_=userdata_example.SpecNet",
]


@pytest.fixture(scope="module")
def bad_input_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory with a user's own space file and an empty folder."""
    folder = tmp_path_factory.mktemp("bad-input")
    (folder / "empty").mkdir()
    own_space = folder / "conf" / "search_space" / "warp.yaml"  # a user's own space file
    own_space.parent.mkdir(parents=True)
    own_space.write_text("name: warp\nknobs:\n  warp_drive: {type: bool}\n")
    return folder


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["dataset=mine", "dataset.root={missing}"], "does not exist"),
        (["dataset=mine", "dataset.root={empty}"], "no images"),
        (["dataset=mine"], "dataset.root"),
        (["model=nope"], "model/nope"),
        (["model._target_=no.such.Model"], "cannot be imported"),
        (["dataset._target_=no.such.Data"], "dataset._target_=no.such.Data cannot be imported"),
        (["optimizer._target_=no.such.Opt"], "optimizer._target_=no.such.Opt cannot be"),
        (["optimizer.kwargs.momentum=-1"], "check optimizer.kwargs"),
        (["precision=fp64"], "precision must be one of fp32, bf16, fp16"),
        (
            ["dataset._target_=userdata_example.Spectrograms", "dataset.kwargs.vary=true"],
            "pass dataset.collate_fn=module.function",
        ),
        (["dataset._target_=userdata_example.Broken"], "RuntimeError: no such folder"),
        (
            ["dataset._target_=userdata_example.ToneStream", "dataset.kwargs.split=false"],
            "yields its samples once per DataLoader worker",
        ),
        ([*SPECTROGRAMS, "mode=verify"], "studies/spectrograms-specnet/best.yaml does not exist"),
        (["dataset._target_=userdata_example.Spectrograms"], "expected input[2, 1, 257,"),
        ([*SPECTROGRAMS, "step._target_=no.such.loss"], "step._target_=no.such.loss cannot be"),
        (["study.n_trials=0"], "study.n_trials must be >= 1"),
        (["study.n_trials=many"], "n_trials"),
        (["study.nope=1"], "nope"),
        (["device=gpu"], "device must be auto, cpu or cuda"),
        (
            ["search_space.knobs.num_workers.low=5", "search_space.knobs.num_workers.high=1"],
            "low <= high",
        ),
        (["search_space=warp"], "unknown knob 'warp_drive'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(overrides, expected, bad_input_dir, monkeypatch, capsys):
    tmp_path = bad_input_dir  # one for every case: each checks that nothing was written there
    monkeypatch.chdir(tmp_path)
    args = [o.format(missing=tmp_path / "missing", empty=tmp_path / "empty") for o in overrides]
    # a small generated set where one is loaded: the 512 default would take seconds to make
    assert cli.main(["dataset.count=8", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("autotune: error:")
    assert expected in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf", "empty"]  # nothing written


@pytest.mark.slow
def test_bad_input_through_the_real_cli_has_no_traceback(tmp_path):
    result = run_cli(["dataset=mine", f"dataset.root={tmp_path / 'nowhere'}"], tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]


@pytest.mark.slow
def test_build_loader_trains_two_steps_from_an_exported_best_yaml(quick_study):
    import autotune
    from autotune.pipeline.sources import synthetic
    from autotune.runtime.workload import TinyCNN

    cwd, _ = quick_study
    best = cwd / "studies" / "synthetic-tiny" / "best.yaml"
    source = synthetic(count=48, num_classes=3)  # the quick study's dataset (cached)
    loader = autotune.build_loader(source, best)
    assert loader.config == autotune.load_pipeline_config(best)
    model = TinyCNN(num_classes=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step, (images, labels) in enumerate(loader):
        assert images.dtype == torch.float32 and images.shape[1:] == (3, 64, 64)  # crop 64
        assert -3 < images.mean() < 3  # normalized, not 0..255
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step == 1:
            break
    assert len(losses) == 2
    threads = torch.get_num_threads()
    try:
        kwargs = autotune.loader_kwargs(best)  # sets the tuned threads, as build_loader does
    finally:
        torch.set_num_threads(threads)
    assert torch.utils.data.DataLoader(range(16), **kwargs).batch_size == kwargs["batch_size"]


@pytest.mark.slow
def test_autotune_dataloader_starts_at_the_study_s_pick_for_the_pipeline_as_it_is(
    quick_study, tmp_path, caplog
):
    import logging

    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    import autotune
    from autotune.pipeline.sources import synthetic

    cwd = tmp_path / "cwd"
    shutil.copytree(quick_study[0], cwd)  # the run adds a study of its own to the storage
    best = cwd / "studies" / "synthetic-tiny" / "best.yaml"
    pick = yaml.safe_load(best.read_text())["loader_kwargs"]["loader"]
    root = synthetic(count=48, num_classes=3).root  # the quick study's dataset (cached)
    dataset = ImageFolder(str(root), transform=v2.Compose([v2.ToImage(), v2.Resize((32, 32))]))
    # the user's own workers other than the pick's: where the run starts shows
    own = 1 if pick["num_workers"] != 1 else 0
    storage = f"sqlite:///{cwd}/studies/autotune.db"
    threads = torch.get_num_threads()
    try:
        loader = autotune.DataLoader(
            dataset, batch_size=pick["batch_size"], shuffle=True, num_workers=own, storage=storage
        )
        with caplog.at_level(logging.INFO, logger="autotune.online.loader"):
            assert sum(len(labels) for _, labels in loader) == 48
    finally:
        torch.set_num_threads(threads)  # the pick's main_threads, set by the loader
    assert loader.settings.num_workers == pick["num_workers"] and loader.switches == []
    assert "as the offline study synthetic-tiny picked" in caplog.text


PROGRESS_LINE = re.compile(r"\[ ?(\d+)/(\d+)\] trial \d+ +w\d")


@pytest.mark.slow
def test_a_progress_line_per_trial_and_no_bar_when_output_is_not_a_terminal(quick_study):
    cwd, result = quick_study
    study = optuna.load_study(
        study_name="synthetic-tiny", storage=f"sqlite:///{cwd}/studies/autotune.db"
    )
    ran = len(study_trials.measured(study.get_trials()))
    lines = [line for line in result.stdout.splitlines() if PROGRESS_LINE.search(line)]
    assert [PROGRESS_LINE.search(line).groups() for line in lines] == [
        (str(n), "4") for n in range(1, ran + 1)
    ]
    if ran < 4:  # a search that ends early says why
        assert "nothing left to win" in result.stdout or "the step binds" in result.stdout
    assert all("  best " in line for line in lines)  # the best so far, on every line
    assert any(re.search(r"\d+\.\d samples/s", line) for line in lines)
    assert "\r" not in result.stdout + result.stderr and "trials |" not in result.stdout


def always_fails(*extra: str) -> list[str]:
    return [*QUICK, "model._target_=faulty.AlwaysFails", "study.n_trials=2", *extra]


@pytest.mark.slow
def test_no_trial_finishing_exits_nonzero_with_the_failure_table_quiet_or_not(tmp_path):
    """quiet=true prints results and warnings only; with no trial finished (every trial
    fails) it exits 1 with the failure table, and writes no best.yaml. The same run without
    quiet: test_on_a_terminal_the_bar_stays_below_whole_progress_lines."""
    result = run_cli(always_fails("quiet=true"), tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "error" in result.stdout and "hint:" in result.stdout
    assert not list(tmp_path.glob("studies/*/best.yaml"))
    assert not PROGRESS_LINE.search(result.stdout)
    assert "measuring the ceiling" not in result.stdout  # progress, silenced
    assert "the ceiling could not be measured" in result.stdout  # a warning, kept
    assert "failed trials:" in result.stdout and "hint:" in result.stdout
    report_md = tmp_path / "studies" / "synthetic-alwaysfails" / "report.md"
    assert f"report:      {report_md.relative_to(tmp_path)}" in result.stdout
    assert "| error | 2: 0, 1 | RuntimeError: broken model |" in report_md.read_text()


@pytest.mark.slow
def test_on_a_terminal_the_bar_stays_below_whole_progress_lines(tmp_path):
    import fcntl
    import os
    import pty
    import struct
    import termios

    from helpers import start_cli

    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    proc = start_cli(always_fails(), tmp_path, terminal=os.ttyname(terminal))
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    assert proc.wait(timeout=240) == 1, proc.communicate()[1]
    shown = [line.rsplit("\r", 1)[-1] for line in b"".join(chunks).decode().split("\r\n")]
    assert "2/2 trials |" in b"".join(chunks).decode()  # the bar was drawn
    progress = [line for line in shown if PROGRESS_LINE.search(line)]
    assert len(progress) == 2
    for line in progress:  # each line whole on the screen, the bar erased before it
        assert re.match(r"\d\d:\d\d:\d\d \[ ?\d/2\] trial \d .* FAILED error: ", line), line
    assert "failed trials:" in shown and not any("trials |" in line for line in shown)
    assert any("hint:" in line for line in shown)  # the failure table, not quiet
    assert not list(tmp_path.glob("studies/*/best.yaml"))  # no trial finished

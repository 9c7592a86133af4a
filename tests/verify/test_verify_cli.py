"""``mode=verify`` from the command line: bad input is one line and exit 2 with nothing written;
a run (with a fake runner here) writes verify.md, verify.json and the study's attribute;
Ctrl-C keeps the finished rounds."""

from __future__ import annotations

import json

import optuna
import pytest
import yaml
from helpers import QUICK, interrupt_cli, make_session, run_cli
from verify_data import FakeRun, write_best

from autotune import machine
from autotune.app import cli
from autotune.pipeline.sources import synthetic
from autotune.verify import command
from autotune.verify.output import STUDY_KEY

STUDY = "verify-test"
ARGS = [*QUICK, f"study.name={STUDY}", "mode=verify"]
RATES = {
    "baseline": [200.0, 200.0],
    "loader_kwargs": [180.0, 190.0],
    "build_loader": [390.0, 410.0],
}


def quick_fingerprint() -> str:
    return synthetic(count=48, num_classes=3).fingerprint()  # QUICK's dataset, cached


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _bad_input(tmp_path, monkeypatch, capsys, expected):
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    assert cli.main(ARGS) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("autotune: error:"), err
    assert expected in err, err
    assert _files(tmp_path) == before  # nothing written: no lock, no verify.md


def test_without_best_yaml_it_says_to_tune_first(tmp_path, monkeypatch, capsys):
    _bad_input(
        tmp_path,
        monkeypatch,
        capsys,
        f"studies/{STUDY}/best.yaml does not exist: run the tune first",
    )


def test_a_best_yaml_of_another_machine_is_refused(tmp_path, monkeypatch, capsys):
    here = machine.detect(want_cuda=True)
    elsewhere = here.__class__(**{**here.__dict__, "usable_cpus": here.usable_cpus + 62})
    write_best(tmp_path / "studies" / STUDY, fingerprint=quick_fingerprint(), facts=elsewhere)
    expected = (
        f"another machine ({here.usable_cpus + 62} usable CPUs there, {here.usable_cpus} here)"
    )
    _bad_input(tmp_path, monkeypatch, capsys, expected)


def test_data_changed_since_the_tune_is_refused(tmp_path, monkeypatch, capsys):
    write_best(tmp_path / "studies" / STUDY, fingerprint="0123456789abcdef")
    _bad_input(tmp_path, monkeypatch, capsys, "the dataset changed since")


def test_a_best_yaml_of_an_older_autotune_is_refused(tmp_path, monkeypatch, capsys):
    path = write_best(tmp_path / "studies" / STUDY, fingerprint=quick_fingerprint())
    doc = yaml.safe_load(path.read_text())
    del doc["loader_kwargs"], doc["baseline"]  # as files were before both ways were tuned
    path.write_text(yaml.safe_dump(doc))
    _bad_input(tmp_path, monkeypatch, capsys, "was written by an older autotune")


def test_a_best_yaml_without_an_as_is_pick_is_refused(tmp_path, monkeypatch, capsys):
    write_best(tmp_path / "studies" / STUDY, fingerprint=quick_fingerprint(), as_is=None)
    _bad_input(tmp_path, monkeypatch, capsys, "none of its configs finished the confirmation")


def test_a_best_yaml_autotune_dataloader_wrote_on_a_training_run_is_refused(
    tmp_path, monkeypatch, capsys
):
    path = write_best(tmp_path / "studies" / STUDY, fingerprint=quick_fingerprint())
    doc = yaml.safe_load(path.read_text())
    doc["study"]["kept_by"] = "autotune.DataLoader"  # as the run's own best.yaml says
    path.write_text(yaml.safe_dump(doc))
    expected = "was written by autotune.DataLoader on your training run"
    _bad_input(tmp_path, monkeypatch, capsys, expected)


def test_another_model_than_the_tune_s_is_refused(tmp_path, monkeypatch, capsys):
    write_best(tmp_path / "studies" / STUDY, fingerprint=quick_fingerprint(), model="resnet18")
    _bad_input(tmp_path, monkeypatch, capsys, "pass model=resnet18")


@pytest.fixture
def session(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = synthetic(count=48, num_classes=3)
    return make_session([*QUICK, f"study.name={STUDY}", "verify.rounds=2"], source=source)


def test_a_verify_writes_the_table_the_json_and_the_study_attribute(session, tmp_path, capsys):
    folder = tmp_path / "studies" / STUDY
    write_best(folder, fingerprint="test", facts=session.facts)
    study = optuna.create_study(study_name=STUDY, storage=session.conf.study.storage)
    fake = FakeRun(RATES)
    assert command.run(session, run=fake) == 0
    assert [j.epochs.arm for j in fake.jobs] == ["baseline", "loader_kwargs", "build_loader"] * 2
    out = capsys.readouterr().out
    assert "| build_loader | `build_loader(source, best)` | 400.0 |" in out
    assert "| loader_kwargs |" in out and "best.yaml claims 0.95x" in out
    assert (folder / "verify.md").read_text() in out
    doc = json.loads((folder / "verify.json").read_text())
    assert doc["complete"] is True and doc["rounds_finished"] == 2
    assert {c["arm"]: c["verdict"] for c in doc["claims"]} == {
        "loader_kwargs": "holds",  # 0.95x claimed, 185 / 200 measured
        "build_loader": "holds",
    }
    assert len(doc["runs"]) == 6 and doc["samples_per_epoch"] == 48
    stored = optuna.load_study(study_name=STUDY, storage=session.conf.study.storage)
    assert stored.user_attrs[STUDY_KEY]["claims"]["build_loader"]["verdict"] == "holds"
    assert study.study_name == STUDY


def test_a_best_yaml_without_fingerprint_is_verified_with_a_note(session, tmp_path, capsys):
    write_best(tmp_path / "studies" / STUDY, fingerprint=None, facts=session.facts)
    assert command.run(session, run=FakeRun(RATES)) == 0
    assert "the data could not be checked" in capsys.readouterr().out


def test_a_busy_machine_s_wide_spread_is_pointed_out(session, tmp_path, capsys):
    write_best(tmp_path / "studies" / STUDY, fingerprint="test", facts=session.facts)
    rates = {**RATES, "baseline": [40.0, 400.0]}
    assert command.run(session, run=FakeRun(rates)) == 0
    assert "the baseline arm's epochs spread widely" in capsys.readouterr().out


def test_ctrl_c_keeps_the_finished_rounds(session, tmp_path):
    folder = tmp_path / "studies" / STUDY
    write_best(folder, fingerprint="test", facts=session.facts)
    assert command.run(session, run=FakeRun(RATES, stop_at=5)) == 130  # in round 2
    doc = json.loads((folder / "verify.json").read_text())
    assert doc["complete"] is False and doc["rounds_finished"] == 1
    assert [r["arm"] for r in doc["runs"]] == ["baseline", "loader_kwargs", "build_loader"]
    assert "(incomplete)" in (folder / "verify.md").read_text()


@pytest.mark.slow
def test_ctrl_c_on_a_real_verify_keeps_the_first_round(tmp_path):
    write_best(tmp_path / "studies" / STUDY, fingerprint=quick_fingerprint())
    # the first round's last line, then Ctrl-C
    code, before, after = interrupt_cli(
        [*ARGS, "verify.rounds=3", "verify.epochs=1"],
        tmp_path,
        after="verify round 1/3  build_loader",
    )
    assert code == 130, before + after
    doc = json.loads((tmp_path / "studies" / STUDY / "verify.json").read_text())
    assert doc["complete"] is False and doc["rounds_finished"] >= 1
    assert len(doc["runs"]) == 3 * doc["rounds_finished"]
    assert doc["arms"]["baseline"]["figures"]["median"] > 0


@pytest.mark.slow
def test_tune_then_verify_end_to_end(quick_study):
    cwd, _ = quick_study
    result = run_cli([*QUICK, "mode=verify", "verify.rounds=1", "verify.epochs=1"], cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    folder = cwd / "studies" / "synthetic-tiny"
    best = yaml.safe_load((folder / "best.yaml").read_text())
    assert best["workload"]["data_fingerprint"]  # the tune writes what verify checks
    doc = json.loads((folder / "verify.json").read_text())
    reported = {r["arm"]: r["times"]["dataset"] for r in doc["runs"]}
    # build_loader reads what best.yaml's whole pipeline is: the pipeline as it is can win
    as_is = best["pipeline"]["decoder"] == "as_is"
    assert reported == {
        "baseline": "torchvision.datasets.folder.ImageFolder",
        "loader_kwargs": "torchvision.datasets.folder.ImageFolder",
        "build_loader": "torchvision.datasets.folder.ImageFolder"
        if as_is
        else "autotune.pipeline.loader.EncodedImageDataset",
    }
    claim = next(c for c in doc["claims"] if c["arm"] == "build_loader")
    assert claim["claimed"] == best["measured"]["speedup_vs_baseline"]
    assert claim["verdict"] in ("holds", "differs")
    assert "verify round 1/1  build_loader" in result.stdout
    assert "| arm | what runs | samples/s |" in result.stdout
    study = optuna.load_study(
        study_name="synthetic-tiny", storage=f"sqlite:///{cwd}/studies/autotune.db"
    )
    assert study.user_attrs[STUDY_KEY]["complete"] is True

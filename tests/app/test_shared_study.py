"""One study shared by several hosts on a real PostgreSQL server. Each "host" is the real
command in its own process, with its own studies folder (and so its own host lock)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import optuna
import psutil
import pytest
from helpers import QUICK, dashboard_serving, get_json, run_cli, start_cli
from optuna.trial import TrialState
from zygote import Command

from autotune.tuner import study_trials

# the whole budget shared between hosts is what these tests count: no early end by the model
# heartbeats every 2 s: a host is lost after 6 s of silence, more than a loaded machine stalls
SHARED = [*QUICK, "study.n_trials=6", "study.heartbeat_s=2", "study.stop_when_nothing_left=false"]


def _host(args: list[str], cwd: Path, cpus: set[int] | None = None) -> Command:
    """``python -m autotune ARGS`` as one host, in the background (on ``cpus`` alone)."""
    cwd.mkdir(parents=True, exist_ok=True)
    return start_cli(args, cwd, cpus=cpus)


def _study(url: str) -> optuna.Study:
    return optuna.load_study(study_name="synthetic-tiny", storage=url)


@pytest.fixture(scope="module")
def three_hosts(postgres_server, tmp_path_factory):
    """Three hosts running the same command on one study at once: (storage URL, [(folder,
    exit code, stdout, stderr)])."""
    url = postgres_server.new_database()
    root = tmp_path_factory.mktemp("hosts")
    folders = [root / f"host{i}" for i in range(3)]
    hosts = [_host([*SHARED, f"study.storage={url}"], folder) for folder in folders]
    done = []
    for folder, host in zip(folders, hosts, strict=True):
        out, err = host.communicate(timeout=600)
        done.append((folder, host.returncode, out, err))
    return url, done


@pytest.mark.slow
def test_three_hosts_share_the_budget_one_confirmation_and_one_best_yaml(three_hosts):
    url, hosts = three_hosts
    for _, code, _, err in hosts:
        assert code == 0, err[-2000:]
    everything = _study(url).get_trials()
    trials = study_trials.measured(everything)  # a repeat of a measured config measures nothing
    # the budget between them: none lost, none twice, none left running
    assert len(trials) == 6 and len({t.number for t in everything}) == len(everything)
    # complete, or pruned: a clear loser of its way stops after two sub-windows
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in everything)
    assert any(t.state == TrialState.COMPLETE for t in everything)
    assert len({t.user_attrs["host"] for t in trials}) >= 2
    # one host confirmed; the others waited for it and wrote its best.yaml
    confirmed = [out for _, _, out, _ in hosts if "confirm round 1/1" in out]
    waited = [out for _, _, out, _ in hosts if "confirms the finalists" in out]
    assert len(confirmed) == 1 and len(waited) == 2
    files = {(folder / "studies/synthetic-tiny/best.yaml").read_bytes() for folder, *_ in hosts}
    assert len(files) == 1
    for folder, _, out, _ in hosts:
        assert (folder / "studies/synthetic-tiny/report.md").is_file()
        assert "<- build_loader" in out  # every host prints the summary table
    assert "autotune@127.0.0.1" in files.pop().decode()  # the storage, password or not


@pytest.mark.slow
def test_optuna_dashboard_reads_the_shared_study(three_hosts):
    url, _ = three_hosts
    with dashboard_serving(url) as base:
        (study,) = get_json(f"{base}/api/studies")["study_summaries"]
        detail = get_json(f"{base}/api/studies/{study['study_id']}")
    repeats = [t for t in detail["trials"] if "repeat_of" in {a["key"] for a in t["user_attrs"]}]
    assert len(detail["trials"]) - len(repeats) == 6  # a repeat measured nothing
    assert {"winner", "best_yaml", "machine"} <= {a["key"] for a in detail["user_attrs"]}


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to take one away")
def test_a_host_of_another_kind_is_refused_in_one_line(three_hosts, tmp_path):
    url, _ = three_hosts
    before = len(_study(url).get_trials())
    args = [*SHARED, f"study.storage={url}", "study.n_trials=8"]
    one_cpu = _host(args, tmp_path, cpus={min(os.sched_getaffinity(0))})
    _, err = one_cpu.communicate(timeout=240)
    assert one_cpu.returncode == 2
    (line,) = err.strip().splitlines()
    assert "is measured on other hosts" in line and "usable CPUs there, 1 here" in line
    assert len(_study(url).get_trials()) == before  # nothing measured, nothing lost


def _kill_host(host: Command) -> None:
    """The host dies at once, as on a power loss: it and every process it started. Each is
    stopped first, until a reading of the family finds no new one (a process forking while
    it is read would escape one reading, and its trial would beat on), then all are killed."""
    family: set[int] = set()
    while new := {host.pid, *(p.pid for p in psutil.Process(host.pid).children(True))} - family:
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        family |= new
    for pid in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    host.communicate()


@pytest.mark.slow
def test_a_host_that_dies_mid_trial_leaves_a_failed_trial_and_the_study_goes_on(
    postgres_url, tmp_path
):
    args = [*SHARED, f"study.storage={postgres_url}", "study.n_trials=4"]
    dying = _host(args, tmp_path / "dying")
    deadline = time.monotonic() + 180
    while True:  # until it measures a trial
        names = optuna.get_all_study_names(postgres_url)
        running = "synthetic-tiny" in names and _study(postgres_url).get_trials(
            states=(TrialState.RUNNING,)
        )
        if running:
            break
        assert dying.poll() is None and time.monotonic() < deadline, "no trial started"
        time.sleep(0.2)
    _kill_host(dying)
    (tmp_path / "survivor").mkdir()
    survivor = run_cli(args, tmp_path / "survivor")
    assert survivor.returncode == 0, survivor.stderr[-2000:]
    trials = study_trials.measured(_study(postgres_url).get_trials())
    assert len(trials) == 4 and not [t for t in trials if t.state == TrialState.RUNNING]
    (lost,) = [t for t in trials if t.state == TrialState.FAIL]
    assert lost.user_attrs["failure"]["kind"] == "host_lost"
    # its heartbeats stopped, or it died before its first
    assert lost.user_attrs["failure"]["message"] in survivor.stdout
    assert (tmp_path / "survivor/studies/synthetic-tiny/best.yaml").is_file()

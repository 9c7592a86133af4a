"""What several test modules share: the CLI run as a user runs it, the quick study's settings,
a session without its dataset, and a trial asked of a search space. Imported as ``helpers``
(tests/ is on the path); fixtures live in the conftest files."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import optuna
import zygote

from autotune import machine
from autotune.app.composition import compose, to_config
from autotune.app.selfcheck_online import WINDOW as SELFCHECK_WINDOW
from autotune.app.selfcheck_paths import QUICK as SELFCHECK_QUICK
from autotune.pipeline.sources import Source
from autotune.schema import AutotuneConfig
from autotune.session import SearchSpace, Session

TESTS = Path(__file__).parent
# window=quick with 2 sub-windows (its own are 3; its real epochs, epoch_sub_windows, are 2):
# a quarter less time a trial, for studies whose figures are not what their tests check
SUB_WINDOWS = 2
QUICK_WINDOW = ["window=quick", f"window.sub_windows={SUB_WINDOWS}"]
# Small but real: JPEGs on disk, DataLoader workers, SQLite storage, forked trials; the
# settings the self-check's study runs, QUICK_WINDOW among them. No worth table: a test that
# checks it adds WORTH.
QUICK = list(SELFCHECK_QUICK)
assert set(QUICK_WINDOW) <= set(QUICK), "the tests count QUICK's trials' SUB_WINDOWS"
# what each setting is worth: measured even in a short search (the table takes seconds)
WORTH = ["study.worth_budget=2"]
# a trial's window of a few batches, untimed by length or spread: where the figure is not the
# point (the self-check's, for autotune.DataLoader)
BRIEF_WINDOW = SELFCHECK_WINDOW
# the benchmark shrunk with Hydra overrides (a grid of 6, short windows): its tests check what
# is measured and written, not the figures, which come from full runs
BENCHMARK_TINY = [
    "search_space=quick",
    "window=quick",
    "window.sub_windows=2",
    "search_space.knobs.decoder.choices=[pil]",
    "dataset.count=32",
    "dataset.num_classes=2",
    "recipe.crop_size=48",
    "batch_size=8",
    "study.n_startup_trials=1",
    "study.confirm_top_k=1",
    "study.confirm_rounds=1",
    "study.worth_budget=0",  # the worth table is tune's, tested there
    "diagnose.shards=false",  # files against shards: tested in tests/diagnose
]
# the online scenarios' offline study, shrunk alike: no diagnosis, its own space's knobs
ONLINE_BENCHMARK_TINY = [
    a for a in BENCHMARK_TINY if not a.startswith(("diagnose.", "search_space.knobs"))
]


def env_with_tests(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with the tests' folder as PYTHONPATH (where a command finds
    the tests' own modules: a user's model, a faulty step), and ``extra``."""
    return {**os.environ, "PYTHONPATH": str(TESTS), **(extra or {})}


def run_cli(
    args: list[str], cwd: Path, *, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m autotune ARGS`` in ``cwd``, as a user would run it (its process forked from
    this test process's ``zygote``, which has imported the package)."""
    return run_python(["-m", "autotune", *args], cwd, env=env_with_tests(env), timeout=timeout)


def run_benchmark(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m autotune.benchmark ARGS`` in ``cwd``."""
    return run_python(["-m", "autotune.benchmark", *args], cwd, timeout=300)


# this test process's one zygote: every command a test starts forks from it (its first one
# starts it, the package imported: seconds of CPU a second one would spend again)
ZYGOTE = zygote.Zygote()


def zygote_pid() -> int | None:
    """The process the tests' commands fork from (``run_python``), where it has started."""
    return ZYGOTE.pid


def run_python(
    args: list[str], cwd: Path, *, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` (``-m MODULE ...`` or ``SCRIPT ...``) in ``cwd`` with ``env`` (this
    process's by default), its output captured as text: forked from the zygote."""
    command = [sys.executable, *args]
    return ZYGOTE.run(command, cwd, dict(os.environ) if env is None else env, timeout)


def start_python(
    args: list[str],
    cwd: Path,
    *,
    env: dict[str, str] | None = None,
    stdout_pipe: bool = False,
    terminal: str | None = None,
    cpus: set[int] | None = None,
) -> zygote.Command:
    """``python ARGS`` started in ``cwd`` and left running, forked from the zygote as
    ``run_python``'s are: several at once where a test starts several, its stdout a stream
    with ``stdout_pipe`` or the ``terminal`` of that path, on ``cpus`` alone where given."""
    command = [sys.executable, *args]
    env = dict(os.environ) if env is None else env
    return ZYGOTE.start(command, cwd, env, stdout_pipe=stdout_pipe, terminal=terminal, cpus=cpus)


def start_cli(
    args: list[str],
    cwd: Path,
    *,
    stdout_pipe: bool = False,
    terminal: str | None = None,
    cpus: set[int] | None = None,
) -> zygote.Command:
    """``python -m autotune ARGS`` started in ``cwd`` and left running (``start_python``)."""
    output = {"stdout_pipe": stdout_pipe, "terminal": terminal}
    return start_python(["-m", "autotune", *args], cwd, env=env_with_tests(), **output, cpus=cpus)


def interrupt_cli(
    args: list[str],
    cwd: Path,
    *,
    after: str,
    wait_s: float = 180,
    signum: int = signal.SIGINT,
    before_signal: Callable[[zygote.Command], None] | None = None,
) -> tuple[int, str, str]:
    """``python -m autotune ARGS`` in ``cwd``, Ctrl-C (or ``signum``) once a line of its output
    contains ``after`` (or ``wait_s`` passed), ``before_signal`` called on the process just
    before: the exit code, what it printed before the signal and what it printed after
    (stdout, then stderr)."""
    proc = start_cli(args, cwd, stdout_pipe=True)
    lines = []
    deadline = time.monotonic() + wait_s
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if after in line or time.monotonic() > deadline:
            break
    if before_signal is not None:
        before_signal(proc)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    return proc.wait(), "".join(lines), out + err


def config_of(overrides: list[str] | tuple[str, ...] = ()) -> AutotuneConfig:
    """``python -m autotune OVERRIDES``'s config, composed as the CLI composes it (the same
    overrides and ./conf's files again in a process: a copy, ``composition.compose``)."""
    return to_config(compose(list(overrides)))


def make_session(
    overrides: list[str] = (),  # type: ignore[assignment]
    *,
    source: Source | None = None,
    facts: machine.MachineFacts | None = None,
    device: str = "cpu",
) -> Session:
    """A session from ``python -m autotune OVERRIDES``'s config, without loading its dataset:
    ``source`` (None where the test's fake runner never reads it) stands in for it."""
    config = config_of(overrides)
    facts = facts or machine.detect(want_cuda=False)
    space = SearchSpace.from_config(
        config.search_space, facts, device=device, batch_size=config.batch_size
    )
    return Session(config, facts, device, source, space, "test")  # type: ignore[arg-type]


def ask(space: SearchSpace, fixed: dict | None = None) -> optuna.Trial:
    """A trial of a fresh study that ``space`` has suggested its knobs to (``fixed`` first)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study()
    if fixed:
        study.enqueue_trial(fixed)
    trial = study.ask()
    space.suggest(trial)
    return trial


def count_reads(monkeypatch, **classes: type) -> dict[str, int]:
    """Counts the ``__getitem__`` calls of each class in this process (a name per class);
    the counts grow as the patched methods run."""
    counts = dict.fromkeys(classes, 0)
    for name, cls in classes.items():
        original = cls.__getitem__

        def counted(self, index, _name=name, _original=original):
            counts[_name] += 1
            return _original(self, index)

        monkeypatch.setattr(cls, "__getitem__", counted)
    return counts


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def dashboard_serving(storage: str) -> Iterator[str]:
    """The real optuna-dashboard serving ``storage`` on loopback: its base URL, once it
    answers."""
    executable = shutil.which("optuna-dashboard")
    assert executable, "optuna-dashboard is a dependency: pip install -e ."
    port = _free_port()
    server = subprocess.Popen(
        [executable, storage, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                get_json(f"{base}/api/studies")
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError("optuna-dashboard did not answer on loopback") from None
                time.sleep(0.3)
        yield base
    finally:
        server.terminate()
        server.wait(10)


def torchrun(script: Path, nproc: int, *args: str) -> None:
    """``torchrun --nproc_per_node nproc script args`` on this machine (CPU), as a user runs
    a training script (the launcher and its ranks forked from the zygote)."""
    command = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = run_python([*command, str(script), *args], Path.cwd(), env=env, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]


def workers_and_decoder_study(*trials: tuple[int, str, float]) -> optuna.Study:
    """An in-memory study of complete trials, each (num_workers, decoder, samples/s): what
    fANOVA's importances are read from."""
    space = {
        "num_workers": optuna.distributions.IntDistribution(0, 4),
        "decoder": optuna.distributions.CategoricalDistribution(["pil", "cv"]),
    }
    study = optuna.create_study(direction="maximize")
    for workers, decoder, rate in trials:
        params = {"num_workers": workers, "decoder": decoder}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=space, value=rate))
    return study

"""``python -m autotune.selfcheck``: does every GPU path of the project work on this machine?

The day a GPU machine is lent for a few minutes, one command runs each path once at a small
size: each decoder (nvJPEG and DALI where installed), augmentation on the GPU against the
CPU recipe, uint8 transfer, pin_memory, the device prefetcher, channels_last, bf16 and fp16
(with its GradScaler) steps, a 2-rank NCCL trial where there are 2 GPUs, ``autotune.DataLoader``
exploring while a model trains, and a short study (``device=cuda model=resnet50
precision=bf16``) followed by its ``mode=verify``. Every machine also runs the CPU half: each
CPU decoder, the augmentation recipes, channels_last and bf16 steps, a 2-rank gloo trial,
``autotune.DataLoader``, and a quick study on the tiny model with its ``mode=verify``. A path
that cannot run here is listed as skipped, with why.

It prints one markdown table (path, result, why, seconds) and writes it to ``--out``
(``selfcheck.md``). Exit code 0: nothing failed; 1: a check failed (each failure is one line
in the table, and the other checks still run); 2: bad arguments; 130 Ctrl-C, 143 SIGTERM (the
table so far is written, the checks not run listed as skipped). A study's verify passes when
every claim was measured: "differs" on a busy machine is a figure, not a broken path.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from autotune.app import cli, exit_codes
from autotune.app.selfcheck_online import online_loader
from autotune.app.selfcheck_paths import (
    ON_DEVICE,
    Bench,
    Check,
    NotRun,
    augment,
    cpu_decoder,
    device_decoder,
    device_prefetcher,
    fewer_than_two_gpus,
    no_cuda,
    pin_memory,
    train_step,
    uint8_transfer,
)
from autotune.errors import one_line
from autotune.pipeline import decoders, recipes
from autotune.pipeline.config import PipelineConfig
from autotune.runtime.job import TrialJob
from autotune.runtime.stop import exit_status, stoppable
from autotune.runtime.trial import run_trial

log = logging.getLogger("autotune.selfcheck")

VERIFY = ["mode=verify", "verify.rounds=1"]  # one round of the three arms: the path, not figures
CLI_TIMEOUT_S = {"cpu": 300.0, "cuda": 300.0}
SIGNALLED_CLI_WAIT_S = 60.0  # for a CLI told to stop to save its study and end
INTERRUPTED = "interrupted (Ctrl-C or SIGTERM)"
# the 2-rank trial checks the path, not a figure: two short spans, never lengthened
RANKS_WINDOW = {"sub_windows": 2, "warmup_extra_batches": 1, "target_spread": 0.0}


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str  # passed | failed | skipped
    why: str  # what it saw, why it failed (one line), or why it was skipped
    seconds: float


# --- the paths that run in other processes: a trial of 2 ranks, the study, its verify -------


def two_ranks(device: str) -> Callable[[Bench], str]:
    """A trial of 2 ranks (``run_trial``): gloo on the CPU, NCCL with one GPU per rank."""

    def run(bench: Bench) -> str:
        conf = bench.conf(device)
        job = TrialJob(
            pipeline=PipelineConfig(batch_size=conf.batch_size, num_workers=1, prefetch_factor=2),
            source=bench.source, model=conf.model, recipe=conf.recipe, device=device,
            window=replace(conf.window, **RANKS_WINDOW),
            seed=conf.seed, precision=conf.precision, ranks=2,
        )  # fmt: skip
        outcome = bench.run_one(job, timeout_s=conf.study.trial_timeout)
        assert outcome.status == "ok", f"{outcome.status}: {outcome.failure}"
        rates = outcome.measurement.rank_samples_per_s
        assert len(rates) == 2 and all(r > 0 for r in rates), f"rank rates {rates}"
        return f"{outcome.measurement.samples_per_s:.0f} samples/s, both ranks measured"

    return run


def _cli(bench: Bench, args: list[str], log_path: Path, timeout_s: float) -> None:
    """``python -m autotune ARGS`` as a user runs it, in a session of its own: a stop reaches
    it once, as the signal this process got (it saves its study and ends)."""
    with log_path.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "autotune", *args],
            cwd=bench.folder, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline, forwarded = time.monotonic() + timeout_s, False
        while proc.poll() is None:
            if bench.stop.is_set() and not forwarded:
                proc.send_signal(exit_status() - 128)
                forwarded, deadline = True, time.monotonic() + SIGNALLED_CLI_WAIT_S
            if time.monotonic() > deadline:  # its session: the CLI and its fork server
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise TimeoutError(f"no result after {timeout_s:.0f} s ({log_path.name})")
            time.sleep(0.2)
    if proc.returncode != 0:
        lines = [line for line in log_path.read_text().splitlines() if line.strip()]
        last = lines[-1] if lines else "no output"
        raise RuntimeError(f"exit code {proc.returncode}: {last} ({log_path.name})")


def study(device: str) -> Callable[[Bench], str]:
    def run(bench: Bench) -> str:
        conf, log_path = bench.conf(device), bench.folder / f"{device}-study.log"
        _cli(bench, bench.overrides(device), log_path, CLI_TIMEOUT_S[device])
        best = Path(conf.studies_dir) / conf.study.name / "best.yaml"
        assert best.is_file(), f"{best} not written"
        bench.studied.add(device)
        return f"best.yaml written (the tests' quick settings, {' '.join(ON_DEVICE[device])})"

    return run


def verify(device: str) -> Callable[[Bench], str]:
    def run(bench: Bench) -> str:
        if device not in bench.studied:
            raise NotRun(f"no best.yaml to verify: the {device} study did not run or finish")
        conf = bench.conf(device)
        args = [*bench.overrides(device), *VERIFY]
        _cli(bench, args, bench.folder / f"{device}-verify.log", CLI_TIMEOUT_S[device])
        folder = Path(conf.studies_dir) / conf.study.name
        assert (folder / "verify.md").is_file(), f"{folder / 'verify.md'} not written"
        claims = json.loads((folder / "verify.json").read_text())["claims"]
        return "verify.md written: " + ", ".join(f"{c['arm']} {c['verdict']}" for c in claims)

    return run


def checks() -> list[Check]:
    """Every path, the CPU's first, in the order they run."""
    every_recipe = recipes.RECIPES.values()
    cpu_decoders = [c for c in decoders.DECODERS.values() if not c.on_device]
    device_decoders = [c for c in decoders.DECODERS.values() if c.on_device]
    return [
        *(Check(f"cpu decoder {c.name}", cpu_decoder(c)) for c in cpu_decoders),
        *(Check(f"cpu augment {r.name}", augment(r, "cpu")) for r in every_recipe),
        Check("cpu channels_last step", train_step("cpu", "fp32", True)),
        Check("cpu bf16 step", train_step("cpu", "bf16", False)),
        Check("cpu 2 ranks (gloo)", two_ranks("cpu")),
        Check("cpu autotune.DataLoader", online_loader("cpu")),
        Check("cpu study", study("cpu")),
        Check("cpu verify", verify("cpu")),
        *(Check(f"cuda decoder {c.name}", device_decoder(c), c.unavailable_reason)
          for c in device_decoders),
        *(Check(f"cuda augment {r.name} on the GPU", augment(r, "cuda"), no_cuda)
          for r in every_recipe),
        Check("cuda uint8 transfer", uint8_transfer, no_cuda),
        Check("cuda pin_memory", pin_memory, no_cuda),
        Check("cuda device prefetcher", device_prefetcher, no_cuda),
        Check("cuda channels_last step", train_step("cuda", "fp32", True), no_cuda),
        Check("cuda bf16 step", train_step("cuda", "bf16", False), no_cuda),
        Check("cuda fp16 step with GradScaler", train_step("cuda", "fp16", False), no_cuda),
        Check("cuda 2 ranks (nccl)", two_ranks("cuda"), fewer_than_two_gpus),
        Check("cuda autotune.DataLoader", online_loader("cuda"), no_cuda),
        Check("cuda study", study("cuda"), no_cuda),
        Check("cuda verify", verify("cuda"), no_cuda),
    ]  # fmt: skip


# --- the runner and its table ---------------------------------------------------------------


def run_check(check: Check, bench: Bench) -> CheckResult:
    """One check: skipped with its reason, passed with what it saw, or failed with its
    exception on one line; never raises (but a second Ctrl-C)."""
    if bench.stop.is_set():
        return CheckResult(check.name, "skipped", INTERRUPTED, 0.0)
    started = time.monotonic()
    try:
        reason = check.skip_reason()
        if reason:
            return CheckResult(check.name, "skipped", reason, time.monotonic() - started)
        status, why = "passed", check.run(bench)
    except NotRun as exc:
        status, why = "skipped", str(exc)
    except Exception as exc:  # noqa: BLE001 - a failed check is a row, and the others still run
        status, why = "failed", f"{type(exc).__name__}: {one_line(exc)}"
    if status == "failed" and bench.stop.is_set():  # taken down by the stop, not broken
        status, why = "skipped", INTERRUPTED
    return CheckResult(check.name, status, why, time.monotonic() - started)


def run_checks(chosen: list[Check], bench: Bench) -> list[CheckResult]:
    results = []
    for check in chosen:
        results.append(run_check(check, bench))
        done = results[-1]
        log.info("%-7s %s (%.1f s): %s", done.status, done.name, done.seconds, done.why)
    return results


def table(results: list[CheckResult]) -> str:
    """The results as a markdown page: what ran where, the counts, one row per path."""
    counts = {s: sum(r.status == s for r in results) for s in ("passed", "failed", "skipped")}
    total = sum(r.seconds for r in results)
    here = (
        f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
        if torch.cuda.is_available()
        else "no CUDA device"
    )
    lines = [
        "# autotune self-check",
        "",
        f"torch {torch.__version__}, {here}: "
        + ", ".join(f"{n} {s}" for s, n in counts.items())
        + f" in {total:.0f} s",
        "",
        "| path | result | why | seconds |",
        "|---|---|---|---:|",
    ]
    for r in results:
        why = r.why.replace("|", "\\|")
        lines.append(f"| {r.name} | {r.status} | {why} | {r.seconds:.1f} |")
    return "\n".join(lines) + "\n"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One line, exit code 2 (argparse's default adds the whole usage)."""
        self.exit(2, f"autotune.selfcheck: error: {message} (see --help)\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m autotune.selfcheck", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("selfcheck.md"))
    parser.add_argument("--only", metavar="NAME", help="only the paths whose name has NAME")
    parser.add_argument(
        "--keep", action="store_true", help="keep the working folder: studies, the CLI's logs"
    )
    args = parser.parse_args(argv)
    chosen = [c for c in checks() if args.only is None or args.only in c.name]
    if not chosen:
        names = ", ".join(c.name for c in checks())
        parser.error(f"no path's name has {args.only!r}; the paths: {names}")
    cli.start_logging()

    def body() -> int:
        folder = Path(tempfile.mkdtemp(prefix="autotune-selfcheck-"))
        try:
            with stoppable(run_trial) as (stop, run_one):
                results = run_checks(chosen, Bench(folder, stop, run_one))
        finally:
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
        text = table(results)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(text, flush=True)
        print(f"written to {args.out}", flush=True)
        if args.keep:
            print(f"studies and CLI logs kept in {folder}", flush=True)
        if stop.is_set():
            return exit_status()
        return 1 if any(r.status == "failed" for r in results) else 0

    return exit_codes.exit_code(
        "autotune.selfcheck", body, interrupted="interrupted: no table written"
    )

"""``python -m autotune.benchmark --scenario small|hd``: how good is the tuner, side by side.

One run measures, on this machine and in this order:

1. the **grid oracle**: every config of a reduced space (``search_space=benchmark``, 70
   configs), each one trial, no pruning: the true best of that space;
2. the **tuner**: ``python -m autotune``'s own search and confirmation on the same space with a
   quarter of the grid's trials;
3. the **final head-to-head**: the oracle's best, the tuner's best, the baseline (the pipeline
   as it is under PyTorch's defaults), the common recipe of DataLoader guides and a cores
   heuristic (both applied to the pipeline as it is), re-measured interleaved for
   ``--rounds`` rounds (drift on a shared machine hits all of them alike);
4. the **diagnosis** of the tuner's pick (``mode=diagnose``'s measurements): its CPU-work
   bound, the most any worker count could deliver on these CPUs, and on a CPU device the
   tighter limit where the train step shares those CPUs with the loader.

``--scenario storage`` runs the same stages on the synthetic set behind storage that answers
every open and read 20 ms late (``python -m autotune.slow_storage``, a FUSE mount: the latency
is added, not a network's), in a space whose workers go far past the cores; the head-to-head
adds the grid's best config with no more workers than cores. ``--scenario cached`` plans 90
epochs (``study.epochs=90``) with a decoded copy in the space; it adds the grid's best config
without a copy.

``--scenario online`` measures whole runs of the PyTorch tutorial's training script
(``--epochs`` each): untouched, with ``autotune.DataLoader`` (a first run and a second on its
storage), and with an offline study's ``loader_kwargs``, the study's time counted
(``app.online_benchmark``); ``--scenario online_storage`` the same with its data behind storage
that answers every open and read 5 ms late, where reads wait and workers beyond the cores pay.

``--scenario ranks`` measures something else: settings tuned for 2 ranks with both running,
against the settings people copy to their ranks (``app.ranks_benchmark``).

It writes ``studies/benchmark/<scenario>/results.json`` and ``results.md``; both studies stay in
``studies/benchmark/<scenario>/benchmark.db`` for the dashboard. Extra ``key=value`` arguments
are Hydra overrides, as for ``python -m autotune`` (``window=quick`` for a fast smoke run).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import torch

from autotune.app import (
    cli,
    exit_codes,
    online_benchmark,
    ranks_benchmark,
    slow_storage,
)
from autotune.app.benchmark_scenarios import SCENARIOS, Scenario
from autotune.app.composition import compose, to_config
from autotune.diagnose.measure import diagnose
from autotune.errors import UsageError
from autotune.pipeline.config import AS_IS, PipelineConfig
from autotune.report import online_results
from autotune.report.benchmark_results import (
    RIVALS,
    BenchmarkRun,
    markdown,
    ranks_markdown,
    results,
)
from autotune.runtime.lock import host_lock
from autotune.runtime.stop import stoppable
from autotune.runtime.trial import run_trial
from autotune.session import Session
from autotune.session.session import Run
from autotune.tuner.confirm import Finalist, confirm
from autotune.tuner.grid import grid_best, run_grid
from autotune.tuner.objective import Objective
from autotune.tuner.tune import tune

log = logging.getLogger("autotune.benchmark")


def contenders(session: Session) -> dict[str, PipelineConfig]:
    """The hand-set configs the tuner is compared with."""
    space, facts, device = session.space, session.facts, session.device
    batch_size = dict(space.defaults)["batch_size"]
    cpus = facts.usable_cpus
    defaults = space.suggest(
        optuna.trial.FixedTrial(space.baseline_params(default_threads=session.default_threads))
    )
    # folklore, applied as users apply it: to their own pipeline's DataLoader. The guides'
    # recipe: workers = cores (at most 8), deep prefetch, kept alive
    recipe = PipelineConfig(
        batch_size=batch_size,
        num_workers=min(8, cpus),
        prefetch_factor=4,
        persistent_workers=True,
        pin_memory=device == "cuda",
        decoder=AS_IS,
    )
    heuristic = PipelineConfig(
        batch_size=batch_size, num_workers=max(1, int(0.75 * cpus)), decoder=AS_IS
    )
    return {"defaults": defaults, "recipe": recipe, "heuristic": heuristic}


def _study(session: Session, name: str, storage: str, n_trials: int) -> Session:
    # cold: the tuner's search is what the benchmark measures, not the picks of earlier runs
    study = dataclasses.replace(
        session.conf.study, name=name, storage=storage, n_trials=n_trials, warm_start=False
    )
    return session.with_conf(dataclasses.replace(session.conf, study=study))


def _rival(kind: str, grid_study: optuna.Study, session: Session) -> list[Finalist]:
    """The grid's best of the configs that folklore's limit allows, as a contender."""
    if not kind:
        return []
    cores = session.cpus_per_rank
    allowed = {
        "capped": lambda c: c.num_workers <= cores,
        "uncached": lambda c: c.cache == "none",
    }[kind]
    number, config = grid_best(grid_study, allowed)
    return [(RIVALS[kind][0], number, config)]


def _measure(
    session: Session, folder: Path, rounds: int, run_one: Run, chosen: Scenario
) -> BenchmarkRun:
    """The grid, the tuner on a share of its budget, the head-to-head, the diagnosis."""
    storage = f"sqlite:///{(folder / 'benchmark.db').resolve()}"
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    scenario = folder.name
    n_grid = len(session.space.grid())
    n_tuner = max(2, round(chosen.tuner_budget * n_grid))
    # the same lock as python -m autotune: two measuring runs on one host would disturb both
    with host_lock(Path(session.conf.studies_dir)), stoppable(run_one) as (stop, run_one):
        grid = _study(session, f"{scenario}-grid-{stamp}", storage, n_grid)
        grid_study, grid_s = run_grid(Objective(grid, run=run_one), stop)
        if stop.is_set():  # Ctrl-C in the grid: nothing after it is worth starting
            raise KeyboardInterrupt
        oracle_number, oracle = grid_best(grid_study)
        tuner = _study(session, f"{scenario}-tuner-{stamp}", storage, n_tuner)
        log.info("tuner: %d trials (%.0f%% of the grid)", n_tuner, 100 * n_tuner / n_grid)
        started = time.monotonic()
        result, _ = tune(tuner)
        tuner_s = time.monotonic() - started
        if stop.is_set() or result.best is None:
            raise KeyboardInterrupt if stop.is_set() else UsageError("no tuner trial finished")
        picked: list[Finalist] = [
            ("oracle", oracle_number, oracle),
            ("tuner", None, result.best),
            *_rival(chosen.rival, grid_study, session),
            *((name, None, c) for name, c in contenders(session).items()),
        ]
        log.info("head-to-head: %d contenders, %d interleaved rounds", len(picked), rounds)
        # ranked by the oracle's metric: over an epoch, or steady (study.epoch_aware)
        confirmed = confirm(session, picked, rounds=rounds, run=run_one)
        if stop.is_set():
            raise KeyboardInterrupt
        log.info("diagnosing the tuner's pick for its CPU-work bound")
        diagnosis = diagnose(session, result.best, run=run_one)
    return BenchmarkRun(
        session=session,
        storage=storage,
        grid_name=grid.conf.study.name,
        tuner_name=tuner.conf.study.name,
        grid_trials=n_grid,
        tuner_trials=n_tuner,
        grid_s=grid_s,
        tuner_s=tuner_s,
        result=result,
        oracle=oracle,
        confirmed=confirmed,
        diagnosis=diagnosis,
        rounds=rounds,
    )


def run(
    scenario: str,
    overrides: list[str],
    *,
    rounds: int,
    out: Path,
    epochs: int = 30,
    offline_best: Path | None = None,
    latency_ms: float | None = None,
    run_one: Run = run_trial,
) -> dict[str, Any]:
    """The whole benchmark; returns what results.json holds. ``latency_ms``: the slow
    storage's, in place of the scenario's."""
    chosen = SCENARIOS[scenario]
    if latency_ms is not None:
        if not chosen.latency_ms:
            raise UsageError("--latency-ms is for a scenario that reads through slow storage")
        chosen = chosen.with_latency(latency_ms)
    conf = to_config(compose([*chosen.overrides, *overrides]))
    session = Session.build(conf)
    folder = out / scenario
    folder.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python -m autotune.benchmark", f"--scenario {scenario}", *overrides])
    if chosen.ranks > 1:
        together = Session.build(dataclasses.replace(conf, ranks=chosen.ranks))
        measured = ranks_benchmark.measure(session, together, folder, rounds, run_one)
        return {**measured, "about": chosen.about, "command": command}
    slow = f"scenario {scenario} reads through slow storage"
    with slow_storage.dataset_behind(session.source.root, chosen.latency_ms, slow) as where:
        every = [*chosen.overrides, *overrides, *where]
        session = Session.build(to_config(compose(every))) if where else session
        if chosen.online:
            measured = online_benchmark.measure(
                session, every, folder, rounds, epochs, offline_best=offline_best
            )
            read_from = str(session.source.root)  # the tutorial script's data, as it read it
            return {**measured, "about": chosen.about, "command": command, "read_from": read_from}
        measured = _measure(session, folder, rounds, run_one, chosen)
    return results(
        measured,
        scenario=scenario,
        about=chosen.about,
        command=command,
        tuner_budget=chosen.tuner_budget,
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One line, exit code 2 (argparse's default adds the whole usage)."""
        self.exit(2, f"autotune.benchmark: error: {message} (see --help)\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m autotune.benchmark", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    parser.add_argument("--rounds", type=int, default=3, help="head-to-head rounds (default 3)")
    parser.add_argument("--epochs", type=int, default=30, help="each run's epochs (online)")
    parser.add_argument(
        "--offline-best",
        type=Path,
        help="online: the best.yaml of an offline study of the same job run before (its "
        "recorded time is counted), instead of running one",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        help="storage, online_storage: the latency added to each open and read, in ms "
        "(default 20, 5)",
    )
    parser.add_argument("--out", type=Path, default=Path("studies/benchmark"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. window=quick")
    args = parser.parse_args(argv)
    cli.start_logging()
    for flag, value in (("--rounds", args.rounds), ("--epochs", args.epochs)):
        if value < 1:
            print(f"autotune.benchmark: error: {flag} must be >= 1", file=sys.stderr)
            return 2
    if args.latency_ms is not None and args.latency_ms <= 0:
        print("autotune.benchmark: error: --latency-ms must be > 0", file=sys.stderr)
        return 2
    if SCENARIOS[args.scenario].needs_cuda and not torch.cuda.is_available():
        print(f"scenario {args.scenario} needs a CUDA device: skipped (none usable here)")
        return 0

    def body() -> int:
        chosen = SCENARIOS[args.scenario]
        results = run(
            args.scenario,
            args.overrides,
            rounds=args.rounds,
            out=args.out,
            epochs=args.epochs,
            offline_best=args.offline_best,
            latency_ms=args.latency_ms,
        )
        folder = args.out / args.scenario
        (folder / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        if chosen.online:
            text = online_results.markdown(results)
        else:
            text = ranks_markdown(results) if chosen.ranks > 1 else markdown(results)
        (folder / "results.md").write_text(text)
        print(text)
        print(f"results: {folder / 'results.json'}")
        return 0

    return exit_codes.exit_code(
        "autotune.benchmark", body, interrupted="interrupted: no results written"
    )


if __name__ == "__main__":
    sys.exit(main())

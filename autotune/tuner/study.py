"""The Optuna study: storage, sampler, pruner, the enqueued baseline, the search, and the
result after confirmation."""

from __future__ import annotations

import dataclasses
import functools
import logging
import signal
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import optuna
import torch
from optuna.trial import TrialState

from autotune.errors import UsageError
from autotune.machine import MachineFacts
from autotune.pipeline.config import PipelineConfig
from autotune.pipeline.sources import Source
from autotune.runtime.trial import HINTS, TrialOutcome, run_trial
from autotune.schema import AutotuneConfig
from autotune.session.space import SearchSpace
from autotune.tuner.confirm import (
    Confirmed,
    confirm,
    finalists,
    from_search,
    pick_winner,
    reduced_decode_note,
)
from autotune.tuner.objective import Objective, TrialFailed, make_job
from autotune.tuner.progress import FINISHED, StudyProgress

log = logging.getLogger(__name__)

METRIC = "samples_per_s"


@dataclass(frozen=True)
class StudyResult:
    study_name: str
    storage: str
    best: PipelineConfig | None  # None: no trial finished
    best_label: str
    confirmed: tuple[Confirmed, ...]
    counts: dict[str, int]  # complete / pruned / fail
    failures: dict[str, int]  # failure kind -> trials
    ceiling_samples_per_s: float | None
    notes: tuple[str, ...] = ()
    interrupted: bool = False
    # samples/s the decode + augment work allows on all usable CPUs: one figure, or one per
    # decoder; None until measured
    cpu_work_bound_samples_per_s: float | dict[str, float] | None = None
    search_wall_s: float = 0.0  # this run's search (TPE and polish), without the confirmation

    def _find(self, label: str) -> Confirmed | None:
        return next((c for c in self.confirmed if c.label == label), None)

    @property
    def winner(self) -> Confirmed | None:
        return self._find(self.best_label)

    @property
    def baseline(self) -> Confirmed | None:
        return self._find("baseline")

    @property
    def speedup(self) -> float | None:
        if self.winner is None or self.baseline is None or not self.baseline.median:
            return None
        return self.winner.median / self.baseline.median


def make_pruner() -> optuna.pruners.BasePruner:
    """Prunes only the clear losers: a running median (of the sub-windows so far, which
    shrugs off one slow sub-window) in the bottom quarter of what earlier trials had reached by
    the same sub-window, from the third sub-window on."""
    return optuna.pruners.PercentilePruner(75.0, n_startup_trials=4, n_warmup_steps=2)


def _constraints(trial: optuna.trial.FrozenTrial) -> tuple[float]:
    return (trial.user_attrs.get("constraint", 0.0),)  # > 0: over study.memory_budget_gb


def open_study(cfg: AutotuneConfig, fingerprint: str) -> optuna.Study:
    """Creates or resumes the study; refuses to resume one whose workload or space changed."""
    if cfg.study.storage.startswith("sqlite:///"):
        Path(cfg.study.storage.removeprefix("sqlite:///")).parent.mkdir(
            parents=True, exist_ok=True
        )
    with warnings.catch_warnings():  # multivariate, group and constraints are "experimental"
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=cfg.study.seed,
            n_startup_trials=cfg.study.n_startup_trials,
            multivariate=True,
            group=True,  # conditional knobs (prefetch only with workers) form groups
            constraints_func=_constraints if cfg.study.memory_budget_gb else None,
        )
    study = optuna.create_study(
        study_name=cfg.study.name,
        storage=cfg.study.storage,
        direction="maximize",
        sampler=sampler,
        pruner=make_pruner(),
        load_if_exists=True,
    )
    stored = study.user_attrs.get("fingerprint")
    if stored is None:
        study.set_user_attr("fingerprint", fingerprint)
        with warnings.catch_warnings():  # "experimental" since Optuna 3.2
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([METRIC])
    elif stored != fingerprint:
        raise UsageError(
            f"study {cfg.study.name!r} in {cfg.study.storage} was made with another dataset, "
            "model, recipe, window or search space: pick a new study.name=... to start afresh"
        )
    _fail_stale(study)
    return study


def _fail_stale(study: optuna.Study) -> None:
    """Trials left RUNNING by a run that was killed outright (we hold the host lock, so no one
    else is running them) are marked failed, with the reason."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study._storage.set_trial_user_attr(
            t._trial_id,
            "failure",
            {
                "kind": "error",
                "message": "the run measuring it was killed",
                "hint": "resumed: the trial was not finished",
            },
        )
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        log.warning("trial %d was left running by a killed run: marked failed", t.number)


@contextmanager
def ctrl_c_stops(stop: threading.Event) -> Iterator[None]:
    """While inside, Ctrl-C sets ``stop``: the current trial's processes are taken down, its
    trial recorded as interrupted, the study saved. A second Ctrl-C raises KeyboardInterrupt.

    Handled here, not as KeyboardInterrupt: one arriving inside Optuna's storage writes could
    leave a trial RUNNING.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        log.warning("Ctrl-C: stopping after cleaning up the current trial (again to force)")

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def measure_ceiling(
    cfg: AutotuneConfig,
    source: Source,
    device: str,
    usable_cpus: int,
    run: Callable[..., TrialOutcome] = run_trial,
) -> float | None:
    """The train step's rate on a batch already on the device, with the better of one torch
    thread and all usable CPUs: on a busy host an all-thread step can be many times slower
    than one thread (OpenMP threads wait on each other), and the ceiling is the step's best."""
    rates = []
    for threads in dict.fromkeys((1, usable_cpus)):
        config = PipelineConfig(batch_size=cfg.batch_size, main_threads=threads)
        outcome = run(
            make_job(cfg, source, device, config, "ceiling"), timeout_s=cfg.study.trial_timeout
        )
        if outcome.measurement is None:
            log.warning("the ceiling could not be measured: %s", outcome.failure)
            continue
        rates.append(outcome.measurement.samples_per_s)
    return max(rates) if rates else None


def measure_cpu_work_bound(
    cfg: AutotuneConfig, source: Source, space: SearchSpace, usable_cpus: int
) -> dict[str, float]:
    """Per CPU decoder of the space: usable CPUs / CPU seconds per sample of read, decode,
    augment and collate (profile.profile_stages): what no worker count can exceed."""
    from autotune.pipeline import decoders, recipes
    from autotune.runtime.stages import profile_stages

    recipe = recipes.from_config(cfg.recipe)
    knob = next((k for k in space.knobs if k.name == "decoder"), None)
    names = knob.values() if knob is not None else ["pil"]
    bounds = {}
    for name in names:
        if decoders.DECODERS[name].on_device:
            continue  # decoded on the device: not a CPU-work bound of the same kind
        profile = profile_stages(source, recipe, name, 48, cfg.batch_size, cfg.seed)
        bounds[name] = round(profile.cpu_work_bound(usable_cpus), 1)
    return bounds


def tune(
    cfg: AutotuneConfig,
    facts: MachineFacts,
    source: Source,
    space: SearchSpace,
    device: str,
    fingerprint: str,
) -> StudyResult:
    """Runs the search (resuming a stored study), then confirms the finalists.

    Ctrl-C stops after cleaning up the current trial; the result is then the best so far.
    """
    study = open_study(cfg, fingerprint)
    baseline_params = space.baseline_params(default_threads=torch.get_num_threads())
    if not study.get_trials(deepcopy=False):
        study.enqueue_trial(baseline_params, user_attrs={"role": "baseline"})
    stop = threading.Event()
    run = functools.partial(run_trial, stop=stop)
    with ctrl_c_stops(stop):
        if "ceiling_samples_per_s" not in study.user_attrs:
            log.info("measuring the ceiling: the train step fed one batch already on the device")
            ceiling = measure_ceiling(cfg, source, device, facts.usable_cpus, run)
            if ceiling is not None:
                study.set_user_attr("ceiling_samples_per_s", round(ceiling, 1))
        if "cpu_work_bound_samples_per_s" not in study.user_attrs:
            log.info("profiling the loader's stages per decoder: the CPU-work bound")
            bounds = measure_cpu_work_bound(cfg, source, space, facts.usable_cpus)
            if bounds:
                study.set_user_attr("cpu_work_bound_samples_per_s", bounds)
        started = time.monotonic()
        search(cfg, study, space, Objective(cfg, space, source, device, facts, run=run), stop)
        search_wall_s = time.monotonic() - started
        result = _result(cfg, study, space, source, device, baseline_params, stop, run)
        result = dataclasses.replace(result, search_wall_s=search_wall_s)
    if result.interrupted:
        log.warning("interrupted: the study is saved; run the same command again to resume")
    return result


def search(
    cfg: AutotuneConfig,
    study: optuna.Study,
    space: SearchSpace,
    objective: Objective,
    stop: threading.Event,
) -> None:
    """TPE for most of the budget, then a polish: the best so far's unmeasured one-knob
    neighbours, one at a time (a hill climb), so a step TPE missed is not left on the table."""
    deadline = time.monotonic() + cfg.study.timeout if cfg.study.timeout else None
    polish = round(cfg.study.n_trials * cfg.study.polish_fraction)

    def finished() -> int:
        return len(study.get_trials(deepcopy=False, states=FINISHED))

    with StudyProgress(cfg.study.n_trials, finished(), quiet=cfg.quiet) as progress:

        def run_trials(n: int) -> None:
            left = None if deadline is None else deadline - time.monotonic()
            if n > 0 and not stop.is_set() and (left is None or left > 0):
                study.optimize(
                    objective,
                    n_trials=n,
                    timeout=left,
                    catch=(TrialFailed,),
                    gc_after_trial=False,
                    callbacks=[
                        progress,
                        lambda study, trial: study.stop() if stop.is_set() else None,
                    ],
                )

        run_trials(cfg.study.n_trials - polish - finished())
        while finished() < cfg.study.n_trials and not stop.is_set():
            if deadline is not None and time.monotonic() > deadline:
                break
            step = _next_neighbour(study, space)
            if step is not None:
                study.enqueue_trial(step, user_attrs={"role": "polish"})
            run_trials(1)


def _next_neighbour(study: optuna.Study, space: SearchSpace) -> dict[str, object] | None:
    """The best so far's next unmeasured one-knob neighbour, the knobs taken in turn: polish
    step i starts at knob i (mod the knobs), so a short polish moves every knob once rather
    than spending itself on the first knob's values whenever the best changes."""
    complete = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get("constraint", 0.0) <= 0
    ]
    if not complete:
        return None
    best = max(complete, key=lambda t: t.value or 0.0)
    trials = study.get_trials(deepcopy=False)
    tried = [t.params for t in trials]
    per_knob = space.neighbours(best.params)
    if not per_knob:
        return None
    turn = sum(t.user_attrs.get("role") == "polish" for t in trials)  # from storage: resumable
    for shift in range(len(per_knob)):
        for point in per_knob[(turn + shift) % len(per_knob)]:
            if not any(point.items() <= params.items() for params in tried):
                return point
    return None  # every neighbour measured: the best is a local optimum; TPE goes on


def _result(
    cfg: AutotuneConfig,
    study: optuna.Study,
    space: SearchSpace,
    source: Source,
    device: str,
    baseline_params: dict[str, object],
    stop: threading.Event,
    run: Callable[..., TrialOutcome],
) -> StudyResult:
    """Confirms the finalists (unless stopped) and names the winner."""
    trials = study.get_trials(deepcopy=False)
    counts = Counter(t.state.name.lower() for t in trials if t.state.is_finished())
    failures = Counter(
        t.user_attrs["failure"]["kind"]
        for t in trials
        if t.state == TrialState.FAIL and "failure" in t.user_attrs
    )
    ceiling = study.user_attrs.get("ceiling_samples_per_s")
    cpu_work_bound = study.user_attrs.get("cpu_work_bound_samples_per_s")
    baseline = space.suggest(optuna.trial.FixedTrial(baseline_params))
    epoch_samples = (
        len(source) // cfg.batch_size * cfg.batch_size if cfg.study.epoch_aware else None
    )
    picked = finalists(study, cfg.study.confirm_top_k, baseline)
    notes: list[str] = list(space.notes)
    confirmed: list[Confirmed] = []
    if not stop.is_set() and cfg.study.confirm_top_k > 0 and len(picked) > 1:
        log.info(
            "confirming %d finalists against the baseline, %d interleaved rounds",
            len(picked) - 1,
            cfg.study.confirm_rounds,
        )
        confirmed = confirm(cfg, source, device, picked, epoch_samples=epoch_samples, run=run)
    interrupted = stop.is_set()
    if interrupted or not any(c.label != "baseline" for c in confirmed):
        confirmed = from_search(study, picked, epoch_samples=epoch_samples)
        if confirmed:
            notes.append("finalists were not re-measured: figures are from the search")

    def result(best: Confirmed | None) -> StudyResult:
        return StudyResult(
            study.study_name,
            cfg.study.storage,
            best.config if best else None,
            best.label if best else "none",
            tuple(confirmed),
            dict(counts),
            dict(failures),
            ceiling,
            tuple(notes),
            interrupted,
            cpu_work_bound,
        )

    if not confirmed:
        return result(None)
    winner, pick_notes = pick_winner(confirmed)
    notes += pick_notes
    base = next((c for c in confirmed if c.label == "baseline"), None)
    if base is not None and winner is not base and winner.median <= base.median:
        notes.append("no config beat PyTorch's defaults here: the defaults are exported")
        winner = base
    reduced = reduced_decode_note(winner, confirmed)
    if reduced:
        notes.append(reduced)
    if epoch_samples:
        notes.append(
            f"samples/s over an epoch of {epoch_samples} samples: worker start-up "
            "charged per epoch unless workers persist"
        )
    # what report.md is rebuilt from (mode=report): the storage alone
    study.set_user_attr("confirmation", [c.to_dict() for c in confirmed])
    study.set_user_attr("winner", winner.label)
    study.set_user_attr("notes", notes)
    return result(winner)


def failure_table(failures: dict[str, int]) -> list[tuple[str, int, str]]:
    return [(kind, n, HINTS.get(kind, HINTS["error"])) for kind, n in sorted(failures.items())]

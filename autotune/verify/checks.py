"""What ``mode=verify`` refuses before it measures: no best.yaml, a best.yaml of another
machine, data that changed since the tune, or another model or recipe. Each is one line
(``UsageError``), raised before anything is written."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.errors import UsageError
from autotune.pipeline import best_file
from autotune.pipeline.best_file import BestFile
from autotune.schema import AutotuneConfig, RecipeConfig
from autotune.session import Session


@dataclass(frozen=True)
class Checked:
    """A best.yaml fit to verify on this session, and what could not be checked."""

    path: Path
    best: BestFile
    notes: tuple[str, ...] = ()


def best_yaml_path(conf: AutotuneConfig) -> Path:
    return Path(conf.studies_dir) / conf.study.name / "best.yaml"


def check(session: Session) -> Checked:
    """Reads the study's best.yaml and checks that it was made here, on this data."""
    conf = session.conf
    path = best_yaml_path(conf)
    if not path.is_file():
        raise UsageError(
            f"{path} does not exist: run the tune first (python -m autotune "
            f"study.name={conf.study.name} with the same overrides, without mode=verify)"
        )
    best = best_file.read(path)
    if best.study.kept_by:  # its figures are readings of a training run, not a study's claims
        raise UsageError(
            f"{path} was written by {best.study.kept_by} on your training run: its figures "
            "are readings of that run, which a later run of it watches itself; mode=verify "
            "checks the claims of a study python -m autotune ran"
        )
    best_file.as_is_of(best, path)  # a file of an older autotune has no claim for it
    differences = best_file.machine_differences(best.machine, session.facts)
    if differences:
        raise UsageError(
            f"{path} was measured on another machine ({'; '.join(differences)}): "
            "run the tune on this machine, then verify"
        )
    notes = []
    stored = best.workload.data_fingerprint
    if stored is None:
        notes.append(
            f"{path} has no data fingerprint (written before verify): the data could not be "
            "checked against the tuned data"
        )
    elif stored != session.source_fingerprint:
        raise UsageError(
            f"the dataset changed since {path} was tuned (fingerprint {stored} there, "
            f"{session.source_fingerprint} now): run the tune again on this data"
        )
    check_workload(path, best, session)
    return Checked(path, best, tuple(notes))


def check_workload(path: Path, best: BestFile, session: Session) -> None:
    """The model, recipe and device must be the tune's: else the claim is about another job."""
    conf, workload = session.conf, best.workload
    tuned_model = workload.model
    if tuned_model is not None and tuned_model != conf.model.name:
        raise UsageError(
            f"{path} was tuned with model {tuned_model}, this run has model "
            f"{conf.model.name}: pass model={tuned_model}"
        )
    tuned_recipe = workload.recipe
    if tuned_recipe is not None and not _same_recipe(tuned_recipe, conf.recipe):
        raise UsageError(
            f"{path} was tuned with another recipe ({tuned_recipe.get('name')}, crop "
            f"{tuned_recipe.get('crop_size')}): pass the tune's recipe overrides"
        )
    tuned_device = workload.device
    if tuned_device is not None and tuned_device != session.device:
        raise UsageError(
            f"{path} was tuned on device {tuned_device}, this run is on {session.device}: "
            f"pass device={tuned_device}"
        )


def _same_recipe(stored: dict, recipe: RecipeConfig) -> bool:
    try:
        return RecipeConfig(**stored) == recipe
    except (TypeError, UsageError):  # keys or values this version does not know
        return False

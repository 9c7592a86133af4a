"""A run's config: Hydra's composition of the package's ``conf/``, the working directory's
``./conf`` and the command line's overrides, converted once to the dataclasses of
``autotune.schema``.

Hydra composes in about half a second, most of it reading and merging the groups' YAML files
(the defaults list). Its last step applies the value overrides (``key=value``, ``+key=``,
``~key``) to the merged config, one after another. Here the merged config of the group
overrides (``dataset=mine``, ``window=quick``, ...) is composed once per process and per state
of ``./conf``'s files, and the value overrides go to a copy of it through that same last step
of Hydra's: the same config, in milliseconds, for a process that composes many (the benchmark,
the self-check, the tests).
"""

from __future__ import annotations

import copy
import functools
import warnings
from importlib import resources
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_module
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from autotune.errors import UsageError
from autotune.schema import AutotuneConfig, register_configs

# keyword arguments of the user's own classes: any key, set without Hydra's "+"
OPEN_KEYS = ("dataset.kwargs.", "model.kwargs.", "optimizer.kwargs.")
RENAMED_KEYS = {f"study.ablation_{k}": f"study.worth_{k}" for k in ("budget", "rounds")}  # old


def compose(overrides: list[str]) -> DictConfig:
    """The composed config (``conf/`` of the package, then ``./conf`` of the working dir)."""

    overrides = _open_keys([_renamed(o) for o in overrides])
    user_conf = Path("conf").resolve()
    structure, values = _split(overrides, user_conf)
    cfg = copy.deepcopy(_composed(tuple(structure), user_conf, _files_of(user_conf)))
    ConfigLoaderImpl._apply_overrides_to_config(values, cfg)  # Hydra's own last step
    _own_names(cfg, overrides)
    return cfg


def to_config(cfg: DictConfig) -> AutotuneConfig:
    """Converts once, at the edge: the core only sees dataclasses."""

    try:
        obj = OmegaConf.to_object(cfg)
    except MissingMandatoryValue as exc:
        key = getattr(exc, "full_key", "") or str(exc)
        hint = " (the folder of class sub-folders)" if key.endswith("root") else ""
        raise UsageError(f"{key} is not set: add {key}=VALUE{hint}") from None
    assert isinstance(obj, AutotuneConfig)
    return obj


def _open_keys(overrides: list[str]) -> list[str]:
    """``dataset.kwargs.root=/data`` as ``++dataset.kwargs.root=/data``: added or replaced."""
    return [f"++{o}" if o.startswith(OPEN_KEYS) else o for o in overrides]


def _renamed(override: str) -> str:
    """An old key's override as the new key's, with a one-line deprecation note."""
    key, _, value = override.partition("=")
    if key not in RENAMED_KEYS:
        return override
    warnings.warn(f"{key} is deprecated: use {RENAMED_KEYS[key]}", FutureWarning, stacklevel=3)
    return f"{RENAMED_KEYS[key]}={value}"


def _own_names(cfg: DictConfig, overrides: list[str]) -> None:
    """A custom model or Dataset gets its own name (and so its own study), not the default's."""
    for group, default in (("model", "tiny"), ("dataset", "synthetic")):
        section = cfg[group]
        named = any(o.lstrip("+").startswith(f"{group}.name=") for o in overrides)
        if section.get("_target_") and section.name == default and not named:
            section.name = section._target_.rsplit(".", 1)[-1].lower()


def _split(overrides: list[str], user_conf: Path) -> tuple[list[str], list[Override]]:
    """The overrides that shape the defaults list (a config group's, ``hydra.*``, a sweep,
    one Hydra cannot parse: it says why when it composes them), and the value overrides it
    applies last, in their order."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides=overrides)
    except HydraException:
        return overrides, []
    groups = _groups_in(Path(str(resources.files("autotune.conf"))), user_conf)
    structure: list[str] = []
    values: list[Override] = []
    for override in parsed:
        key = override.key_or_group
        shapes = "/" in key or key.split(".")[0] == "hydra" or key in groups
        if shapes or override.package is not None or override.is_sweep_override():
            structure.append(override.input_line or "")
        else:
            values.append(override)
    return structure, values


def _groups_in(*folders: Path) -> set[str]:
    """The config groups: each sub-folder of the package's conf and of ./conf."""
    return {
        p.name
        for folder in folders
        if folder.is_dir()
        for p in folder.iterdir()
        if p.is_dir() and not p.name.startswith(("_", "."))
    }


def _files_of(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """Each file under ``folder`` with its size and time of change (none if no such folder)."""
    if not folder.is_dir():
        return ()
    stats = ((str(p), p.stat()) for p in sorted(folder.rglob("*")) if p.is_file())
    return tuple((name, stat.st_size, stat.st_mtime_ns) for name, stat in stats)


@functools.lru_cache(maxsize=32)
def _composed(structure: tuple[str, ...], user_conf: Path, _files: tuple) -> DictConfig:
    """Hydra's composition of ``structure``; ``_files``: ./conf's state, part of the key."""
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_module(version_base="1.3", config_module="autotune.conf"):
        if user_conf.is_dir():
            # ./conf/<group>/<option>.yaml wins over the package's file of the same name:
            # prepended to the search path, which Hydra re-reads when hydra.searchpath is set
            GlobalHydra.instance().config_loader().config_search_path.prepend(
                "autotune-cwd", f"file://{user_conf}", anchor="main"
            )
            structure = (*structure, f"hydra.searchpath=[file://{user_conf}]")
        return hydra_compose(config_name="autotune", overrides=list(structure))

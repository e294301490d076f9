"""Where a config's choices come from: normbench's conf/, the user's config directories
(``--config-dir DIR``, ``NORMBENCH_CONFIG_PATH``), installed plugins (entry points) and import
paths; and the keys each choice adds to the schema (a plugin's read off its signature).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normbench.core.errors import StoreError, UsageError
from normbench.core.files import YAML_LIMIT, read_text
from normbench.core.keys import Key, shown
from normbench.core.registry import canonical_target, entry_points, resolve, signature_keys
from normbench.experiment.schema import (
    GROUPS,
    OPTION_SCHEMA,
    PLUGIN_FIXED,
    PLUGIN_NOT_KEYS,
    RESERVED_KEYS,
    SCHEMA,
)


@functools.cache
def conf_dir() -> Path:
    """conf/ inside an installed wheel (normbench/conf) or beside the package in a checkout."""
    package = Path(__file__).resolve().parents[1]  # normbench/
    for candidate in (package / "conf", package.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"normbench's conf/ directory is missing (looked beside {package})")


# ------------------------------------------------------------------------------ options
CONFIG_PATH_VARIABLE = "NORMBENCH_CONFIG_PATH"
# Groups a user config directory may add options to (precisions are the autocast dtypes
# normbench knows), and the plugin kinds (registry.KINDS) among them.
USER_GROUPS = ("norm", "model", "data", "placement")
PLUGIN_GROUPS = ("norm", "model", "data")
_command_line_dirs: tuple[Path, ...] = ()


def use_config_dirs(dirs: Iterable[Path | str]) -> None:
    """``--config-dir DIR`` (repeatable): searched before the directories of
    NORMBENCH_CONFIG_PATH. Each must be a directory."""
    global _command_line_dirs
    _command_line_dirs = tuple(_config_dir(d, "--config-dir") for d in dirs)


def command_line_dirs() -> tuple[Path, ...]:
    """This command's ``--config-dir`` directories: what a command it suggests repeats."""
    return _command_line_dirs


def config_dirs() -> tuple[Path, ...]:
    """The user config directories in search order: --config-dir, then NORMBENCH_CONFIG_PATH
    (os.pathsep-separated)."""
    listed = os.environ.get(CONFIG_PATH_VARIABLE, "").split(os.pathsep)
    from_env = tuple(_config_dir(d, CONFIG_PATH_VARIABLE) for d in listed if d)
    return tuple(dict.fromkeys(_command_line_dirs + from_env))


def _config_dir(path: Path | str, where: str) -> Path:
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_dir():
        raise UsageError(f"{where} {shown(str(path))}: not a directory")
    return resolved


@dataclass(frozen=True)
class Option:
    """One choice of a group, and where it comes from (for `normbench list`)."""

    name: str
    source: str  # normbench | config dir DIR | entry point (DIST VERSION)
    path: Path | None = None  # its yaml file (shipped or in a config directory)
    target: str | None = None  # an entry point's import path


def options(group: str) -> dict[str, Option]:
    """Every named option of ``group``: shipped, from config directories, from entry points."""
    return options_in(group, config_dirs())


@functools.cache
def options_in(group: str, dirs: tuple[Path, ...]) -> dict[str, Option]:
    """A name defined twice (a config directory's option named like a shipped one, two
    plugins of one name) is refused: which one a run used would depend on the search order."""
    found = {p.stem: Option(p.stem, "normbench", p) for p in (conf_dir() / group).glob("*.yaml")}
    candidates = []
    if group in USER_GROUPS:
        for directory in dirs:
            candidates += [
                Option(p.stem, f"config dir {directory}", p)
                for p in sorted((directory / group).glob("*.yaml"))
            ]
    if group in PLUGIN_GROUPS:
        candidates += [
            Option(name, plugin.source, target=plugin.target)
            for name, plugin in entry_points(group).items()
        ]
    for option in candidates:
        if option.name in found:
            raise UsageError(
                f"{group}={option.name} is defined twice: by {found[option.name].source} and "
                f"by {option.source}; rename one"
            )
        found[option.name] = option
    return dict(sorted(found.items()))


def group_options(group: str) -> list[str]:
    return list(options(group))


def describe_option(group: str, option: str) -> str:
    """The comment block heading an option's yaml file: its description for `normbench list`;
    an entry point's import path."""
    found = options(group)[option]
    if found.path is None:
        return str(found.target)
    try:
        text = read_text(found.path, YAML_LIMIT)
    except (OSError, StoreError) as err:
        return f"(cannot read {found.path.name}: {getattr(err, 'strerror', None) or err})"
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @"):  # Hydra's header (# @package), not prose
            lines.append(line.lstrip("# ").strip())
    return " ".join(lines)


def schema_for(cfg: dict) -> dict[str, Key]:
    """Every key valid for a config with ``cfg``'s group sections, dotted, with what it
    accepts: a shipped option's keys, or a plugin's (read off its signature)."""
    keys = dict(SCHEMA)
    for group in GROUPS:
        section = cfg[group]
        if "_target_" in section:
            keys[f"{group}.name"] = Key(str)
            keys[f"{group}._target_"] = Key(str)
            keys.update(plugin_schema(group, section["name"], section["_target_"]))
        else:
            keys[f"{group}.name"] = Key(str, choices=shipped_options(group))
            keys.update(OPTION_SCHEMA.get(group, {}).get(section["name"], {}))
    return keys


@functools.cache
def shipped_options(group: str) -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in (conf_dir() / group).glob("*.yaml")))


def _plugin_signature(group: str, name: str, target: str) -> dict[str, tuple[Key, Any]]:
    """A plugin's own keys (its parameters that are not normbench's to fill, nor shared keys
    of its group), each with its Key and default."""
    what = f"{group}={name}"
    found = signature_keys(resolve(target, what), PLUGIN_FIXED[group], what)
    for reserved in RESERVED_KEYS:
        if reserved in found:
            raise UsageError(f"{what}: a parameter may not be called {reserved} (rename it)")
    shared = {f"{group}.{key}" for key in _shared_section(group)} | set(SCHEMA)
    not_keys = PLUGIN_NOT_KEYS.get(group, ())
    return {
        key: spec
        for key, spec in found.items()
        if f"{group}.{key}" not in shared and key not in not_keys
    }


def plugin_schema(group: str, name: str, target: str) -> dict[str, Key]:
    """A plugin's keys beyond SCHEMA's: its own, and a data plugin's split fractions and
    content hash (as data=arrays has them)."""
    own = _plugin_signature(group, name, target)
    keys = {f"{group}.{key}": spec for key, (spec, _) in own.items()}
    if group == "data":
        keys.update({k: v for k, v in OPTION_SCHEMA["data"]["arrays"].items() if k != "data.path"})
    return keys


@functools.cache
def _shared_section(group: str) -> dict[str, Any]:
    """The keys every option of ``group`` has: config.yaml's section of it (norm.eps, ...);
    for data, the split fractions and content hash of conf/data/arrays.yaml."""
    from omegaconf import OmegaConf

    if group == "data":
        arrays = OmegaConf.to_container(OmegaConf.load(conf_dir() / "data" / "arrays.yaml"))
        return {k: v for k, v in arrays.items() if k not in ("name", "path")}
    return OmegaConf.to_container(OmegaConf.load(conf_dir() / "config.yaml")).get(group, {})


def plugin_section(group: str, name: str, target: str) -> dict[str, Any]:
    """A plugin's section before overrides: the group's shared keys, its name as the user
    wrote it, its import path, and its own keys at their defaults."""
    own = _plugin_signature(group, name, target)
    return {
        **_shared_section(group),
        "name": name,
        "_target_": canonical_target(target),
        **{key: default for key, (_, default) in own.items()},
    }

"""Sweep presets: versioned grid files, shipped in conf/sweep or in a config directory's
sweep/ folder, or given by path. Each opens with the question it answers.

Preset files are downloaded and shared: they are read by the trusted reader (no aliases, no
tags, bounded), never by a YAML loader that would expand an alias bomb. No torch here:
`normbench list` shows the presets.
"""

from __future__ import annotations

from pathlib import Path

from normbench.core.errors import StoreError, UsageError
from normbench.core.files import read_yaml
from normbench.core.keys import shown
from normbench.core.suggest import did_you_mean
from normbench.experiment.options import conf_dir, config_dirs

DEFAULT_PRESET = "batch_sensitivity"


def presets() -> dict[str, Path]:
    """Preset files by name: shipped (conf/sweep) and from the user's config directories (their
    sweep/ folders); a name defined twice is refused, as for any option."""
    found = {p.stem: p for p in (conf_dir() / "sweep").glob("*.yaml")}
    for directory in config_dirs():
        for path in sorted((directory / "sweep").glob("*.yaml")):
            if path.stem in found:
                raise UsageError(
                    f"sweep preset {path.stem} is defined twice: {found[path.stem]} and {path}; "
                    "rename one"
                )
            found[path.stem] = path
    return dict(sorted(found.items()))


def preset_path(name: str) -> Path:
    """A preset by name (shipped or in a config directory), or a preset file by path
    (``./grids/mine.yaml``)."""
    if name.endswith((".yaml", ".yml")) or "/" in name:
        path = Path(name)
        if not path.is_file():
            raise UsageError(f"sweep file {shown(name)} does not exist (or is not a file)")
        return path
    if name not in presets():
        hint = did_you_mean(name, presets())
        raise UsageError(
            f"sweep preset '{shown(name)[1:-1]}' does not exist{hint}; valid: "
            f"{', '.join(presets())}, "
            "or a path to a preset file (./grids/mine.yaml)"
        )
    return presets()[name]


def load_preset(name: str) -> dict:
    """A preset's ``version``, ``params``, ``grids``, ``tune`` (the keys a tuned comparison
    tunes per group: normbench.sweeps.tuned) and ``ladder`` (its size axis:
    normbench.sweeps.ladder_plan), values as override strings. The file
    is read by the trusted reader: presets are downloaded and shared."""
    path = preset_path(name)
    try:
        spec = read_yaml(path)
    except (StoreError, OSError) as err:
        reason = str(err) if isinstance(err, StoreError) else err.strerror
        raise UsageError(f"sweep file {shown(str(path))}: not a preset ({reason})") from None
    fields = {"version", "params", "grids", "tune", "ladder"}
    unknown = set(spec) - fields if isinstance(spec, dict) else {""}
    params, grids = (spec.get("params") or {}, spec.get("grids") or []) if not unknown else ({}, [])
    tune = (spec.get("tune") or {}) if not unknown else {}
    ladder = (spec.get("ladder") or {}) if not unknown else {}
    if (
        unknown
        or not isinstance(params, dict)
        or not isinstance(grids, list)
        or not all(isinstance(grid, dict) for grid in grids)
        or not isinstance(tune, dict)
        or not _is_ladder(ladder)
    ):
        raise UsageError(
            f"sweep file {shown(str(path))}: a preset has version, params (key: values), "
            "grids (a list of key: values), tune (key: values, each group's own best) and "
            "ladder (key, values, tokens_per_param, transfer, head_dim)"
        )
    return {
        "version": spec.get("version"),
        "params": {k: _as_override_value(v) for k, v in params.items()},
        "grids": [{k: _as_override_value(v) for k, v in grid.items()} for grid in grids],
        "tune": {k: _as_override_value(v) for k, v in tune.items()},
        "ladder": {k: _as_override_value(v) for k, v in ladder.items()},
    }


def _is_ladder(ladder: object) -> bool:
    """A preset's ``ladder:``: a size key and its values, the budget rule, the rungs tuned
    (normbench.sweeps.ladder_plan checks what they hold)."""
    return isinstance(ladder, dict) and set(ladder) <= {
        "key",
        "values",
        "tokens_per_param",
        "transfer",
        "head_dim",
    }


def _as_override_value(value) -> str:
    """YAML values as the override grammar writes them (true, null, 2,4,8)."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, list):
        return ",".join(_as_override_value(v) for v in value)
    return str(value)

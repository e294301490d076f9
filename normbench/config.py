"""Compose a run's config from conf/ with Hydra's compose API, and validate it before any work.

Hydra does the composition (defaults list, group options, its override grammar); this module
checks every override and every resolved value against ``SCHEMA`` so that a typo or a wrong
type is refused in one line naming the key, the bad value and the valid choices. The result
is a plain nested dict: the rest of normbench never sees OmegaConf.

Options come from normbench's own conf/, from user config directories (``--config-dir DIR``
and ``NORMBENCH_CONFIG_PATH``: groups norm, model, data, placement and sweep presets), from
installed plugins (entry points) and from import paths (``norm=mypkg.norms:PowerNorm``). A
plugin's section carries its ``_target_`` (the import path) and its own keys, read off its
signature (normbench.registry); workers rebuild it from the resolved config alone.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GROUPS = ("model", "norm", "placement", "data", "precision")
DEVICES = ("auto", "cpu", "cuda", "mps")
# Execution settings: they change where and how fast a run goes, not what it computes, so
# they are left out of the run id (dotted: nested keys).
EXECUTION_KEYS = ("device", "threads", "train.checkpoint_every")
# Observations: what a run records about itself beyond its metrics. Asking for them does not
# make another experiment (a finished run without them is trained again to record them).
OBSERVATION_KEYS = ("diagnostics",)
# Keys added after runs were made, with the value that reproduces those runs: at that value
# a key leaves the run id as it was, so the runs made before it existed are still found.
LATER_KEYS = {"model.init": "default"}


# A key without a default (a plugin parameter that has none): OmegaConf's mandatory value.
REQUIRED = "???"


class UsageError(Exception):
    """Bad input from the user: reported as one line, exit code 2, nothing written."""


@functools.cache
def conf_dir() -> Path:
    """conf/ inside an installed wheel (normbench/conf) or beside the package in a checkout."""
    package = Path(__file__).resolve().parent
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
    return _options(group, config_dirs())


@functools.cache
def _options(group: str, dirs: tuple[Path, ...]) -> dict[str, Option]:
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
        from normbench.registry import entry_points

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
    lines = []
    for line in found.path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @"):  # Hydra's header (# @package), not prose
            lines.append(line.lstrip("# ").strip())
    return " ".join(lines)


def shown(value: Any, limit: int = 40) -> str:
    """A value as an error message shows it: its repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------- schema
@dataclass(frozen=True)
class Key:
    """What one config key accepts."""

    kind: type
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    nullable: bool = False

    def describe(self) -> str:
        if self.choices:
            return ", ".join(self.choices)
        text = {
            int: "an integer",
            float: "a finite number",
            bool: "true or false",
            str: "a string",
        }
        bounds = ""
        if self.minimum is not None and self.maximum is not None:
            bounds = f" from {self.minimum} to {self.maximum}"
        elif self.minimum is not None:
            bounds = f" >= {self.minimum}"
        elif self.maximum is not None:
            bounds = f" <= {self.maximum}"
        return text[self.kind] + bounds + (" or null" if self.nullable else "")

    def check(self, value: Any) -> Any:
        """The value converted to ``kind``; raises ValueError when it does not fit."""
        if value is None:
            if self.nullable:
                return None
            raise ValueError
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ValueError
        elif self.kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError
        elif self.kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError
            try:
                value = float(value)
            except OverflowError:  # an integer of hundreds of digits
                raise ValueError from None
            if not math.isfinite(value):  # NaN passes every bound check: refuse it here
                raise ValueError
        elif not isinstance(value, str) or (self.choices and value not in self.choices):
            raise ValueError
        if self.minimum is not None and value < self.minimum:
            raise ValueError
        if self.maximum is not None and value > self.maximum:
            raise ValueError
        return value


def _positive(nullable: bool = False) -> Key:
    return Key(int, minimum=1, nullable=nullable)


def _fraction() -> Key:
    return Key(float, minimum=0.0, maximum=0.9)


SCHEMA: dict[str, Key] = {
    "batch_size": _positive(),
    "seed": Key(int, minimum=0, maximum=2**32 - 1),  # numpy's and torch's seed range
    "device": Key(str, choices=DEVICES),
    "threads": _positive(nullable=True),
    "diagnostics": Key(bool),
    "norm.eps": Key(float, minimum=0.0),
    "norm.momentum": Key(float, minimum=0.0, maximum=1.0),
    "norm.groups": _positive(),
    "norm.ghost_batch": _positive(nullable=True),
    "norm.mask_padding": Key(bool),
    "norm.fp32_stats": Key(bool),
    "train.optimizer": Key(str, choices=("adamw", "sgd")),
    "train.lr": Key(float, minimum=0.0),
    "train.weight_decay": Key(float, minimum=0.0),
    "train.momentum": Key(float, minimum=0.0, maximum=1.0),
    "train.epochs": _positive(nullable=True),
    "train.max_steps": _positive(nullable=True),
    "train.schedule": Key(str, choices=("constant", "cosine")),
    "train.warmup_steps": Key(int, minimum=0),
    "train.lr_scaling": Key(str, choices=("none", "linear", "sqrt")),
    "train.base_batch_size": _positive(),
    "train.grad_clip": Key(float, minimum=0.0, nullable=True),
    "train.eval_every": _positive(),
    "train.log_every": _positive(),
    "train.checkpoint_every": _positive(nullable=True),
    "target.metric": Key(str, choices=("val_acc", "val_loss", "val_bpb")),
    "target.value": Key(float),
}
# norm.* keys that only some norms read (the rest are read by every norm), and which norms
# read them. normbench.norms.NORMS takes the same options; a test keeps the two in step.
NORM_SPECIFIC_KEYS = {"momentum", "ghost_batch", "groups"}
# The norm.* keys every shipped norm reads (normbench.norms.Norm's), and all shared ones.
NORM_COMMON_KEYS = {"eps", "fp32_stats", "mask_padding"}
NORM_SHARED_KEYS = NORM_COMMON_KEYS | NORM_SPECIFIC_KEYS
# Norms whose statistics (or condition) run over a sample's tokens, in eval mode too: in a
# causal model they would leak later bytes into earlier positions. BatchNorm is not here:
# eval mode uses running statistics, per token (its train mode pools every token of the
# batch, each token a 1/(N*T) share: see conf/data/pysource.yaml).
SEQUENCE_STATISTICS_NORMS = ("instancenorm", "switchnorm", "adaln")
NORM_KEYS: dict[str, set[str]] = {
    "batchnorm": {"momentum", "ghost_batch"},
    "switchnorm": {"momentum", "ghost_batch"},
    "groupnorm": {"groups"},
    **{
        name: set()
        for name in ("layernorm", "instancenorm", "rmsnorm", "adaln", "dyt", "scalenorm", "none")
    },
}
# Keys that exist only for one option of a group; the option's `name` key is checked against
# the group's yaml files.
OPTION_SCHEMA: dict[str, dict[str, dict[str, Key]]] = {
    "model": {
        "transformer": {
            "model.width": _positive(),
            "model.depth": _positive(),
            "model.heads": _positive(),
            "model.mlp_ratio": _positive(),
            "model.patch_size": _positive(),
            "model.weight_std": Key(bool),
            "model.init": Key(str, choices=("default", "xavier")),
        },
        "cnn": {
            "model.width": _positive(),
            "model.depth": _positive(),
            "model.kernel_size": _positive(),
            "model.weight_std": Key(bool),
            "model.init": Key(str, choices=("default", "xavier")),
        },
    },
    "data": {
        "mnist1d": {"data.num_samples": Key(int, minimum=100), "data.val_fraction": _fraction()},
        "digits": {"data.test_fraction": _fraction(), "data.val_fraction": _fraction()},
        "tokens": {
            "data.num_samples": Key(int, minimum=100),
            "data.min_len": Key(int, minimum=2),
            "data.max_len": Key(int, minimum=2),
            "data.vocab_size": Key(int, minimum=2),
            "data.num_classes": Key(int, minimum=2),
            "data.test_fraction": _fraction(),
            "data.val_fraction": _fraction(),
        },
        "pysource": {
            "data.context": Key(int, minimum=2),
            "data.eval_windows": _positive(),
            "data.test_fraction": _fraction(),
            "data.val_fraction": _fraction(),
            "data.corpus": Key(str, nullable=True),
        },
        "arrays": {
            "data.path": Key(str, nullable=True),
            "data.val_fraction": _fraction(),
            "data.test_fraction": _fraction(),
            "data.sha256": Key(str, nullable=True),
        },
    },
}
# What a plugin's section holds besides its own keys: the shared keys of its group (a norm's
# from config.yaml; a data set's split fractions and content hash, as data=arrays has them).
# The parameters normbench fills itself are not keys: a norm's (num_features, layout), a model
# builder's (cfg, make_norm, input_shape, num_classes) and its optional vocab_size.
PLUGIN_FIXED = {
    "norm": ("num_features", "layout"),
    "model": ("cfg", "make_norm", "input_shape", "num_classes"),
    "data": (),
}
PLUGIN_NOT_KEYS = {"model": ("vocab_size",)}
RESERVED_KEYS = ("name", "_target_")


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
    from normbench.registry import resolve, signature_keys

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
    from normbench.registry import canonical_target

    own = _plugin_signature(group, name, target)
    return {
        **_shared_section(group),
        "name": name,
        "_target_": canonical_target(target),
        **{key: default for key, (_, default) in own.items()},
    }


def norm_reads(norm: dict) -> set[str]:
    """The shared norm.* keys (eps, momentum, groups, ghost_batch, mask_padding, fp32_stats)
    the chosen norm reads: the shipped ones per NORM_KEYS; a plugin those its signature
    names, and with **kwargs also eps, fp32_stats and mask_padding (what normbench's Norm base
    class takes). The others are nulled (canonical) and never passed to it."""
    if "_target_" not in norm:
        return NORM_COMMON_KEYS | NORM_KEYS[norm["name"]]
    from normbench.registry import accepted, resolve

    cls = resolve(norm["_target_"], f"norm={norm['name']}")
    return accepted(cls, NORM_SHARED_KEYS, through_kwargs=NORM_COMMON_KEYS)


# --------------------------------------------------------------------- combination rules
@dataclass(frozen=True)
class Rule:
    """A combination normbench refuses before training, and why."""

    summary: str
    violation: Callable[[dict], str | None]


def _patch_rule(cfg: dict) -> str | None:
    from normbench.data import input_shape

    model, data = cfg["model"], cfg["data"]
    if model["name"] != "transformer" or data["name"] in ("tokens", "pysource"):
        return None
    patch, sides = model["patch_size"], input_shape(data)[1:]
    if all(side % patch == 0 for side in sides):
        return None
    valid = [p for p in range(1, max(sides) + 1) if all(side % p == 0 for side in sides)]
    return (
        f"model.patch_size={patch} must divide the input size {list(sides)} of "
        f"data={data['name']}; valid: {', '.join(map(str, valid))}"
    )


def _token_ids(data: dict) -> bool:
    """Whether the data are token ids with padding (data=tokens, or integer (N, T) arrays)."""
    if data["name"] == "tokens":
        return True
    if data["name"] != "arrays" and "_target_" not in data:
        return False
    from normbench.data import describe

    return describe(data).kind == "tokens"


RULES: tuple[Rule, ...] = (
    Rule(
        "model=cnn with data=tokens (or token ids in data=arrays): the CNN has no padding "
        "mask; variable-length tokens need the transformer",
        lambda cfg: (
            f"model=cnn cannot take data={cfg['data']['name']} (token ids; no padding mask in "
            f"the CNN); valid model for data={cfg['data']['name']}: transformer"
            if cfg["model"]["name"] == "cnn" and _token_ids(cfg["data"])
            else None
        ),
    ),
    Rule(
        "model=cnn with data=pysource: next-byte prediction needs the causal transformer",
        lambda cfg: (
            "model=cnn cannot take data=pysource (it needs a causal model); valid model for "
            "data=pysource: transformer"
            if cfg["model"]["name"] == "cnn" and cfg["data"]["name"] == "pysource"
            else None
        ),
    ),
    Rule(
        "your own model (model=package.module:build) with data=pysource: next-byte prediction "
        "runs on the causal transformer only",
        lambda cfg: (
            f"model={cfg['model']['name']} cannot take data=pysource (next-byte prediction "
            "needs normbench's causal transformer); valid model for data=pysource: transformer"
            if "_target_" in cfg["model"] and cfg["data"]["name"] == "pysource"
            else None
        ),
    ),
    Rule(
        f"norm={'|'.join(SEQUENCE_STATISTICS_NORMS)} with data=pysource: statistics over a "
        "sequence's tokens would show each position the bytes after it",
        lambda cfg: (
            f"norm={cfg['norm']['name']} cannot take data=pysource (its statistics over the "
            "sequence would show each position the bytes it must predict); valid: "
            + ", ".join(n for n in NORM_KEYS if n not in SEQUENCE_STATISTICS_NORMS)
            if cfg["norm"]["name"] in SEQUENCE_STATISTICS_NORMS
            and cfg["data"]["name"] == "pysource"
            else None
        ),
    ),
    Rule(
        "target.metric=val_bpb needs a next-byte data set (data=pysource)",
        lambda cfg: (
            f"target.metric=val_bpb needs data=pysource (bits per byte of next-byte "
            f"prediction); valid for data={cfg['data']['name']}: val_acc, val_loss"
            if cfg["target"]["metric"] == "val_bpb" and cfg["data"]["name"] != "pysource"
            else None
        ),
    ),
    Rule(
        "data=pysource needs files in every split: val_fraction, test_fraction > 0",
        lambda cfg: _pysource_rule(cfg),
    ),
    Rule(
        "model.patch_size must divide the transformer's input (mnist1d: 40 samples, digits: 8x8)",
        _patch_rule,
    ),
    Rule(
        "norm=groupnorm needs norm.groups to divide model.width",
        lambda cfg: (
            f"norm.groups={cfg['norm']['groups']} must divide "
            f"model.width={cfg['model']['width']}; valid: {_divisors(cfg['model']['width'])}"
            if cfg["norm"]["name"] == "groupnorm"
            and cfg["model"].get("width", 0) % cfg["norm"]["groups"]
            else None
        ),
    ),
    Rule(
        "model.heads must divide model.width",
        lambda cfg: (
            f"model.heads={cfg['model']['heads']} must divide "
            f"model.width={cfg['model']['width']}; valid: {_divisors(cfg['model']['width'])}"
            if cfg["model"]["name"] == "transformer"
            and cfg["model"]["width"] % cfg["model"]["heads"]
            else None
        ),
    ),
    Rule(
        "train.epochs and train.max_steps both null: the run would never end",
        lambda cfg: (
            "train.epochs and train.max_steps are both null; set at least one"
            if cfg["train"]["epochs"] is None and cfg["train"]["max_steps"] is None
            else None
        ),
    ),
    Rule(
        "norm.ghost_batch larger than batch_size: a chunk cannot exceed the batch",
        lambda cfg: (
            f"norm.ghost_batch={cfg['norm']['ghost_batch']} is larger than "
            f"batch_size={cfg['batch_size']}; valid: 1..{cfg['batch_size']} or null"
            if "ghost_batch" in norm_reads(cfg["norm"])
            and (cfg["norm"]["ghost_batch"] or 0) > cfg["batch_size"]
            else None
        ),
    ),
    Rule("batch_size larger than the training set", lambda cfg: _batch_rule(cfg)),
    Rule(
        "data=tokens needs min_len <= max_len and min_len > num_classes - 1 (room for the "
        "query and its repeats)",
        lambda cfg: _tokens_rule(cfg),
    ),
)


def _pysource_rule(cfg: dict) -> str | None:
    data = cfg["data"]
    if data["name"] != "pysource":
        return None
    for key in ("val_fraction", "test_fraction"):
        if data[key] == 0:
            return f"data.{key}=0.0 leaves that split without files; valid: 0.01 .. 0.9"
    if data["val_fraction"] + data["test_fraction"] > 0.9:
        return (
            f"data.val_fraction + data.test_fraction = "
            f"{data['val_fraction'] + data['test_fraction']:g} leaves too little to train on; "
            "valid: a sum <= 0.9"
        )
    return None


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _batch_rule(cfg: dict) -> str | None:
    from normbench.data import split_sizes

    train = split_sizes(cfg["data"])["train"]
    if cfg["batch_size"] > train:
        return (
            f"batch_size={cfg['batch_size']} is larger than the training set of "
            f"data={cfg['data']['name']} ({train} samples); valid: 1..{train}"
        )
    return None


def _tokens_rule(cfg: dict) -> str | None:
    data = cfg["data"]
    if data["name"] != "tokens":
        return None
    if data["min_len"] > data["max_len"]:
        return f"data.min_len={data['min_len']} is larger than data.max_len={data['max_len']}"
    if data["min_len"] < data["num_classes"]:
        return (
            f"data.min_len={data['min_len']} leaves no room for {data['num_classes'] - 1} "
            f"repeats of the query; valid: data.min_len >= {data['num_classes']}"
        )
    return None


# -------------------------------------------------------------------------------- compose
def parse_overrides(overrides: Iterable[str], with_group_options: bool = False) -> list:
    """Hydra's own override parser; a malformed override is a UsageError.

    ``with_group_options`` gives the parser Hydra's config loader, which ``glob()`` needs to
    list a group's options (sweeps only: it costs a Hydra initialisation).
    """
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    overrides = list(overrides)
    try:
        if not with_group_options:
            return OverridesParser.create().parse_overrides(overrides)
        with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
            loader = GlobalHydra.instance().config_loader()
            return OverridesParser.create(config_loader=loader).parse_overrides(overrides)
    except OverrideParseException as err:
        first = str(err).splitlines()[0]
        raise UsageError(
            f"{first}: overrides look like key=value, e.g. norm=groupnorm "
            "batch_size=8 train.lr=1e-3"
        ) from None


def compose(overrides: Iterable[str] = (), probe: bool = True) -> dict:
    """The validated, resolved config of one run, as a plain dict.

    Sweep syntax (``a,b``, ``range()``, ...) is refused here: it belongs to `normbench sweep`.
    With plugins, ``probe`` builds them and runs one forward pass (normbench.probe), so that
    user code that breaks the contract is refused before anything is written.
    """
    overrides = list(overrides)
    parsed = parse_overrides(overrides)
    for override in parsed:
        if override.is_sweep_override():
            raise UsageError(
                f"'{override.input_line}' is sweep syntax; `normbench run` trains "
                f"one config: use `normbench sweep {override.input_line}`"
            )
    choices = _group_choices(parsed)
    base = _base_config(tuple(choices.items()), config_dirs())
    keys = schema_for(json.loads(base))
    for override in parsed:
        key = override.key_or_group
        if key in GROUPS:
            continue
        if override.is_delete() or override.is_add():
            raise UsageError(
                f"'{override.input_line}': keys can only be set (key=value), "
                "not added (+) or deleted (~)"
            )
        if key.endswith((".name", "._target_")) and key.rpartition(".")[0] in GROUPS:
            group = key.rpartition(".")[0]
            plugins = ", or an import path package.module:Object" * (group in PLUGIN_GROUPS)
            raise UsageError(
                f"{override.input_line}: {key} names the chosen {group}; choose it with "
                f"{group}=VALUE; valid: {', '.join(group_options(group))}{plugins}"
            )
        if key not in keys:
            group = key.split(".")[0]
            owners = [
                option
                for option, option_keys in OPTION_SCHEMA.get(group, {}).items()
                if key in option_keys
            ]
            if owners:
                raise UsageError(
                    f"{key} is a key of {group}={'/'.join(owners)}; it does not "
                    f"apply to {group}={choices[group]}"
                )
            raise UsageError(_unknown_key(key, keys))
    values = [override for override in parsed if override.key_or_group not in GROUPS]
    cfg = canonical(validate(_set_values(base, values), keys))
    if probe and any("_target_" in cfg[group] for group in PLUGIN_GROUPS):
        from normbench.probe import probe_plugins

        probe_plugins(cfg)
    return cfg


def _identify_data(cfg: dict) -> None:
    """Record what the data are in the config, so that it is part of the run id and of
    config.yaml. data=pysource: the corpus identity (Python version, hash of the files); a value
    given by the user must be this interpreter's own (runs of another Python's library cannot
    be repeated here). data=arrays and data plugins: the arrays' content hash (changing the
    file never reuses old runs), after checking them (normbench.data.describe); the file's
    path made absolute, and the split fractions nulled where the file has its own split."""
    data = cfg["data"]
    if data["name"] == "pysource":
        from normbench.data import corpus

        identity = corpus().identity
        if data["corpus"] not in (None, identity):
            raise UsageError(
                f"data.corpus={data['corpus']} is not this interpreter's standard library; "
                f"valid: {identity} (or leave it out)"
            )
        data["corpus"] = identity
        return
    if data["name"] != "arrays" and "_target_" not in data:
        return
    if "_target_" not in data:
        if data["path"] is None:
            raise UsageError(
                "data=arrays needs data.path=FILE.npz (arrays x_train, y_train; optionally "
                "x_val, y_val, x_test, y_test)"
            )
        data["path"] = str(Path(data["path"]).expanduser().resolve())
    from normbench.data import describe

    found = describe({**data, "sha256": None})
    if data["sha256"] not in (None, found.sha256):
        raise UsageError(
            f"data.sha256={data['sha256']} is not the hash of these arrays; valid: "
            f"{found.sha256} (or leave it out)"
        )
    data["sha256"] = found.sha256
    for split in found.given:
        data[f"{split}_fraction"] = None


def canonical(cfg: dict) -> dict:
    """Null the norm.* keys the chosen norm ignores, so that configs that cannot differ in
    outcome are one experiment with one run id (GroupNorm at ghost_batch 2 and 32 is the same
    run; a sweep crossing every norm with ghost_batch trains it once)."""
    for key in NORM_SHARED_KEYS - norm_reads(cfg["norm"]):
        cfg["norm"][key] = None
    return cfg


@functools.cache
def _default_choices() -> tuple[tuple[str, str], ...]:
    """The group options config.yaml's defaults list picks, in the order of GROUPS."""
    from omegaconf import OmegaConf

    defaults = OmegaConf.to_container(OmegaConf.load(conf_dir() / "config.yaml").defaults)
    chosen = {
        group: value
        for entry in defaults
        if isinstance(entry, dict)
        for group, value in entry.items()
    }
    return tuple((group, chosen[group]) for group in GROUPS)


def _group_choices(parsed: list) -> dict[str, str]:
    """Each group's option: a named one (shipped, config directory, entry point) or, for
    norm, model and data, an import path."""
    from normbench.registry import is_import_path

    choices = dict(_default_choices())
    for override in parsed:
        group = override.key_or_group
        if group not in GROUPS:
            continue
        value = override.value()
        plugin = group in PLUGIN_GROUPS and isinstance(value, str) and is_import_path(value)
        if not isinstance(value, str) or not (value in options(group) or plugin):
            hint = ", or an import path package.module:Object" * (group in PLUGIN_GROUPS)
            raise UsageError(
                f"{group}={value}: unknown {group}; valid: {', '.join(options(group))}{hint}"
            )
        choices[group] = value
    return choices


def _unknown_key(key: str, keys: dict[str, Key]) -> str:
    section = key.rsplit(".", 1)[0] if "." in key else ""
    siblings = sorted(k for k in keys if (k.rsplit(".", 1)[0] if "." in k else "") == section)
    close = difflib.get_close_matches(key, keys, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    where = f"under {section}" if siblings and section else "at the top level"
    if not siblings:
        siblings = sorted({k.split(".")[0] for k in keys})
        where = "sections and top-level keys"
    return f"unknown key '{key}'{hint}; valid {where}: {', '.join(siblings)}"


@functools.cache
def _base_config(choices: tuple[tuple[str, str], ...], dirs: tuple[Path, ...]) -> str:
    """Hydra's composition of the group choices, with the config directories ``dirs`` on its
    search path, each plugin's section made from its signature; as JSON (cached: a sweep of
    hundreds of runs has only a handful of group combinations, and Hydra takes ~50 ms per
    composition). An option that is no yaml file (an entry point, an import path) is composed
    as the group's default, whose section its own then replaces."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    defaults = dict(_default_choices())
    known = {group: _options(group, dirs) for group, _ in choices}
    in_yaml = {g: o for g, o in choices if o in known[g] and known[g][o].path is not None}
    overrides = [f"{group}={in_yaml.get(group, defaults[group])}" for group, _ in choices]
    if dirs:
        overrides.append(_search_path(dirs))
    with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
        composed = hydra_compose(config_name="config", overrides=overrides)
    cfg = OmegaConf.to_container(composed, resolve=True)
    for group, option in choices:
        cfg[group] = _section(group, option, cfg[group], known[group].get(option))
    return json.dumps(cfg)


def _search_path(dirs: tuple[Path, ...]) -> str:
    """``hydra.searchpath=['file:///abs/dir', ...]``, each path quoted for Hydra's grammar."""
    quoted = [str(d).replace("\\", "\\\\").replace("'", "\\'") for d in dirs]
    return "hydra.searchpath=[" + ",".join(f"'file://{d}'" for d in quoted) + "]"


def _section(group: str, choice: str, composed: dict, option: Option | None) -> dict:
    """The group's section for ``choice``. A config directory's yaml is either a plugin (it
    has ``_target_``; its other keys are the plugin's, or shared ones) or a preset of a
    shipped option (``name: transformer`` and some keys; the shipped option's fill the rest)."""
    from normbench.registry import lookup

    if option is None or option.path is None:  # an entry point or an import path
        return plugin_section(group, choice, lookup(group, choice).target)
    if option.source == "normbench":
        return composed
    if "_target_" in composed and group in PLUGIN_GROUPS:
        defaults = plugin_section(group, choice, composed["_target_"])
        return {**defaults, **composed, "name": choice, "_target_": defaults["_target_"]}
    shipped = shipped_options(group)
    if composed.get("name") not in shipped:
        plugin = "_target_: package.module.Object (your own), or " * (group in PLUGIN_GROUPS)
        raise UsageError(
            f"{group}={choice} ({option.path}): set {plugin}name: one of {', '.join(shipped)} "
            "(a preset of a shipped option)"
        )
    preset_of = json.loads(_base_config(((group, composed["name"]),), ()))[group]
    return {**preset_of, **composed}


def _set_values(base: str, overrides: list) -> dict:
    """Apply key=value overrides (already parsed and type-converted by Hydra's parser)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    cfg = OmegaConf.create(json.loads(base))
    try:
        for override in overrides:
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=False)
        return OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        raise UsageError(" ".join(str(err).split())) from None


def flatten(cfg: dict, prefix: str = "") -> dict[str, Any]:
    """{'train': {'lr': 1}} -> {'train.lr': 1}."""
    flat: dict[str, Any] = {}
    for key, value in cfg.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def experiment(cfg: dict) -> dict:
    """The config without its execution settings, observations and later keys at their old
    behaviour: what a run computes, hashed into its id."""
    trimmed = json.loads(json.dumps(cfg))
    later = [key for key, old in LATER_KEYS.items() if flatten(cfg).get(key) == old]
    for key in (*EXECUTION_KEYS, *OBSERVATION_KEYS, *later):
        *sections, leaf = key.split(".")
        parent = trimmed
        for section in sections:
            parent = parent.get(section, {})
        parent.pop(leaf, None)
    return trimmed


def validate(cfg: dict, keys: dict[str, Key] | None = None) -> dict:
    """Check every value against the schema, then the data (normbench.data.describe), then
    every combination rule; convert in place and return ``cfg``."""
    if keys is None:
        keys = schema_for(cfg)
    flat = flatten(cfg)
    for key in flat:
        if key not in keys:
            raise UsageError(_unknown_key(key, keys))
    for key, spec in keys.items():
        if key not in flat:
            raise UsageError(f"missing key '{key}' (expected {spec.describe()})")
        if flat[key] == REQUIRED:
            raise UsageError(f"{key} has no default; set it: {key}=VALUE ({spec.describe()})")
        try:
            value = spec.check(flat[key])
        except ValueError:
            raise UsageError(
                f"{key}={shown(flat[key])} is not valid; valid: {spec.describe()}"
            ) from None
        section, _, leaf = key.rpartition(".")
        (cfg[section] if section else cfg)[leaf] = value
    _identify_data(cfg)
    for rule in RULES:
        message = rule.violation(cfg)
        if message:
            raise UsageError(message)
    return cfg

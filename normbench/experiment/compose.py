"""Compose a run's config from conf/ with Hydra's compose API, and validate it before any work.

Hydra does the composition (defaults list, group options, its override grammar); this module
checks every override and every resolved value against ``SCHEMA`` so that a typo or a wrong
type is refused in one line naming the key, the bad value and the valid choices. The result
is a plain nested dict: the rest of normbench never sees OmegaConf.

Options come from normbench's own conf/, from user config directories, from installed plugins
and from import paths (normbench.experiment.options). A plugin's section carries its
``_target_`` (the import path) and its own keys, read off its signature; workers rebuild it from
the resolved config alone. Composing never builds a plugin: normbench.experiment.probe does,
after composing (``compose_checked``).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterable
from pathlib import Path

from normbench.core.errors import UsageError
from normbench.core.files import YAML_LIMIT, read_text
from normbench.core.keys import REQUIRED, Key, shown
from normbench.core.registry import is_import_path, lookup
from normbench.core.suggest import closest, did_you_mean
from normbench.data.datasets import describe
from normbench.data.hubcache import HUB_DATA, SET_NAME, SHIPPED, USER_OPTIONS
from normbench.data.hubload import manifest_of
from normbench.data.pysource import corpus
from normbench.experiment.options import (
    PLUGIN_GROUPS,
    Option,
    conf_dir,
    config_dirs,
    group_options,
    options,
    options_in,
    plugin_section,
    schema_for,
    shipped_options,
)
from normbench.experiment.rules import RULES
from normbench.experiment.schema import GROUPS, OPTION_SCHEMA, flatten, ignored_by_optimizer
from normbench.layers.keys import NORM_SHARED, NORM_SHARED_KEYS, norm_reads


def parse_overrides(overrides: Iterable[str], with_group_options: bool = False) -> list:
    """Hydra's own override parser; a malformed override is a UsageError.

    ``with_group_options`` gives the parser Hydra's config loader, which ``glob()`` needs to
    list a group's options (sweeps only: it costs a Hydra initialisation). Without it each
    override string is parsed once per process (``_parsed``): the jobs of a grid share them.
    """
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    overrides = list(overrides)
    try:
        if not with_group_options:
            return [_parsed(override) for override in overrides]
        with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
            loader = GlobalHydra.instance().config_loader()
            return OverridesParser.create(config_loader=loader).parse_overrides(overrides)
    except OverrideParseException as err:
        raise UsageError(_parse_error(str(err))) from None


# Hydra's functions that a grid can use: interval() needs an optimising sweeper
SWEEP_FUNCTIONS = (
    "range(), choice(), glob(), sort(), shuffle(), tag(), int(), float(), str(), bool()"
)


def _parse_error(message: str) -> str:
    """One line for Hydra's parse error: an unknown function (``seed=rnage(3)``) names the key,
    the value and the functions there are, since ``key=value`` is what the user wrote; any
    other malformed override says what an override looks like."""
    lines = message.splitlines()
    unknown = re.search(r"Unknown function '([^']*)'", message)
    given = re.match(r"Error parsing override '(.*)'$", lines[0])
    if unknown and given:
        key, _, value = given.group(1).partition("=")
        name = unknown.group(1)
        # the names alone: the shared "()" made foo() look like bool()
        close = closest(name, [f.removesuffix("()") for f in SWEEP_FUNCTIONS.split(", ")])
        hint = f" (did you mean {close}()?)" if close else ""
        return (
            f"{key}={value}: unknown function {name}(){hint}; the functions a value can use "
            f"are {SWEEP_FUNCTIONS}"
        )
    return (
        f"{lines[0]}: overrides look like key=value, e.g. norm=groupnorm batch_size=8 train.lr=1e-3"
    )


def refuse_repeated(overrides: Iterable[str]) -> None:
    """A key (or group) the command line sets twice is refused, naming both values: Hydra
    would keep the last one silently, and the user meant one of them (a sweep's axis is one
    override with its values, ``train.lr=a,b``)."""
    given: dict[str, str] = {}
    for override in parse_overrides(overrides):
        key = override.key_or_group
        if key in given:
            raise UsageError(
                f"{key} is given twice ({given[key]} and {override.input_line}); give it "
                f"once (a sweep's values as one axis, e.g. {key}=a,b)"
            )
        given[key] = override.input_line


@functools.cache
def _parsed(override: str):
    """One override parsed by Hydra (which parses a list one string at a time, in order);
    callers only read it (``_set_values`` copies its value)."""
    (parsed,) = _parser().parse_overrides([override])
    return parsed


@functools.cache
def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def compose(overrides: Iterable[str] = ()) -> dict:
    """The validated, resolved config of one run, as a plain dict.

    Sweep syntax (``a,b``, ``range()``, ...) is refused here: it belongs to `normbench sweep`.
    Plugins are named and their keys checked, but not built: ``compose_checked``
    (normbench.experiment.probe) also runs them once before anything is written.
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
    base_cfg = json.loads(base)
    keys = schema_for(base_cfg)
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
            raise UsageError(_unknown_key(key, keys, _unread(base_cfg)))
    values = [override for override in parsed if override.key_or_group not in GROUPS]
    cfg = _set_values(base, values)
    resolved = {g: cfg[g].get("name") for g in GROUPS if isinstance(cfg.get(g), dict)}
    try:
        return canonical(validate(cfg, keys))
    except UsageError as err:
        raise UsageError(_as_typed(str(err), choices, resolved)) from None


def _as_typed(message: str, choices: dict[str, str], resolved: dict) -> str:
    """An error as the user chose: an option that resolves to another's name (placement=peri
    is sandwich) is named as typed, with what it resolved to, not by a name never typed."""
    for group, chosen in choices.items():
        name = resolved.get(group)
        if isinstance(name, str) and name != chosen and not is_import_path(chosen):
            said = f"{group}={chosen} ({chosen} is {group}={name})"
            pattern = rf"\b{group}={re.escape(name)}(?![\w.:])"
            message = re.sub(pattern, lambda _, said=said: said, message, count=1)
    return message


def _identify_data(cfg: dict) -> None:
    """Record what the data are in the config, so that it is part of the run id and of
    config.yaml. data=pysource: the corpus identity (Python version, hash of the files); a value
    given by the user must be this interpreter's own (runs of another Python's library cannot
    be repeated here). data=arrays and data plugins: the arrays' content hash (changing the
    file never reuses old runs), after checking them (normbench.data.describe); the file's
    path made absolute, and the split fractions nulled where the file has its own split."""
    data = cfg["data"]
    if data["name"] in HUB_DATA:
        _identify_fetched(data)
        return
    if data["name"] == "pysource":
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
    found = describe({**data, "sha256": None})
    if data["sha256"] not in (None, found.sha256):
        raise UsageError(
            f"data.sha256={data['sha256']} is not the hash of these arrays; valid: "
            f"{found.sha256} (or leave it out)"
        )
    data["sha256"] = found.sha256
    for split in found.given:
        data[f"{split}_fraction"] = None


def _identify_fetched(data: dict) -> None:
    """A fetched set (data=cifar10, tinystories, hub_images, hub_text) must be in the cache
    and pass its checks before anything is written (a UsageError naming the fetch command).
    A user's set (data.set) has its fingerprint recorded in the config, so that a set fetched
    again from other files never reuses the runs of the old one; a shipped set is pinned by
    normbench's code, and its fingerprint goes to each run's meta.json instead (its run ids
    stay those of its config)."""
    if data["name"] in USER_OPTIONS:
        if data["set"] is None:
            raise UsageError(
                f"data={data['name']} needs data.set=NAME, a set fetched with `normbench data "
                "fetch NAME --repo ...` (`normbench data list` shows them)"
            )
        if not SET_NAME.match(data["set"]):
            raise UsageError(
                f"data.set={data['set']} is not a data set name; valid: lower-case letters, "
                "digits, '_', '-', '.' (`normbench data list` shows the fetched sets)"
            )
        if data["set"] in SHIPPED:
            raise UsageError(f"data.set={data['set']} is a shipped set; valid: data={data['set']}")
    manifest = manifest_of(data)
    if data["name"] not in USER_OPTIONS:
        return
    if data["fingerprint"] not in (None, manifest.fingerprint):
        raise UsageError(
            f"data.fingerprint={data['fingerprint']} is not the cached {data['set']}'s; valid: "
            f"{manifest.fingerprint} (or leave it out)"
        )
    data["fingerprint"] = manifest.fingerprint


def canonical(cfg: dict) -> dict:
    """Null the norm.* keys the chosen norm ignores, and the train.* keys the chosen optimizer
    ignores (schema.OPTIMIZER_KEYS), so that configs that cannot differ in outcome are one
    experiment with one run id (GroupNorm at ghost_batch 2 and 32 is the same run; so is AdamW
    at any train.muon_lr; a sweep crossing every norm with ghost_batch trains it once); the
    data-parallel statistics keys norm.sync and norm.eval_stats at their defaults on one
    device, where they cannot matter; and
    model.base_width and model.base_head_dim, which only muP reads, in a standard Transformer
    or CNN."""
    for key in NORM_SHARED_KEYS - norm_reads(cfg["norm"]):
        cfg["norm"][key] = None
    if cfg["train"]["devices"] == 1:  # one process: its batch is the global batch, rank 0's
        for key in ("sync", "eval_stats"):  # statistics the only ones, whatever these say
            if cfg["norm"].get(key) is not None:
                cfg["norm"][key] = NORM_SHARED[key].default
    for key in ignored_by_optimizer({f"train.{k}": v for k, v in cfg["train"].items()}):
        cfg["train"][key.partition(".")[2]] = None
    model = cfg["model"]
    if "_target_" not in model and model.get("parametrization") == "standard":
        model["base_width"] = None
        if "base_head_dim" in model:
            model["base_head_dim"] = None
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
    choices = dict(_default_choices())
    for override in parsed:
        group = override.key_or_group
        if group not in GROUPS:
            continue
        value = override.value()
        plugin = group in PLUGIN_GROUPS and isinstance(value, str) and is_import_path(value)
        if not isinstance(value, str) or not (value in options(group) or plugin):
            hint = ", or an import path package.module:Object" * (group in PLUGIN_GROUPS)
            close = did_you_mean(str(value), options(group))
            dotted = isinstance(value, str) and "." in value and ":" not in value
            if group in PLUGIN_GROUPS and dotted and not close:  # mynorms.PowerNorm
                module, _, name = value.rpartition(".")
                close = f" (an import path names its object after a colon: {module}:{name})"
            raise UsageError(
                f"{group}={value}: unknown {group}{close}; valid: {', '.join(options(group))}{hint}"
            )
        choices[group] = value
    return choices


def _unread(cfg: dict) -> set[str]:
    """The shared norm.* keys the config's norm does not read: valid (a sweep crosses any norm
    with any of them) but ignored, so never offered as the norm's keys."""
    return {f"norm.{key}" for key in NORM_SHARED_KEYS - norm_reads(cfg["norm"])}


def _unknown_key(key: str, keys: dict[str, Key], unread: set[str] = frozenset()) -> str:
    """The unknown key, the closest valid one, and the keys valid beside it. The ``unread``
    ones (the shared keys the chosen norm ignores) are not listed, and one is named as the
    closest only with that said. At the top level the sections and groups are valid too
    (``nrom=batchnorm`` means ``norm``)."""
    listed = {k: spec for k, spec in keys.items() if k not in unread}
    section = key.rsplit(".", 1)[0] if "." in key else ""
    siblings = sorted(k for k in listed if (k.rsplit(".", 1)[0] if "." in k else "") == section)
    where = f"under {section}" if siblings and section else "at the top level"
    if not section or not siblings:
        siblings = sorted({k.split(".")[0] for k in listed} | set(GROUPS))
        where = "at the top level" if not section else "sections and top-level keys"
    candidates = siblings if not section else [*listed, *siblings]
    close = closest(key, [*candidates, *unread])
    if close in unread:
        hint = f" (did you mean {close}? the chosen norm does not read it)"
    else:
        hint = did_you_mean(key, candidates)
    return f"unknown key '{key}'{hint}; valid {where}: {', '.join(siblings)}"


@functools.cache
def _base_config(choices: tuple[tuple[str, str], ...], dirs: tuple[Path, ...]) -> str:
    """The composition of the group choices (``_composed``), with the config directories
    ``dirs`` on the search path, each plugin's section made from its signature; as JSON
    (cached per combination). An option that is no yaml file (an entry point, an import path)
    is composed as the group's default, whose section its own then replaces."""
    defaults = dict(_default_choices())
    known = {group: options_in(group, dirs) for group, _ in choices}
    in_yaml = {g: o for g, o in choices if o in known[g] and known[g][o].path is not None}
    files = tuple((group, in_yaml.get(group, defaults[group])) for group, _ in choices)
    cfg = _composed(files, dirs)
    for group, option in choices:
        cfg[group] = _section(group, option, cfg[group], known[group].get(option))
    return json.dumps(cfg)


def _composed(files: tuple[tuple[str, str], ...], dirs: tuple[Path, ...]) -> dict:
    """Hydra's composition of config.yaml with these group options (yaml files), resolved.

    Hydra takes ~0.2 s a composition, and a grid crosses many options (the suite preset has 41
    combinations, a 10,000-run grid may have thousands). Most options write only their own
    group's section: config.yaml's (``_self_``, first in its defaults list) merged with the
    option's file, whatever the other groups choose. So Hydra composes with each such option
    at its group's default, and the option's section is merged in its place as Hydra's own
    merge would (tests/experiment/test_compose.py compares both on a preset and on grids).
    Options that write elsewhere (``@package _global_``, as data=pysource) stay in Hydra's
    composition; when one writes into a section merged in place, or only Hydra can say what
    an option writes (a defaults list, another package, an interpolation), Hydra composes
    the combination whole."""
    if not _self_is_plain():
        return json.loads(_hydra_composed(files, dirs))
    defaults = dict(_default_choices())
    known = {group: options_in(group, dirs) for group, _ in files}
    writes = {group: _writes(group, known[group][option].path) for group, option in files}
    default_writes = {
        group: _writes(group, known[group][defaults[group]].path) for group, _ in files
    }
    swapped = {
        group: option
        for group, option in files
        if option != defaults[group]
        and writes[group] == {group}
        and default_writes[group] == {group}
    }
    others: set[str] = set()  # what the options Hydra composes write, besides their group
    for group, _ in files:
        written = default_writes[group] if group in swapped else writes[group]
        if written is None:
            return json.loads(_hydra_composed(files, dirs))
        others |= written - {group}
    if others & set(swapped):
        return json.loads(_hydra_composed(files, dirs))
    rest = tuple((group, defaults[group] if group in swapped else o) for group, o in files)
    cfg = json.loads(_hydra_composed(rest, dirs))
    for group, option in swapped.items():
        cfg[group] = json.loads(_own_section(group, known[group][option].path))
    return cfg


@functools.cache
def _hydra_composed(files: tuple[tuple[str, str], ...], dirs: tuple[Path, ...]) -> str:
    """Hydra's own composition of config.yaml with these group options (JSON, cached)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    overrides = [f"{group}={option}" for group, option in files]
    if dirs:
        overrides.append(_search_path(dirs))
    with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
        composed = hydra_compose(config_name="config", overrides=overrides)
    return json.dumps(OmegaConf.to_container(composed, resolve=True))


@functools.cache
def _self_is_plain() -> bool:
    """Whether config.yaml merges first (``_self_`` heads its defaults list) and has no
    interpolation: then a group's section is config.yaml's merged with its option's file."""
    from omegaconf import OmegaConf

    text = read_text(conf_dir() / "config.yaml", YAML_LIMIT)
    defaults = OmegaConf.to_container(OmegaConf.create(text).defaults)
    return defaults[:1] == ["_self_"] and "${" not in text


@functools.cache
def _writes(group: str, path: Path) -> frozenset[str] | None:
    """The top-level sections the option file ``path`` of ``group`` writes: its group's (no
    package header, or the group's own), or its top-level keys (``@package _global_``); None
    when only Hydra can say (a defaults list, another package, an interpolation)."""
    from hydra.plugins.config_source import ConfigSource
    from omegaconf import DictConfig, OmegaConf

    text = read_text(path, YAML_LIMIT)  # a config directory's file: the trusted reader
    try:
        package = ConfigSource._get_header_dict(text[:512])["package"]
    except ValueError:
        return None
    loaded = OmegaConf.create(text)
    if "${" in text or not isinstance(loaded, DictConfig) or "defaults" in loaded:
        return None
    if package in (None, "_group_", group):
        return frozenset({group})
    if package == "_global_":
        return frozenset(str(key) for key in loaded)
    return None


@functools.cache
def _own_section(group: str, path: Path) -> str:
    """config.yaml's ``group`` section merged with the option file ``path`` (JSON): the section
    Hydra composes for an option that writes only its own group."""
    from omegaconf import OmegaConf

    own = OmegaConf.load(conf_dir() / "config.yaml")
    merged = OmegaConf.create({group: own[group]} if group in own else {})
    merged.merge_with({group: OmegaConf.create(read_text(path, YAML_LIMIT))})
    return json.dumps(OmegaConf.to_container(merged, resolve=True)[group])


def _search_path(dirs: tuple[Path, ...]) -> str:
    """``hydra.searchpath=['file:///abs/dir', ...]``, each path quoted for Hydra's grammar."""
    quoted = [str(d).replace("\\", "\\\\").replace("'", "\\'") for d in dirs]
    return "hydra.searchpath=[" + ",".join(f"'file://{d}'" for d in quoted) + "]"


def _section(group: str, choice: str, composed: dict, option: Option | None) -> dict:
    """The group's section for ``choice``. A config directory's yaml is either a plugin (it
    has ``_target_``; its other keys are the plugin's, or shared ones) or a preset of a
    shipped option (``name: transformer`` and some keys; the shipped option's fill the rest)."""
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
    """Apply key=value overrides (already parsed and type-converted by Hydra's parser; every
    key checked to be the config's). As plain dicts, which is what OmegaConf's update and
    conversion give for these values (~40 ms a job through OmegaConf, a grid's largest cost);
    through OmegaConf when a string would be an interpolation (``${...}``) for it to resolve."""
    if "${" in base or any(_interpolates(override.value()) for override in overrides):
        return _set_values_omegaconf(base, overrides)
    cfg = json.loads(base)
    for override in overrides:
        *sections, leaf = override.key_or_group.split(".")
        node = cfg
        for section in sections:
            node = node[section]
        node[leaf] = copy.deepcopy(override.value())
    return cfg


def _interpolates(value: object) -> bool:
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, dict):
        return any(_interpolates(k) or _interpolates(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_interpolates(item) for item in value)
    return False


def _set_values_omegaconf(base: str, overrides: list) -> dict:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    cfg = OmegaConf.create(json.loads(base))
    try:
        for override in overrides:
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=False)
        return OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        raise UsageError(" ".join(str(err).split())) from None


def validate(cfg: dict, keys: dict[str, Key] | None = None) -> dict:
    """Check every value against the schema, then the data (normbench.data.describe), then
    every combination rule; convert in place and return ``cfg``."""
    if keys is None:
        keys = schema_for(cfg)
    flat = flatten(cfg)
    for key in flat:
        if key not in keys:
            raise UsageError(_unknown_key(key, keys, _unread(cfg)))
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
    if cfg["log"]["tensorboard"] is not None:  # a sweep's jobs may start in another directory
        if not str(cfg["log"]["tensorboard"]).strip():
            raise UsageError("log.tensorboard='': name a directory, e.g. log.tensorboard=board")
        cfg["log"]["tensorboard"] = str(Path(cfg["log"]["tensorboard"]).expanduser().resolve())
    for rule in RULES:
        message = rule.violation(cfg)
        if message:
            raise UsageError(message)
    return cfg

"""The norm table (normbench.layers.keys.NORM_TABLE), the one place a norm is declared: its
classes, its config group's yaml files and config.yaml's shared ``norm:`` block are checked
against it; the schema and the registry derive from it; a plugin is an entry like the rest."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest
import yaml
from torch import nn

from normbench.experiment.compose import compose
from normbench.experiment.options import conf_dir
from normbench.experiment.schema import OPTION_SCHEMA, SCHEMA
from normbench.layers.keys import (
    NORM_FACTORY_KEYS,
    NORM_SHARED,
    NORM_TABLE,
    norm_entry,
    taken_options,
)
from normbench.layers.norms import NORMS, make_norm, norm_factory


def constructor_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """What ``cls(num_features, layout, **options)`` takes: its __init__'s parameters after
    layout and, where it passes ``**kwargs`` on, its base classes' (as SwitchNorm does)."""
    found: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is nn.Module:
            continue
        parameters = list(inspect.signature(klass.__init__).parameters.values())[3:]
        named = [p for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        found.update({p.name: p for p in named if p.name not in found})
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return found


@pytest.mark.parametrize("name", sorted(NORM_TABLE))
def test_each_class_takes_what_its_entry_says_with_the_same_defaults(name):
    entry, parameters = NORM_TABLE[name], constructor_parameters(NORMS[name])
    assert set(parameters) == entry.takes
    for key, own in entry.own.items():
        assert parameters[key].default == own.default, key
    for key in entry.reads - NORM_FACTORY_KEYS:  # the factory acts on those itself
        assert parameters[key].default == NORM_SHARED[key].default, key


def test_the_config_group_has_one_yaml_per_entry_holding_its_keys_at_their_defaults():
    """Hydra composes norm=NAME from conf/norm/NAME.yaml, and `normbench list` shows its
    comment: a yaml per entry, no more, each with the entry's own keys at their defaults."""
    files = {path.stem: path for path in (conf_dir() / "norm").glob("*.yaml")}
    assert sorted(files) == sorted(NORM_TABLE)
    for name, entry in NORM_TABLE.items():
        expected = {"name": name, **{k: own.default for k, own in entry.config_keys().items()}}
        text = files[name].read_text()
        body = yaml.safe_dump(expected, sort_keys=False)
        must = f"# (what the norm is, for `normbench list`)\n{body}"
        assert text.startswith("# ") and yaml.safe_load(text) == expected, (
            f"conf/norm/{name}.yaml must hold, as the norm table says:\n{must}"
        )


def test_config_yaml_shares_the_tables_keys_at_their_defaults():
    shared = yaml.safe_load((conf_dir() / "config.yaml").read_text())["norm"]
    assert shared == {key: spec.default for key, spec in NORM_SHARED.items()}


def test_the_schema_derives_from_the_table():
    for key, spec in NORM_SHARED.items():
        assert SCHEMA[f"norm.{key}"] == spec.accepts
    for name, entry in NORM_TABLE.items():
        own = {f"norm.{key}": spec.accepts for key, spec in entry.config_keys().items()}
        assert OPTION_SCHEMA["norm"].get(name, {}) == own, name
    assert set(OPTION_SCHEMA["norm"]["derf"]) == {
        "norm.alpha_init",
        "norm.shift_init",
        "norm.alpha_init_attention",
        "norm.alpha_init_mlp",
        "norm.alpha_init_final",
    }


def test_the_table_the_schema_and_the_key_lists_import_no_torch():
    code = (
        "import sys, normbench.layers.keys, normbench.experiment.schema\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)[:3]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_one_filter_for_a_config_section_and_for_make_norm():
    section = compose(["norm=dyt", "norm.alpha_init=1.5", "norm.alpha_init_mlp=2"])["norm"]
    assert taken_options(norm_entry(section), section) == {
        "eps": 1e-5,
        "fp32_stats": True,
        "mask_padding": True,
        "alpha_init": 1.5,
    }
    bound = norm_factory(section)
    assert bound.at("mlp").options["alpha_init"] == 2 and bound.options["alpha_init"] == 1.5
    layer = make_norm("dyt", 4, "tokens", alpha_init=1.5, groups=2, ghost_batch=4)
    assert layer.alpha.item() == 1.5  # groups and ghost_batch: known, not dyt's, ignored


def test_a_shipped_class_by_import_path_is_an_entry_like_its_table_one():
    """No special case per source: normbench's own DyT named by import path (a plugin, read
    off its signature) reads the same keys and is built with the same options."""
    shipped = compose(["norm=dyt"])["norm"]
    plugin = compose(["norm=normbench.layers.norms:DyT"])["norm"]
    assert norm_entry(plugin).reads == norm_entry(shipped).reads
    assert set(norm_entry(plugin).own) == set(norm_entry(shipped).own)
    by_path, by_name = norm_factory(plugin), norm_factory(shipped)
    assert by_path.cls is by_name.cls and by_path.options == by_name.options

"""The experiment's schema: the config groups, every key and what it accepts, and which keys
are not part of an experiment (execution settings, observations, keys added later).

Pure tables and dict functions: no Hydra, no files. ``normbench.experiment.options`` extends
the schema with a config's plugins; ``normbench.experiment.compose`` checks configs against it.
"""

from __future__ import annotations

import json
from typing import Any

from normbench.core.keys import Key
from normbench.data.hubload import AUGMENTATIONS
from normbench.layers.keys import (
    ATTENTION_GATES,
    NORM_FIXED,
    NORM_SHARED,
    NORM_TABLE,
    PARAMETRIZATIONS,
    POSITION_KEYS,
    QK_NORMS,
)

GROUPS = ("model", "norm", "placement", "data", "precision")
DEVICES = ("auto", "cpu", "cuda", "mps")
# Execution settings: they change where and how fast a run goes, or where it is watched
# (log.tensorboard), not what it computes, so they are left out of the run id (dotted: nested
# keys). train.compile changes the kernels, not the computation: its floats differ from eager's
# in their last bits as they do between thread counts.
EXECUTION_KEYS = (
    "device",
    "threads",
    "train.checkpoint_every",
    "train.compile",
    "train.timeout_s",
    "log.tensorboard",
)
# Observations: what a run records about itself beyond its metrics. Asking for them does not
# make another experiment (a finished run without them is trained again to record them).
OBSERVATION_KEYS = ("diagnostics",)
# Keys added after runs were made, with the value that reproduces those runs: at that value
# a key leaves the run id as it was, so the runs made before it existed are still found.
LATER_KEYS = {
    "model.init": "default",
    "model.qk_norm": "none",
    "train.z_loss": 0.0,
    "train.muon_lr": 0.02,
    "train.muon_momentum": 0.95,
    "train.muon_qkv": "fused",
    "train.adam_beta2": 0.999,
    "train.devices": 1,
    "norm.sync": "device",
    "norm.eval_stats": "rank0",
    "norm.impl": "module",
}
# Later keys shared by every norm section (normbench.layers.keys.NORM_SHARED): a norm that
# does not read one has it nulled, and null leaves the run id as it was too.
LATER_SHARED_KEYS = ("norm.sync", "norm.eval_stats")
# The train.* keys only some optimizers read, with the optimizers that read them: the others
# have them nulled in the resolved config (compose.canonical), so that configs that cannot
# differ are one run. A nulled key is hashed as its default (the value every run made before
# the nulling has: a run at the defaults keeps its id).
OPTIMIZER_KEYS: dict[str, tuple[tuple[str, ...], Any]] = {
    "train.momentum": (("sgd",), 0.9),
    "train.muon_lr": (("muon",), 0.02),
    "train.muon_momentum": (("muon",), 0.95),
    "train.muon_qkv": (("muon",), "fused"),
    "train.adam_beta2": (("adamw", "muon"), 0.999),
}
# The shipped data sets whose train split data.train_samples takes a subset of (a data ladder)
SUBSET_DATA = ("mnist1d", "digits", "tokens", "pysource")
# The same for keys that only some shipped options have (a plugin's own keys of the same name
# are its own and stay in its id): key -> (the options of its group that have it, old value).
LATER_OPTION_KEYS: dict[str, tuple[tuple[str, ...], Any]] = {
    "norm.alpha_init": (("dyt", "derf"), 0.5),
    "norm.shift_init": (("derf",), 0.0),
    **{f"norm.{key}": (("dyt", "derf"), None) for key in POSITION_KEYS},
    "model.embed_norm": (("transformer",), False),
    "model.attention_gate": (("transformer",), "none"),
    "model.sdd": (("transformer",), False),
    "model.embed_scale": (("transformer",), False),
    "model.parametrization": (("transformer", "cnn"), "standard"),
    "model.base_width": (("transformer", "cnn"), None),  # null unless muP (compose.canonical)
    "model.base_head_dim": (("transformer",), None),  # null: base_width / heads; unless muP
    "data.train_samples": (SUBSET_DATA, None),
    "model.zero_init_last_norm": (("resnet",), False),
}


def _positive(nullable: bool = False) -> Key:
    return Key(int, minimum=1, nullable=nullable)


# A shipped model's depth at most: above the deepest networks the norm literature trains
# (DeepNet's 1,000-layer Transformer, Wang et al. 2022, arXiv:2203.00555; He et al.'s
# ResNet-1001, 333 blocks). Deeper is a typo that would otherwise build for minutes (about 3 ms
# a layer on a CPU) and then need more memory than the machine has: depth 100,000 at the
# default width is 3.3e9 parameters, 27 GB of fp32 weights and gradients.
MAX_DEPTH = 1024


def _depth() -> Key:
    return Key(int, minimum=1, maximum=MAX_DEPTH)


# muP's base sizes at most: wider than any model trained (GPT-3's width is 12,288); a base
# width beyond it is a typo, whose width ratio would scale the readout by an absurd factor.
MUP_LARGEST_BASE = 65536


def _parametrization_keys(heads: bool = False) -> dict[str, Key]:
    """muP's keys (normbench.layers.mup): the Transformer's also the base model's head size.
    base_width and base_head_dim are null unless muP."""
    base = Key(int, minimum=1, maximum=MUP_LARGEST_BASE, nullable=True)
    return {
        "model.parametrization": Key(str, choices=PARAMETRIZATIONS),
        "model.base_width": base,
        **({"model.base_head_dim": base} if heads else {}),
    }


def _fraction() -> Key:
    return Key(float, minimum=0.0, maximum=0.9)


def _subset() -> dict[str, Key]:
    """data.train_samples: the first N samples of the train split (null: all of it)."""
    return {"data.train_samples": _positive(nullable=True)}


SCHEMA: dict[str, Key] = {
    "batch_size": _positive(),
    "seed": Key(int, minimum=0, maximum=2**32 - 1),  # numpy's and torch's seed range
    "device": Key(str, choices=DEVICES),
    "threads": _positive(nullable=True),
    "diagnostics": Key(bool),
    **{f"norm.{key}": shared.accepts for key, shared in NORM_SHARED.items()},  # the norm table's
    "train.optimizer": Key(str, choices=("adamw", "sgd", "muon")),
    "train.muon_lr": Key(float, minimum=0.0, nullable=True),
    "train.muon_momentum": Key(float, minimum=0.0, maximum=1.0),
    "train.muon_qkv": Key(str, choices=("split", "fused")),
    "train.adam_beta2": Key(float, minimum=0.0, maximum=0.9999),
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
    "train.z_loss": Key(float, minimum=0.0),
    "train.eval_every": _positive(),
    "train.log_every": _positive(),
    "train.checkpoint_every": _positive(nullable=True),
    "train.compile": Key(bool),
    "train.devices": _positive(),
    "train.timeout_s": Key(float, minimum=1.0),
    "target.metric": Key(str, choices=("val_acc", "val_loss", "val_bpb")),
    "target.value": Key(float),
    "log.tensorboard": Key(str, nullable=True),
}
# Keys that exist only for one option of a group; the option's `name` key is checked against
# the group's yaml files.
OPTION_SCHEMA: dict[str, dict[str, dict[str, Key]]] = {
    "model": {
        "transformer": {
            "model.width": _positive(),
            "model.depth": _depth(),
            "model.heads": _positive(),
            "model.mlp_ratio": _positive(),
            "model.patch_size": _positive(),
            "model.weight_std": Key(bool),
            "model.init": Key(str, choices=("default", "xavier")),
            "model.qk_norm": Key(str, choices=QK_NORMS),
            "model.attention_gate": Key(str, choices=ATTENTION_GATES),
            "model.sdd": Key(bool),
            "model.embed_norm": Key(bool),
            "model.embed_scale": Key(bool),
            **_parametrization_keys(heads=True),
        },
        "cnn": {
            "model.width": _positive(),
            "model.depth": _depth(),
            "model.kernel_size": _positive(),
            "model.weight_std": Key(bool),
            "model.init": Key(str, choices=("default", "xavier")),
            "model.qk_norm": Key(str, choices=QK_NORMS),  # only none: rules.py
            **_parametrization_keys(),
        },
        "resnet": {
            "model.width": _positive(),
            "model.depth": _depth(),
            "model.kernel_size": _positive(),
            "model.weight_std": Key(bool),
            "model.zero_init_last_norm": Key(bool),
        },
    },
    "norm": {  # the norm table's (normbench.layers.keys.NORM_TABLE): each norm's own keys
        name: {f"norm.{key}": own.accepts for key, own in entry.config_keys().items()}
        for name, entry in NORM_TABLE.items()
        if entry.config_keys()
    },
    "placement": {"mix": {"placement.post_fraction": Key(float, minimum=0.0, maximum=1.0)}},
    "data": {
        "mnist1d": {
            "data.num_samples": Key(int, minimum=100),
            "data.val_fraction": _fraction(),
            **_subset(),
        },
        "digits": {
            "data.test_fraction": _fraction(),
            "data.val_fraction": _fraction(),
            **_subset(),
        },
        "tokens": {
            "data.num_samples": Key(int, minimum=100),
            "data.min_len": Key(int, minimum=2),
            "data.max_len": Key(int, minimum=2),
            "data.vocab_size": Key(int, minimum=2),
            "data.num_classes": Key(int, minimum=2),
            "data.test_fraction": _fraction(),
            "data.val_fraction": _fraction(),
            **_subset(),
        },
        "pysource": {
            "data.context": Key(int, minimum=2),
            "data.eval_windows": _positive(),
            "data.test_fraction": _fraction(),
            "data.val_fraction": _fraction(),
            "data.corpus": Key(str, nullable=True),
            **_subset(),
        },
        "cifar10": {
            "data.val_fraction": _fraction(),
            "data.augment": Key(str, choices=AUGMENTATIONS),
            **_subset(),
        },
        "tinystories": {
            "data.context": Key(int, minimum=2),
            "data.eval_windows": _positive(),
            **_subset(),
        },
        "hub_images": {
            "data.set": Key(str, nullable=True),
            "data.val_fraction": _fraction(),
            "data.augment": Key(str, choices=AUGMENTATIONS),
            "data.fingerprint": Key(str, nullable=True),
            **_subset(),
        },
        "hub_text": {
            "data.set": Key(str, nullable=True),
            "data.context": Key(int, minimum=2),
            "data.eval_windows": _positive(),
            "data.fingerprint": Key(str, nullable=True),
            **_subset(),
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
    "norm": NORM_FIXED,
    "model": ("cfg", "make_norm", "input_shape", "num_classes"),
    "data": (),
}
PLUGIN_NOT_KEYS = {"model": ("vocab_size",)}
RESERVED_KEYS = ("name", "_target_")


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


def later_option_keys(flat: dict[str, Any]) -> dict[str, Any]:
    """The LATER_OPTION_KEYS that a flattened config's shipped options have, each with the
    value that reproduces the runs made before it existed."""
    found = {}
    for key, (names, old) in LATER_OPTION_KEYS.items():
        group = key.partition(".")[0]
        if flat.get(f"{group}.name") in names and f"{group}._target_" not in flat:
            found[key] = old
    return found


def ignored_by_optimizer(flat: dict) -> dict[str, Any]:
    """The OPTIMIZER_KEYS a flattened config's optimizer does not read, each with its default
    (an unknown optimizer, of no config normbench composes, ignores none)."""
    optimizer = flat.get("train.optimizer")
    known = {name for readers, _ in OPTIMIZER_KEYS.values() for name in readers} | {"adamw"}
    return {
        key: default
        for key, (readers, default) in OPTIMIZER_KEYS.items()
        if optimizer in known and optimizer not in readers and key in flat
    }


def experiment(cfg: dict) -> dict:
    """The config without its execution settings, observations and later keys at their old
    behaviour: what a run computes, hashed into its id. A section left empty goes too (``log``
    holds execution settings only), so a section of them changes no run id."""
    trimmed = json.loads(json.dumps(cfg))
    for key, default in ignored_by_optimizer(flatten(cfg)).items():
        trimmed["train"][key.partition(".")[2]] = default  # nulled: hashed as it was
    flat = flatten(trimmed)
    later = {**LATER_KEYS, **later_option_keys(flat)}
    later = [key for key, old in later.items() if key in flat and flat[key] == old]
    later += [key for key in LATER_SHARED_KEYS if key in flat and flat[key] is None]
    for key in (*EXECUTION_KEYS, *OBSERVATION_KEYS, *later):
        _remove(trimmed, key.split("."))
    return trimmed


def _remove(tree: dict, path: list[str]) -> None:
    """Remove the key at ``path`` (``["train", "lr"]``), and its section if that leaves it
    empty."""
    head, *rest = path
    if not rest:
        tree.pop(head, None)
    elif isinstance(tree.get(head), dict):
        _remove(tree[head], rest)
        if not tree[head]:
            del tree[head]

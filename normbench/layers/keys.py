"""The norm table: every shipped norm, the class that builds it and the norm.* keys it reads,
without torch, so that the command line (--help, completion, validation), the experiment and
the report know the norms without importing it. Also the other torch-free facts about layers
the experiment's rules read (QK-norms, the convolutional models, their placements).

Everything about a norm derives from its entry (as timm's create_norm keeps one table behind
one constructor): the registry (normbench.layers.norms.NORMS, each entry's class), the keys
the schema accepts (normbench.experiment.schema), the keys a config nulls (those its norm does
not read) and the options the norm is built with (``taken_options``, the one filter). A plugin
(an import path, an entry point, a config directory's ``_target_``) is an entry of the same
kind, read off its signature (``norm_entry``), so nothing downstream asks where a norm came
from. Adding a norm is its class in a module of normbench.layers (norms, elementwise,
single_gain: by what it computes) and one entry in NORM_TABLE; its
conf/norm/NAME.yaml (the config group Hydra composes, its comment what `normbench list` shows)
is checked against the entry by tests/layers/test_keys.py, which prints what it must hold.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from normbench.core.keys import Key
from normbench.core.registry import accepted, canonical_target, resolve, signature_keys


@dataclass(frozen=True)
class NormKey:
    """One norm.* key: what it accepts and its default (the value conf/ gives it)."""

    accepts: Key
    default: Any


# The norm.* keys in every norm's section (config.yaml's shared `norm:` block, which a test
# keeps equal to this), so that a sweep can cross any norm with any of them: a norm that does
# not read one has it nulled in the resolved config (one experiment, one run id).
NORM_SHARED: dict[str, NormKey] = {
    "eps": NormKey(Key(float, minimum=0.0), 1.0e-5),
    "momentum": NormKey(Key(float, minimum=0.0, maximum=1.0), 0.1),
    "groups": NormKey(Key(int, minimum=1), 8),
    "ghost_batch": NormKey(Key(int, minimum=1, nullable=True), None),
    "mask_padding": NormKey(Key(bool), True),
    "fp32_stats": NormKey(Key(bool), True),
    # Data-parallel runs (train.devices > 1, docs/distributed.md): batch statistics over each
    # device's batch (DDP's default) or over the global batch (synchronized); the running
    # statistics evaluation uses, rank 0's (DDP's buffer broadcast) or their mean over ranks.
    "sync": NormKey(Key(str, choices=("device", "global")), "device"),
    "eval_stats": NormKey(Key(str, choices=("rank0", "mean")), "rank0"),
    # How the norm is computed (docs/cost.md): its module as written, one call of PyTorch's
    # fused kernel where it has one, or the module through torch.compile.
    "impl": NormKey(Key(str, choices=("module", "fused", "compiled")), "module"),
}
NORM_SHARED_KEYS = frozenset(NORM_SHARED)
# Shared keys the norm factory acts on itself (normbench.layers.norms.BoundNorm): every norm
# reads them (none is nulled), no class is built with them.
NORM_FACTORY_KEYS = frozenset({"impl"})
# The shared keys every norm built on normbench.layers.norms.Norm reads (its constructor's),
# and a plugin's ``**kwargs`` receives.
NORM_COMMON_KEYS = frozenset({"eps", "fp32_stats", "mask_padding"})
# Where a norm sits, for the options that differ by position (DyT's and Derf's alpha_init, as
# their language-model recipes set it apart for the attention, MLP and final norms): the
# Transformer's attention and MLP units, and the final norm of any model.
POSITIONS = ("attention", "mlp", "final")
# The parameters normbench fills itself: every norm is built as cls(num_features, layout, ...).
NORM_FIXED = ("num_features", "layout")


@dataclass(frozen=True)
class NormEntry:
    """One norm: the class that builds it and what it reads from its config section."""

    target: str  # the class's import path: normbench.layers.norms:BatchNorm, mypkg:PowerNorm
    reads: frozenset[str] = NORM_COMMON_KEYS | NORM_FACTORY_KEYS  # the shared keys it reads
    own: Mapping[str, NormKey] = field(default_factory=dict)  # its own keys, under norm.
    # Own keys that the config may also set per position: alpha_init_attention, ... (null:
    # the option's value everywhere). Keys of the config, not parameters of the class.
    per_position: tuple[str, ...] = ()
    # Options the class takes that no config key sets, only make_norm (AdaLN's cond_dim).
    python_options: tuple[str, ...] = ()
    # Statistics over a sequence's tokens, in eval mode too: in a causal model they would
    # leak later bytes into earlier positions (rules.py refuses them with data=pysource).
    # BatchNorm's eval mode uses running statistics, per token (its train mode pools every
    # token of the batch, each token a 1/(N*T) share: see conf/data/pysource.yaml).
    sequence_statistics: bool = False
    # Its fused implementation (norm.impl=fused): a class of normbench.layers.norms with the
    # same parameters whose forward is one call of PyTorch's fused kernel; None: it has none.
    fused: str | None = None

    @property
    def takes(self) -> frozenset[str]:
        """The options its class is built with (the rest of a section is never passed)."""
        return (self.reads - NORM_FACTORY_KEYS) | set(self.own) | set(self.python_options)

    @property
    def implementations(self) -> tuple[str, ...]:
        """The norm.impl values it has: every norm its module and compiled, some fused."""
        return ("module", "fused", "compiled") if self.fused else ("module", "compiled")

    def position_keys(self) -> dict[str, tuple[str, str]]:
        """Its per-position keys: key -> (the option it replaces there, the position)."""
        return {
            f"{option}_{position}": (option, position)
            for option in self.per_position
            for position in POSITIONS
        }

    def config_keys(self) -> dict[str, NormKey]:
        """The keys its section holds beyond the shared ones, with their defaults: its own,
        then its per-position ones (null: the option's value)."""
        keys = dict(self.own)
        for key, (option, _) in self.position_keys().items():
            keys[key] = NormKey(dataclasses.replace(self.own[option].accepts, nullable=True), None)
        return keys


def _shipped(
    cls: str, reads: tuple[str, ...] = (), module: str = "norms", **entry: Any
) -> NormEntry:
    """A shipped norm's entry: its class ``cls`` in normbench.layers.``module``."""
    reads = NORM_COMMON_KEYS | NORM_FACTORY_KEYS | set(reads)
    return NormEntry(f"normbench.layers.{module}:{cls}", reads, **entry)


_ALPHA_INIT = NormKey(Key(float, minimum=0.0), 0.5)
# The shipped norms: name (norm=NAME) -> entry. Their classes are in normbench.layers: norms
# (the statistics norms), elementwise (no statistics), single_gain (one scalar gain).
NORM_TABLE: dict[str, NormEntry] = {
    "batchnorm": _shipped(
        "BatchNorm", ("momentum", "ghost_batch", "sync", "eval_stats"), fused="FusedBatchNorm"
    ),
    "layernorm": _shipped("LayerNorm", fused="FusedLayerNorm"),
    "instancenorm": _shipped("InstanceNorm", sequence_statistics=True),
    "groupnorm": _shipped("GroupNorm", ("groups",), fused="FusedGroupNorm"),
    "switchnorm": _shipped(
        "SwitchNorm", ("momentum", "ghost_batch", "eval_stats"), sequence_statistics=True
    ),
    "rmsnorm": _shipped("RMSNorm", fused="FusedRMSNorm"),
    "ssrmsnorm": _shipped("SingleScaleRMSNorm", module="single_gain"),
    "adaln": _shipped("AdaLN", python_options=("cond_dim",), sequence_statistics=True),
    "dyt": _shipped(
        "DyT", module="elementwise", own={"alpha_init": _ALPHA_INIT}, per_position=("alpha_init",)
    ),
    "derf": _shipped(
        "Derf",
        module="elementwise",
        own={"alpha_init": _ALPHA_INIT, "shift_init": NormKey(Key(float), 0.0)},
        per_position=("alpha_init",),
    ),
    "dyisru": _shipped(
        "DyISRU",
        module="elementwise",
        own={"beta_init": NormKey(Key(float, minimum=0.0, nullable=True), None)},
    ),
    "scalenorm": _shipped("ScaleNorm", module="single_gain"),
    "none": _shipped("Identity"),
}
SEQUENCE_STATISTICS_NORMS = tuple(n for n, e in NORM_TABLE.items() if e.sequence_statistics)
# Every per-position key of a shipped norm: key -> (the option it replaces, the position).
POSITION_KEYS = {k: v for entry in NORM_TABLE.values() for k, v in entry.position_keys().items()}


def norm_entry(norm: dict) -> NormEntry:
    """The entry of a config's norm section: a shipped norm's (by its name), or a plugin's
    (by its ``_target_``) read off its class's signature."""
    if "_target_" not in norm:
        return NORM_TABLE[norm["name"]]
    return plugin_entry(norm["_target_"], f"norm={norm['name']}")


def plugin_entry(target: str, what: str) -> NormEntry:
    """A plugin's entry: the shared keys its signature names, and with ``**kwargs`` also the
    common ones (what normbench's Norm base class takes); its own keys, the other parameters
    after (num_features, layout) that are keys (core.registry.signature_keys). Importing it
    may import torch; a failure is one line naming ``what`` (``norm=NAME``)."""
    cls = resolve(target, what)
    reads = frozenset(accepted(cls, NORM_SHARED_KEYS, through_kwargs=NORM_COMMON_KEYS))
    reads |= NORM_FACTORY_KEYS
    own = {
        key: NormKey(accepts, default)
        for key, (accepts, default) in signature_keys(cls, NORM_FIXED, what).items()
        if key not in NORM_SHARED_KEYS
    }
    return NormEntry(canonical_target(target), reads, own)


def norm_reads(norm: dict) -> frozenset[str]:
    """The shared norm.* keys a config's norm reads; the others are nulled (canonical) and
    never passed to it."""
    return norm_entry(norm).reads


def taken_options(entry: NormEntry, options: Mapping[str, Any]) -> dict[str, Any]:
    """The one option filter: of ``options`` (norm.* key names: a config section, or
    make_norm's keywords), those the entry's class is built with."""
    return {key: value for key, value in options.items() if key in entry.takes}


# model.qk_norm: how attention normalises queries and keys (normbench.layers.attention.QKNorm).
QK_NORMS = ("none", "layernorm", "rmsnorm", "rmsnorm_whole")
# model.attention_gate: gated attention's sigmoid gate on each head's output, one score per
# head or per element (normbench.layers.attention.Attention.output_gate).
ATTENTION_GATES = ("none", "headwise", "elementwise")
# model.parametrization: PyTorch's, or muP for width (normbench.layers.mup, docs/mup.md).
PARAMETRIZATIONS = ("standard", "mup")

# The convolutional models (channels layout, no padding mask, no attention).
CONV_MODELS = ("cnn", "resnet")
# model=resnet's placements: a norm after every convolution, in He et al.'s two orders
# (post: v1, He et al. 2016a; pre: v2, pre-activation, He et al. 2016b).
RESNET_PLACEMENTS = ("post", "pre")
# Placements in which a norm reads a sublayer's output directly (x + N(F(x)), x + N(F(N(x)))):
# in the CNN and the Transformer the only layers a norm follows, so the only ones Weight
# Standardization applies to (its authors: standardize only layers followed by a norm).
NORM_AFTER_SUBLAYER = ("res_post", "sandwich")

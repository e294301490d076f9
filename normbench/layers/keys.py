"""Which norm.* keys each norm reads: torch-free knowledge of the norms, for the experiment
(a config nulls the keys its norm ignores), the trainer and the report.

normbench.layers.norms.NORMS builds the shipped norms with the same options; a test keeps the
two in step. A plugin's keys are read off its signature (normbench.core.registry).
"""

from __future__ import annotations

from normbench.core.registry import accepted, resolve

# norm.* keys that only some norms read (the rest are read by every norm), and which norms
# read them. normbench.layers.norms.NORMS takes the same options; a test keeps the two in step.
NORM_SPECIFIC_KEYS = {"momentum", "ghost_batch", "groups"}
# The norm.* keys every shipped norm reads (normbench.layers.norms.Norm's), and all shared ones.
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
        for name in (
            "layernorm",
            "instancenorm",
            "rmsnorm",
            "adaln",
            "dyt",
            "derf",
            "scalenorm",
            "none",
        )
    },
}


# Shipped norms' keys for one position of the model (normbench.layers.norms.POSITIONS): key ->
# (the option it replaces there, the position). DyT's and Derf's language-model recipes set
# alpha_init apart for the attention, MLP and final norms; null: norm.alpha_init everywhere.
POSITION_KEYS = {
    f"alpha_init_{position}": ("alpha_init", position) for position in ("attention", "mlp", "final")
}

# model.qk_norm: how attention normalises queries and keys (normbench.layers.models.QKNorm).
QK_NORMS = ("none", "layernorm", "rmsnorm")
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


def norm_reads(norm: dict) -> set[str]:
    """The shared norm.* keys (eps, momentum, groups, ghost_batch, mask_padding, fp32_stats)
    the chosen norm reads: the shipped ones per NORM_KEYS; a plugin those its signature
    names, and with **kwargs also eps, fp32_stats and mask_padding (what normbench's Norm base
    class takes). The others are nulled (canonical) and never passed to it."""
    if "_target_" not in norm:
        return NORM_COMMON_KEYS | NORM_KEYS[norm["name"]]
    cls = resolve(norm["_target_"], f"norm={norm['name']}")
    return accepted(cls, NORM_SHARED_KEYS, through_kwargs=NORM_COMMON_KEYS)

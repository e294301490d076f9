"""The combinations normbench refuses before training, each with the reason (``normbench
list`` shows them): checked on a validated config, in order, the first violation refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from normbench.core.extras import missing
from normbench.data.base import NEXT_BYTE_DATA
from normbench.data.datasets import describe, full_train_size, input_shape, split_sizes
from normbench.layers.keys import (
    CONV_MODELS,
    NORM_AFTER_SUBLAYER,
    NORM_TABLE,
    RESNET_PLACEMENTS,
    SEQUENCE_STATISTICS_NORMS,
    norm_entry,
    norm_reads,
)


@dataclass(frozen=True)
class Rule:
    """A combination normbench refuses before training, and why."""

    summary: str
    violation: Callable[[dict], str | None]


def _patch_rule(cfg: dict) -> str | None:
    model, data = cfg["model"], cfg["data"]
    if model["name"] != "transformer" or data["name"] in ("tokens", *NEXT_BYTE_DATA):
        return None
    patch, sides = model["patch_size"], input_shape(data)[1:]
    if all(side % patch == 0 for side in sides):
        return None
    valid = [p for p in range(1, max(sides) + 1) if all(side % p == 0 for side in sides)]
    return (
        f"model.patch_size={patch} must divide the input size {list(sides)} of "
        f"data={data['name']}; valid: {', '.join(map(str, valid))}"
    )


def _kernel_rule(cfg: dict) -> str | None:
    """The conv models pad by kernel_size // 2 to keep a unit's output the size of its input
    (the residual add needs it): an even kernel grows it by one, and a kernel wider than
    2 x side - 1 has taps that only ever meet the padding."""
    model, data = cfg["model"], cfg["data"]
    if model["name"] not in CONV_MODELS or _token_ids(data):
        return None
    sides = input_shape(data)[1:]
    if not sides:
        return None
    kernel, largest = model["kernel_size"], 2 * min(sides) - 1
    if kernel % 2 == 1 and kernel <= largest:
        return None
    odd = list(range(1, largest + 1, 2))
    valid = ", ".join(map(str, odd)) if len(odd) <= 8 else f"1, 3, 5, ..., {largest}"
    why = (
        "must be odd (padding kernel_size // 2 keeps a unit's output the size of its input)"
        if kernel % 2 == 0
        else f"is wider than the input {list(sides)} can use (2 x side - 1)"
    )
    return (
        f"model.kernel_size={kernel} {why} for model={model['name']} on "
        f"data={data['name']}; valid: {valid}"
    )


def _token_ids(data: dict) -> bool:
    """Whether the data are token ids with padding (data=tokens, or integer (N, T) arrays)."""
    if data["name"] == "tokens":
        return True
    if data["name"] != "arrays" and "_target_" not in data:
        return False
    return describe(data).kind == "tokens"


RULES: tuple[Rule, ...] = (
    Rule(
        "model=cnn|resnet with data=tokens (or token ids in data=arrays): the convolutional "
        "models have no padding mask; variable-length tokens need the transformer",
        lambda cfg: (
            f"model={cfg['model']['name']} cannot take data={cfg['data']['name']} (token ids; "
            f"no padding mask in a convolutional model); valid model for "
            f"data={cfg['data']['name']}: transformer"
            if cfg["model"]["name"] in CONV_MODELS and _token_ids(cfg["data"])
            else None
        ),
    ),
    Rule(
        "model=resnet with a placement other than post (v1) or pre (v2): a basic block has a "
        "norm after every conv, in one of He et al.'s two orders",
        lambda cfg: (
            f"placement={cfg['placement']['name']} has no meaning in a ResNet basic block (a "
            "norm after every conv: post is v1, conv-N-act-conv-N, add, act; pre is v2, "
            "N-act-conv-N-act-conv, add); valid for model=resnet: " + ", ".join(RESNET_PLACEMENTS)
            if cfg["model"]["name"] == "resnet"
            and cfg["placement"]["name"] not in RESNET_PLACEMENTS
            else None
        ),
    ),
    Rule(
        "model.kernel_size of model=cnn|resnet even (the padding keeps sizes only for odd "
        "kernels) or wider than 2 x the input's side - 1 (taps that only meet the padding)",
        lambda cfg: _kernel_rule(cfg),
    ),
    Rule(
        "model.weight_std=true where no conv or linear is followed by a norm (Qiao et al. "
        "standardize only those): model=cnn|transformer outside placement="
        + "|".join(NORM_AFTER_SUBLAYER)
        + ", or norm=none; or with model.sdd=true, which normalises each linear's output itself",
        lambda cfg: _weight_std_rule(cfg),
    ),
    Rule(
        "train.optimizer=muon needs torch.optim.Muon (PyTorch 2.9 or later) and a model whose "
        "residual sublayers have 2-D weight matrices (the transformer; not the conv models)",
        lambda cfg: _muon_rule(cfg),
    ),
    Rule(
        "model.parametrization=mup with train.optimizer=muon (muP's rates are AdamW's and "
        "SGD's; Muon scales its own updates), without model.base_width, with a base model "
        "the heads do not divide (model.base_width not a multiple of model.heads, or of "
        "model.base_head_dim where set), or with model.attention_gate=headwise (a readout "
        "muP does not scale)",
        lambda cfg: _mup_rule(cfg),
    ),
    Rule(
        "norm.alpha_init_attention or norm.alpha_init_mlp with model=cnn|resnet: the conv "
        "models have no attention or MLP units",
        lambda cfg: next(
            (
                f"norm.alpha_init_{position}={cfg['norm'][f'alpha_init_{position}']} is for the "
                f"transformer's {position} units, and model={cfg['model']['name']} has none; "
                "valid for it: null (norm.alpha_init_final sets its final norm's)"
                for position in ("attention", "mlp")
                if cfg["model"]["name"] in CONV_MODELS
                and cfg["norm"].get(f"alpha_init_{position}") is not None
            ),
            None,
        ),
    ),
    Rule(
        "diagnostics=true with model=resnet: diagnostics are per residual unit of the CNN and "
        "the transformer, and the ResNet's basic blocks are not such units",
        lambda cfg: (
            "diagnostics=true records each residual unit of model=cnn or transformer, and "
            "model=resnet's basic blocks are not such units; valid for model=resnet: "
            "diagnostics=false"
            if cfg["diagnostics"] and cfg["model"]["name"] == "resnet"
            else None
        ),
    ),
    Rule(
        "model=cnn with model.qk_norm other than none: the CNN has no attention to normalise",
        lambda cfg: (
            f"model.qk_norm={cfg['model']['qk_norm']} needs attention, and model=cnn has "
            "none; valid for model=cnn: none"
            if cfg["model"]["name"] == "cnn" and cfg["model"]["qk_norm"] != "none"
            else None
        ),
    ),
    Rule(
        "model=cnn|resnet with data=pysource|tinystories|hub_text: next-byte prediction needs "
        "the causal transformer",
        lambda cfg: (
            f"model={cfg['model']['name']} cannot take data={cfg['data']['name']} (it needs a "
            f"causal model); valid model for data={cfg['data']['name']}: transformer"
            if cfg["model"]["name"] in CONV_MODELS and cfg["data"]["name"] in NEXT_BYTE_DATA
            else None
        ),
    ),
    Rule(
        "your own model (model=package.module:build) with data=pysource|tinystories|hub_text: "
        "next-byte prediction runs on the causal transformer only",
        lambda cfg: (
            f"model={cfg['model']['name']} cannot take data={cfg['data']['name']} (next-byte "
            "prediction needs normbench's causal transformer); valid model for "
            f"data={cfg['data']['name']}: transformer"
            if "_target_" in cfg["model"] and cfg["data"]["name"] in NEXT_BYTE_DATA
            else None
        ),
    ),
    Rule(
        f"norm={'|'.join(SEQUENCE_STATISTICS_NORMS)} with data=pysource|tinystories|hub_text: "
        "statistics over a sequence's tokens would show each position the bytes after it",
        lambda cfg: (
            f"norm={cfg['norm']['name']} cannot take data={cfg['data']['name']} (its "
            "statistics over the "
            "sequence would show each position the bytes it must predict); valid: "
            + ", ".join(n for n in NORM_TABLE if n not in SEQUENCE_STATISTICS_NORMS)
            if cfg["norm"]["name"] in SEQUENCE_STATISTICS_NORMS
            and cfg["data"]["name"] in NEXT_BYTE_DATA
            else None
        ),
    ),
    Rule(
        "target.metric=val_bpb needs a next-byte data set (data=pysource|tinystories|hub_text)",
        lambda cfg: (
            f"target.metric=val_bpb needs data=pysource, tinystories or hub_text (bits per "
            f"byte of next-byte prediction); valid for data={cfg['data']['name']}: val_acc, "
            "val_loss"
            if cfg["target"]["metric"] == "val_bpb" and cfg["data"]["name"] not in NEXT_BYTE_DATA
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
    Rule(
        "train.devices that does not divide batch_size (each device takes an equal share of "
        "the global batch), or norm.ghost_batch that does not divide that share",
        lambda cfg: _devices_rule(cfg),
    ),
    Rule(
        "norm.sync=global with a norm that has no synchronizable batch statistics (valid: "
        "batchnorm), or with norm.ghost_batch (statistics over the global batch, or over "
        "chunks of each device's: one or the other)",
        lambda cfg: _sync_rule(cfg),
    ),
    Rule(
        "diagnostics=true with train.devices > 1: the diagnostics watch one process's model",
        lambda cfg: (
            f"diagnostics=true records one process's model, and train.devices="
            f"{cfg['train']['devices']} trains on several; valid with train.devices > 1: "
            "diagnostics=false"
            if cfg["diagnostics"] and cfg["train"]["devices"] > 1
            else None
        ),
    ),
    Rule(
        "data.train_samples larger than the train split it takes a subset of",
        lambda cfg: _subset_rule(cfg),
    ),
    Rule("batch_size larger than the training set", lambda cfg: _batch_rule(cfg)),
    Rule(
        "data=tokens needs min_len <= max_len and min_len > num_classes - 1 (room for the "
        "query and its repeats)",
        lambda cfg: _tokens_rule(cfg),
    ),
    Rule(
        "norm.impl=fused for a norm without a fused kernel (valid: batchnorm, groupnorm, "
        "layernorm, rmsnorm), or fused batchnorm, one F.batch_norm over the whole batch, "
        "with ghost batches, synchronized statistics or data=tokens' padding",
        lambda cfg: _impl_rule(cfg),
    ),
    Rule(
        "log.tensorboard=DIR without TensorBoard installed (it comes with the tracking extra)",
        lambda cfg: (
            missing(("tensorboard",), f"log.tensorboard={cfg['log']['tensorboard']}")
            if cfg["log"]["tensorboard"] is not None
            else None
        ),
    ),
)


MUON_TORCH = (2, 9)  # the first PyTorch with torch.optim.Muon


def _muon_rule(cfg: dict) -> str | None:
    """Muon orthogonalizes 2-D matrices: the conv models' filters are not (torch.optim.Muon
    refuses them), and an older PyTorch has no Muon. Read off the installed version, so that
    composing imports no torch."""
    if cfg["train"]["optimizer"] != "muon":
        return None
    if cfg["model"]["name"] in CONV_MODELS:
        return (
            f"train.optimizer=muon updates 2-D weight matrices, and model={cfg['model']['name']}'s "
            "sublayers are convolutions; valid for it: adamw, sgd (or model=transformer)"
        )
    installed = torch_version()
    if installed is not None and installed < MUON_TORCH:
        return (
            f"train.optimizer=muon needs torch.optim.Muon, new in PyTorch 2.9, and the installed "
            f"torch is {'.'.join(map(str, installed))}; valid: adamw, sgd (or upgrade torch)"
        )
    return None


def _mup_rule(cfg: dict) -> str | None:
    """muP (normbench.layers.mup) scales AdamW's and SGD's per-layer rates (Yang et al.'s
    Table 3); Muon's orthogonalized update has its own width scaling, which muP's rates would
    double-count. And muP needs the width at which it equals the standard model."""
    model = cfg["model"]
    if model.get("parametrization") != "mup" or "_target_" in model:
        return None
    if cfg["train"]["optimizer"] == "muon":
        return (
            "model.parametrization=mup scales AdamW's and SGD's rates, and train.optimizer=muon "
            "scales its own; valid with mup: train.optimizer=adamw, sgd"
        )
    if model["base_width"] is None:
        return (
            "model.parametrization=mup needs model.base_width (the width at which muP equals "
            f"the standard model), got null; valid: a positive integer, e.g. {model['width']}"
        )
    if model.get("attention_gate") == "headwise":
        return (
            "model.attention_gate=headwise maps the width to one score per head, an output "
            "layer that muP would scale as a readout, and model.parametrization=mup scales "
            "the head's alone; valid with mup: model.attention_gate=none, elementwise"
        )
    return _mup_heads_rule(model) if model["name"] == "transformer" else None


def _mup_heads_rule(model: dict) -> str | None:
    """The Transformer's base model must exist: its heads a whole number of whole-sized heads
    (base_width / base_head_dim, or this model's heads where base_head_dim is null), and at
    the base width it is this model, head size included (else the scale at m = 1 would not be
    the standard one)."""
    base_width, base_head = model["base_width"], model.get("base_head_dim")
    if base_head is None:
        heads = model["heads"]
        if base_width % heads:
            return (
                f"model.base_width={base_width} is not a multiple of model.heads={heads} (the "
                f"base model keeps this model's heads); valid: a multiple of {heads}, e.g. "
                f"{model['width']}, or model.base_head_dim set"
            )
        return None
    if base_width % base_head:
        divisors = [d for d in range(1, base_width + 1) if base_width % d == 0]
        valid = ", ".join(map(str, divisors)) if len(divisors) <= 12 else "a divisor of it"
        return (
            f"model.base_head_dim={base_head} does not divide model.base_width={base_width} "
            f"(the base model has base_width / base_head_dim heads); valid: {valid} or null"
        )
    head = model["width"] // model["heads"]
    if model["width"] == base_width and head != base_head:
        return (
            f"model.base_head_dim={base_head}, but at its base width this model is the base "
            f"model and its heads are {head} wide (model.width={model['width']}, "
            f"model.heads={model['heads']}); valid: model.base_head_dim={head} or null"
        )
    return None


def torch_version() -> tuple[int, int] | None:
    """The installed PyTorch's (major, minor), without importing it; None when unknown."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = version("torch").split(".")[:2]
        return int(major), int(minor)
    except (PackageNotFoundError, ValueError):
        return None


def _weight_std_rule(cfg: dict) -> str | None:
    """Weight Standardization is for the layers a norm follows (Qiao et al.'s README): refused
    where a config has none, as the standardized layers would feed the residual addition or
    an activation unnormalized (in a Pre-LN CNN the branch output RMS grows by two orders of
    magnitude: 40-59 against 0.2)."""
    model, placement = cfg["model"], cfg["placement"]["name"]
    if "_target_" in model or not model.get("weight_std"):
        return None
    if model.get("sdd"):
        return (
            "model.weight_std=true standardizes the weights of the layers a norm follows, and "
            "model.sdd=true normalises each linear's output itself (Scale-Distribution "
            "Decoupling); valid: one of them"
        )
    if cfg["norm"]["name"] == "none":
        return (
            "model.weight_std=true standardizes the layers a norm follows, and norm=none has "
            "none; valid: another norm, or model.weight_std=false"
        )
    if model["name"] in ("cnn", "transformer") and placement not in NORM_AFTER_SUBLAYER:
        return (
            f"model.weight_std=true standardizes only the layers a norm follows (Qiao et al.), "
            f"and in model={model['name']} with placement={placement} none is (the sublayer's "
            f"layers feed an activation or the residual addition); valid: placement="
            f"{', '.join(NORM_AFTER_SUBLAYER)}, model=resnet, or model.weight_std=false"
        )
    return None


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


def _subset_rule(cfg: dict) -> str | None:
    data = cfg["data"]
    if data.get("train_samples") is None:
        return None
    whole = full_train_size(data)
    if data["train_samples"] > whole:
        unit = " samples"
        if data["name"] in NEXT_BYTE_DATA:
            unit = f" windows of {data['context']} bytes"
        return (
            f"data.train_samples={data['train_samples']} is more than the train split of "
            f"data={data['name']} ({whole}{unit}); valid: 1..{whole}, or null (all of it)"
        )
    return None


def _devices_rule(cfg: dict) -> str | None:
    """Data-parallel ranks share the global batch equally (normbench.training.distributed),
    and a ghost batch splits each rank's share."""
    devices, batch = cfg["train"]["devices"], cfg["batch_size"]
    if batch % devices:
        return (
            f"train.devices={devices} does not divide batch_size={batch} (each device takes "
            f"an equal share of the global batch); valid: {_divisors(batch)}"
        )
    share, ghost = batch // devices, cfg["norm"].get("ghost_batch")
    if devices > 1 and "ghost_batch" in norm_reads(cfg["norm"]) and ghost and share % ghost:
        return (
            f"norm.ghost_batch={ghost} does not divide the per-device batch {share} "
            f"(batch_size={batch} / train.devices={devices}); valid: {_divisors(share)} or null"
        )
    return None


def _impl_rule(cfg: dict) -> str | None:
    norm = cfg["norm"]
    impl = norm.get("impl") or "module"
    if impl != "fused":
        return None
    entry = norm_entry(norm)
    if impl not in entry.implementations:
        valid = ", ".join(entry.implementations)
        return f"norm.impl=fused: norm={norm['name']} has no fused kernel; valid: {valid}"
    if norm["name"] != "batchnorm":
        return None
    one_call = "norm.impl=fused is one F.batch_norm over the whole batch"
    if norm.get("ghost_batch") is not None:
        return (
            f"{one_call}, norm.ghost_batch={norm['ghost_batch']} chunks of it; valid: one of "
            "them (norm.ghost_batch=null, or norm.impl=module)"
        )
    if norm.get("sync") == "global":
        return (
            f"{one_call} on each device, norm.sync=global over all; valid: norm.sync=device, "
            "or norm.impl=module"
        )
    if cfg["data"]["name"] == "tokens" and norm.get("mask_padding"):
        return (
            f"{one_call}, padding included, and data=tokens pads; valid: norm.impl=module, "
            "or norm.mask_padding=false"
        )
    return None


def _sync_rule(cfg: dict) -> str | None:
    norm = cfg["norm"]
    if norm.get("sync") != "global":
        return None
    synchronizable = [name for name, entry in NORM_TABLE.items() if "sync" in entry.reads]
    if "sync" not in norm_reads(norm):
        return (
            f"norm.sync=global needs batch statistics to synchronize, and "
            f"norm={norm['name']} has none; valid: norm.sync=device, or norm="
            + ", ".join(synchronizable)
        )
    if norm.get("ghost_batch") is not None:
        return (
            f"norm.sync=global takes statistics over the global batch, norm.ghost_batch="
            f"{norm['ghost_batch']} over chunks of each device's; valid: one of them "
            "(norm.ghost_batch=null, or norm.sync=device)"
        )
    return None


def _batch_rule(cfg: dict) -> str | None:
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

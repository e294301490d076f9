"""A run's size for a budget rule: its parameter counts under three conventions and the
tokens one optimiser step trains on, so that a ladder can set each rung's ``train.max_steps``
from ``train.tokens_per_param`` (normbench.sweeps.ladder_plan) and estimate its compute as
6·N·D.

The three counts, each named for what it holds (docs/design.md, "Parameter counts"):
``parameters``, every trainable parameter (the total); ``non_embedding``, less the token or
patch embedding and the learned positions, the output head kept (the budget rule's N, and
the N of 6·N·D); ``non_embedding_no_head``, less the output head too: Kaplan et al.'s N
(2020, arXiv:2001.08361, section 2.1 and Table 1: N excludes the embedding and positional
matrices, and the de-embedding has no parameters of its own there, its weights tied to the
embedding; Kaplan's formula also drops biases and norms as sub-leading terms, which this count
keeps). The output head is a model's ``head`` module (the shipped models' readout); a user's
model without one has no such count (None).

A token is a position the model computes at: a byte of a pysource window, a token of
data=tokens, a patch of a signal or image in the Transformer, a sample position (signal
length, image pixels) in the convolutional models. The counts build the model on torch's
meta device (shapes, no storage: any width at once; on the CPU for a user's model that
cannot be built there); a model deeper than ``DEPTH_BUILT`` is counted at three small
depths and extrapolated (refused where the count is not linear in the depth), since
building a module per layer takes time and memory in proportion to the depth even on the
meta device. torch is imported here only when a size is asked for: composing a config
never needs it.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass

from normbench.core.errors import UsageError
from normbench.data.datasets import describe

RULE_KEY = "train.tokens_per_param"
COUNT = "non-embedding, output head included"  # the rule's N: not Kaplan's, which drops the head
DEPTH_BUILT = 256  # deeper shipped models are counted by extrapolation (module docstring)
DEPTHS_COUNTED = (8, 16, 32)  # a deeper one is built at these: two extrapolate, one checks


@dataclass(frozen=True)
class Size:
    """A config's model size and the tokens of one step."""

    parameters: int  # trainable, all of them (each run's result records it too)
    non_embedding: int  # less the token or patch embedding and the positions; the head kept
    non_embedding_no_head: int | None  # less the output head too: Kaplan's N (None: no head)
    tokens_per_step: int  # batch_size x positions per sample

    def steps_for(self, tokens_per_param: float) -> float:
        """tokens_per_param x N / tokens per step, N the non-embedding count (the head
        kept), before rounding up: a float, infinite where the rule overflows, so that the
        caller bounds it (normbench.sweeps.ladder_plan) before it becomes a step count."""
        return tokens_per_param * self.non_embedding / self.tokens_per_step

    def tokens_per_param(self, tokens: int) -> dict[str, float | None]:
        """``tokens`` per parameter under each count, keyed by the count's name."""
        counts = {
            "total": self.parameters,
            "non_embedding": self.non_embedding,
            "non_embedding_no_head": self.non_embedding_no_head,
        }
        return {name: tokens / n if n else None for name, n in counts.items()}

    def flops(self, steps: int) -> float:
        """Training compute as 6·N·D (Kaplan et al.), D the tokens of ``steps`` steps: the
        matmuls of forward and backward; attention's own and evaluation's are left out."""
        return 6.0 * self.non_embedding * steps * self.tokens_per_step


def positions(cfg: dict) -> int:
    """Tokens per sample: the positions the model computes at."""
    data = describe(cfg["data"])
    if data.kind in ("tokens", "bytes"):
        return data.input_shape[0]
    sides = data.input_shape[1:]
    if cfg["model"]["name"] == "transformer" and "_target_" not in cfg["model"]:
        return math.prod(side // cfg["model"]["patch_size"] for side in sides)
    return math.prod(sides)


def size_of(cfg: dict) -> Size:
    """The size of the model a composed config builds (cached per model, norm, placement and
    data: the seed and the budget change no count)."""
    sections = {g: cfg[g] for g in ("model", "norm", "placement", "data")}
    counts = _counts(json.dumps(sections, sort_keys=True))
    return Size(*counts, cfg["batch_size"] * positions(cfg))


Counts = tuple[int, int, int | None]  # total, non-embedding, non-embedding less the head


@functools.cache
def _counts(sections_json: str) -> Counts:
    cfg = json.loads(sections_json)
    depth = cfg["model"].get("depth")
    if not isinstance(depth, int) or isinstance(depth, bool) or depth <= DEPTH_BUILT:
        return _built_counts(cfg)
    beyond = f"beyond {DEPTH_BUILT} layers model={cfg['model']['name']} is not built to count"
    try:
        at = [_built_counts({**cfg, "model": {**cfg["model"], "depth": d}}) for d in DEPTHS_COUNTED]
    except Exception as err:  # a user's model that cannot be built at the small depths
        raise UsageError(
            f"model.depth={depth}: {beyond} its parameters, and at depths "
            f"{', '.join(map(str, DEPTHS_COUNTED))} it could not be built "
            f"({' '.join(str(err).split())[:120]}); valid: model.depth <= {DEPTH_BUILT}"
        ) from None
    (low, mid, high), (d_low, d_mid, d_high) = at, DEPTHS_COUNTED
    counts = []
    for a, b, c in zip(low, mid, high, strict=True):
        if a is None:
            counts.append(None)
            continue
        per_layer = (b - a) / (d_mid - d_low)
        if a + per_layer * (d_high - d_low) != c or per_layer != int(per_layer):
            raise UsageError(
                f"model.depth={depth}: {beyond} its parameters, and they do not grow linearly "
                f"with its depth (counted at {', '.join(map(str, DEPTHS_COUNTED))}); valid: "
                f"model.depth <= {DEPTH_BUILT}"
            )
        counts.append(a + int(per_layer) * (depth - d_low))
    return counts[0], counts[1], counts[2]


def _built_counts(cfg: dict) -> Counts:
    """The counts of the model ``cfg`` names, built on the meta device."""
    import torch

    from normbench.layers.models import build_model, count_non_embedding, count_parameters

    data = describe(cfg["data"])
    shapes = (data.input_shape, data.num_classes, data.vocab_size)
    with torch.random.fork_rng(), torch.no_grad():  # the caller's random state stays as it was
        try:  # shapes without storage: any width is counted at once, in no memory
            with torch.device("meta"):
                model = build_model(cfg, *shapes)
        except Exception as err:
            if not any("_target_" in cfg[group] for group in ("model", "norm", "placement")):
                reason = " ".join(str(err).split())[:120]
                raise UsageError(
                    f"model={cfg['model']['name']} at these sizes cannot be built ({reason}); "
                    "valid: a smaller model.width or model.depth"
                ) from None
            model = build_model(cfg, *shapes)  # a user's model may touch its values
    non_embedding = count_non_embedding(model)
    head = getattr(model, "head", None)
    if not isinstance(head, torch.nn.Module):
        return count_parameters(model), non_embedding, None
    in_head = sum(p.numel() for p in head.parameters() if p.requires_grad)
    return count_parameters(model), non_embedding, non_embedding - in_head


def tokens_per_param(text: str, where: str) -> float:
    """The rule's value, refused in one line unless it is a number > 0 (0 yields 0 steps)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        why = "yields 0 steps" if value == 0 else "not a number > 0"
        raise UsageError(
            f"{where} {RULE_KEY}={text}: {why}; valid: training tokens per parameter ({COUNT}), "
            "a number > 0 (e.g. 20, Hoffmann et al.'s compute-optimal ratio by the total count)"
        )
    return value

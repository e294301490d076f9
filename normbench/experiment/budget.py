"""A run's size for a budget rule: its parameter counts (total, and non-embedding as Kaplan
et al. 2020 count N) and the tokens one optimiser step trains on, so that a ladder can set
each rung's ``train.max_steps`` from ``train.tokens_per_param`` (normbench.sweeps.ladder_plan)
and estimate its compute as 6·N·D.

A token is a position the model computes at: a byte of a pysource window, a token of
data=tokens, a patch of a signal or image in the Transformer, a sample position (signal
length, image pixels) in the convolutional models. The counts build the model once on
torch's meta device (shapes, no storage: any width at once; on the CPU for a user's model
that cannot be built there); torch is imported here only when a size is asked for:
composing a config never needs it.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass

from normbench.core.errors import UsageError
from normbench.data.datasets import describe

RULE_KEY = "train.tokens_per_param"
COUNT = "non-embedding"  # the count the rule multiplies: Kaplan et al.'s N


@dataclass(frozen=True)
class Size:
    """A config's model size and the tokens of one step."""

    parameters: int  # trainable, all of them (each run's result records it too)
    non_embedding: int  # less the token or patch embedding and the positions
    tokens_per_step: int  # batch_size x positions per sample

    def steps_for(self, tokens_per_param: float) -> int:
        """ceil(tokens_per_param x N / tokens per step), N the non-embedding count."""
        return math.ceil(tokens_per_param * self.non_embedding / self.tokens_per_step)

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
    total, non_embedding = _counts(json.dumps(sections, sort_keys=True))
    return Size(total, non_embedding, cfg["batch_size"] * positions(cfg))


@functools.cache
def _counts(sections_json: str) -> tuple[int, int]:
    import torch

    from normbench.layers.models import build_model, count_non_embedding, count_parameters

    cfg = json.loads(sections_json)
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
    return count_parameters(model), count_non_embedding(model)


def tokens_per_param(text: str, where: str) -> float:
    """The rule's value, refused in one line unless it is a number > 0 (0 yields 0 steps)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        why = "yields 0 steps" if value == 0 else "not a number > 0"
        raise UsageError(
            f"{where} {RULE_KEY}={text}: {why}; valid: training tokens per {COUNT} parameter, "
            "a number > 0 (e.g. 20, Hoffmann et al.'s compute-optimal ratio)"
        )
    return value

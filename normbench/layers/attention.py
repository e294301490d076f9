"""The Transformer's attention sublayer: multi-head self-attention with optional QK-norm
(its queries and keys normalised per head) and an optional output gate (gated attention),
and the largest attention logit for the diagnostics. normbench.layers.models builds it into
the Transformer's units and re-exports its names.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normbench.layers.generators import own_generator
from normbench.layers.keys import ATTENTION_GATES, QK_NORMS
from normbench.layers.norm_base import Norm


class HeadNorm(Norm):
    """One of QK-norm's two norms: over the last (head) dimension of (N, heads, T, head_dim),
    centred (LayerNorm) or not (RMSNorm), with a gain of head_dim entries and no bias. The
    Norm base class keeps its statistics in float32 under autocast."""

    def __init__(self, head_dim: int, centred: bool, eps: float = 1e-5):
        super().__init__(head_dim, "tokens", eps=eps)
        self.centred = centred
        self.gain = nn.Parameter(torch.ones(head_dim))

    def normalize(self, x: Tensor, mask: Tensor | None, cond: Tensor | None) -> Tensor:
        if self.centred:
            return F.layer_norm(x, (self.num_features,), self.gain, None, self.eps)
        return F.rms_norm(x, (self.num_features,), self.gain, self.eps)


class QKNorm(nn.Module):
    """QK-norm (Dehghani et al. 2023; Wortsman et al. 2023; OLMo 2): queries and keys are each
    normalised before the logits q.k^T/sqrt(d) are formed, so that the logits cannot grow with
    the weights' norms (the attention-logit growth that Dehghani et al. and Wortsman et al. saw
    before divergence).

    ``kind``: ``layernorm`` (Dehghani et al., Wortsman et al.) or ``rmsnorm``, each over the
    head dimension, per head and position, with a learnable gain of head_dim entries per q and
    k, shared by the heads, initialised to 1 (what a norm over the last axis of a (..., heads,
    head_dim) tensor learns, the usual implementation); or ``rmsnorm_whole``, OLMo 2's: one
    RMSNorm over each whole projection (all heads of a position together), with a gain of
    heads x head_dim entries (OLMo-core's default, use_head_qk_norm=False: q_norm and k_norm
    built over n_heads * head_dim in src/olmo_core/nn/attention/__init__.py at commit
    fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d); it needs ``heads``.
    No bias: a key bias b adds q.b to every logit of a query's row, which the softmax
    ignores, so only the query's would act. Call it from your own attention:
    ``q, k = qk_norm(q, k)`` on tensors (N, heads, T, head_dim)."""

    def __init__(self, head_dim: int, kind: str, eps: float = 1e-5, heads: int | None = None):
        super().__init__()
        if kind not in QK_NORMS[1:]:
            raise ValueError(f"kind must be one of {QK_NORMS[1:]}, got {kind!r}")
        self.whole = kind == "rmsnorm_whole"
        if self.whole and not heads:
            raise ValueError("kind='rmsnorm_whole' normalises all heads together: give heads")
        features = head_dim * heads if self.whole else head_dim
        self.q = HeadNorm(features, kind == "layernorm", eps)
        self.k = HeadNorm(features, kind == "layernorm", eps)

    def forward(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        if not self.whole:
            return self.q(q), self.k(k)
        return over_all_heads(self.q, q), over_all_heads(self.k, k)


def over_all_heads(norm: nn.Module, x: Tensor) -> Tensor:
    """``norm`` over each position's heads x head_dim features of x (N, heads, T, head_dim)."""
    n, heads, t, head_dim = x.shape
    y = norm(x.transpose(1, 2).reshape(n, t, heads * head_dim))
    return y.view(n, t, heads, head_dim).transpose(1, 2)


def max_attention_logit(
    q: Tensor,
    k: Tensor,
    mask: Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
) -> float:
    """The largest attention logit q.k^T * scale (default 1 / sqrt(head_dim); muP's is
    normbench.layers.mup.attention_scale) over the batch, heads and pairs of
    positions, before the softmax, in float32; pairs the attention never weighs are left
    out: padded keys and queries (``mask`` (N, T), True for real tokens) and, when
    ``causal``, keys after their query. The logits are formed explicitly (scaled dot-product
    attention never shows them), so call this only when diagnosing."""
    t = q.shape[-2]
    logits = q.float() @ k.float().transpose(-2, -1)  # (N, H, T, T)
    logits = logits * scale if scale is not None else logits / math.sqrt(q.shape[-1])
    later = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)  # key after query
    excluded = later if causal else torch.zeros_like(later)
    if mask is not None:
        excluded = excluded | ~mask[:, None, None, :] | ~mask[:, None, :, None]
    return float(logits.masked_fill(excluded, -math.inf).amax())


class Attention(nn.Module):
    """Multi-head self-attention; padded keys are masked out; causal: each position attends
    to itself and earlier positions only. ``qk_norm``: none, layernorm, rmsnorm or
    rmsnorm_whole (QKNorm).
    ``linear`` builds the projections, ``out`` (default: ``linear``) the output projection.
    ``scale``: the logits' scale; None is 1/sqrt(head_dim) (muP's: mup.attention_scale).
    ``gate``: none, headwise or elementwise, the output gate of gated attention
    (``output_gate``)."""

    def __init__(
        self,
        width: int,
        heads: int,
        linear: type[nn.Linear],
        causal: bool = False,
        qk_norm: str = "none",
        out: type[nn.Linear] | None = None,
        scale: float | None = None,
        gate: str = "none",
    ):
        super().__init__()
        if gate not in ATTENTION_GATES:
            raise ValueError(f"gate must be one of {ATTENTION_GATES}, got {gate!r}")
        self.heads = heads
        self.causal = causal
        self.scale = scale
        # q, k and v side by side: a linear that normalises its output (SDD) does each apart
        parts = {"parts": 3} if getattr(linear, "splits_output", False) else {}
        self.qkv = linear(width, 3 * width, **parts)
        self.proj = (out or linear)(width, width)
        self.qk_norm = None
        if qk_norm != "none":  # built or not by choice: on a generator of its own
            with own_generator("qk_norm"):
                self.qk_norm = QKNorm(width // heads, qk_norm, heads=heads)
        self.gate = None  # the gate's scores: one per head, or one per output element
        if gate != "none":
            with own_generator("attention_gate"):  # a gate's scores: never SDD's norm
                self.gate = nn.Linear(width, heads if gate == "headwise" else width)

    def queries_keys_values(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(N, T, D) -> q, k, v, each (N, heads, T, D / heads); q and k after QK-norm."""
        n, t, d = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.qk_norm is not None:
            q, k = self.qk_norm(q, k)
        return q, k, v

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        n, t, d = x.shape
        q, k, v = self.queries_keys_values(x)
        keep = None if mask is None else mask[:, None, None, :]
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=keep, is_causal=self.causal, scale=self.scale
        )  # (N, heads, T, D / heads)
        if self.gate is not None:
            y = y * self.output_gate(x)
        return self.proj(y.transpose(1, 2).reshape(n, t, d))

    def output_gate(self, x: Tensor) -> Tensor:
        """Gated attention (Qiu et al. 2025, "Gated Attention for Large Language Models:
        Non-linearity, Sparsity, and Attention-Sink-Free", their G1): sigmoid(x W_g + b_g),
        computed from this sublayer's input x (N, T, D), the factor each head's output is
        multiplied by after scaled dot-product attention and before the output projection:
        (N, heads, T, 1) headwise, one score per head and position, or (N, heads, T, D /
        heads) elementwise, one per output element. The paper's best variant is the
        elementwise, head-specific one; headwise costs D x heads parameters per layer against
        D^2 and is nearly as good in their tables, so both are offered (model.attention_gate).

        Compared with the official code (qiuzh20/gated_attention, modeling_qwen3.py at commit
        49645df63aafe9e680bc44a9c0ca280d4aefa8e9, Qwen3Attention.forward): there the gate's
        scores are extra outputs of the query projection (q_proj widened by heads or by D),
        split off and passed through torch.sigmoid, then multiplied into the attention output
        of shape (N, T, heads, head_dim) before o_proj. Here they are a linear layer of their
        own: the same function (a wider matrix is two matrices side by side) with the same
        initialisation (PyTorch's, fan-in D either way), and with a bias as this model's
        query projection has one. It is built on a generator of its own, so every other
        weight is what it is without the gate."""
        n, t, _ = x.shape
        scores = torch.sigmoid(self.gate(x)).view(n, t, self.heads, -1)  # -1: 1 or head_dim
        return scores.transpose(1, 2)

    @torch.no_grad()
    def largest_logit(self, x: Tensor, mask: Tensor | None = None) -> float:
        """The largest attention logit this sublayer forms for input x (diagnostics: any
        sublayer with this method gets its logits recorded)."""
        q, k, _ = self.queries_keys_values(x)
        return max_attention_logit(q, k, mask, self.causal, self.scale)

    @torch.no_grad()
    def deepnorm_init(self, beta: float) -> None:
        """DeepNet's initialisation: Xavier-normal, gain beta for values and the output
        projection, gain 1 for queries and keys; each of q, k, v is its own width x width
        matrix (the fused qkv weight's fan-out is not theirs). Biases keep PyTorch's."""
        for part, gain in zip(self.qkv.weight.chunk(3), (1.0, 1.0, beta), strict=True):
            nn.init.xavier_normal_(part, gain=gain)
        nn.init.xavier_normal_(self.proj.weight, gain=beta)
        if self.gate is not None:  # part of the query projection in the official code
            nn.init.xavier_normal_(self.gate.weight, gain=1.0)

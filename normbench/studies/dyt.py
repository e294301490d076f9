"""Without normalization: Greydanus 2020 (MNIST-1D separates models) and Zhu et al. 2025
(Dynamic Tanh matches LayerNorm)."""

from __future__ import annotations

from normbench.studies.study import (
    CONVERGENCE_COLUMNS,
    Context,
    Study,
    command_of,
    diff_text,
    figures,
    load,
    md,
    report,
    row_of,
    verdict,
)

DYT = Study(
    "dyt",
    [
        "model=transformer,cnn",
        "norm=dyt,layernorm,batchnorm",
        "seed=range(3)",
        "train.max_steps=1500",
        "train.eval_every=250",
    ],
    ["seed=0,1", "train.max_steps=600"],
)

STUDIES = (DYT,)


def greydanus(ctx: Context) -> str:
    runs, scale = ctx.runs, ctx.scale
    selection = load(runs, "dyt", ["model=cnn", "norm=batchnorm"])
    test = selection.runs["test_acc"].astype(float)
    return "\n".join(
        [
            "## A small CNN learns MNIST-1D (Greydanus 2020)",
            "",
            "**Claim.** On MNIST-1D a small CNN reaches 94% test accuracy (an MLP 68%).",
            "",
            f"**Command.** `{command_of(DYT, scale)}` (the CNN + BatchNorm runs).",
            "",
            f"{verdict(bool(test.mean() >= 0.90))} Test accuracy over {len(test)} seeds: "
            f"{test.mean():.3f} (min {test.min():.3f}).",
            "",
            "**What this does not show.** normbench's default MNIST-1D has 20,000 samples (the "
            "paper's 4,000 train and 1,000 test), which makes it easier, and its CNN is "
            "residual; at these defaults every norm, and no norm at all, reaches the ceiling "
            "(which is why the stress presets exist).",
        ]
    )


def zhu(ctx: Context) -> str:
    runs, scale = ctx.runs, ctx.scale
    selection = load(runs, "dyt")
    result = report(selection, by=["norm.name"])  # one section per model
    by_model = {s.setting.get("model.name"): s.tables["convergence"] for s in result.sections}
    transformer, cnn = by_model["transformer"], by_model["cnn"]
    dyt_t, dyt_c = row_of(transformer, **{"norm.name": "dyt"}), row_of(cnn, **{"norm.name": "dyt"})
    ln_t = row_of(transformer, **{"norm.name": "layernorm"})
    matches = {"equivalent": True, "reference": True, "worse": False}.get(dyt_t["verdict"])
    if dyt_t["verdict"] == "reference" and ln_t["verdict"] == "worse":
        matches = False
    trails = {"worse": True, "equivalent": False, "reference": False}.get(dyt_c["verdict"])
    return "\n".join(
        [
            "## DyT matches LayerNorm in the Transformer, trails BatchNorm in the CNN "
            "(Zhu et al. 2025)",
            "",
            "**Claim.** Dynamic Tanh replaces LayerNorm in Transformers without loss; it does not "
            "replace BatchNorm in CNNs.",
            "",
            f"**Command.** `{command_of(DYT, scale)}`",
            "",
            "Transformer:",
            "",
            md(transformer, ["norm.name", *CONVERGENCE_COLUMNS]),
            "",
            "CNN:",
            "",
            md(cnn, ["norm.name", *CONVERGENCE_COLUMNS]),
            "",
            *figures(ctx, result, "zhu", ("seed_results",)),
            "",
            f"{verdict(matches)} Transformer: DyT is {diff_text(dyt_t)}, LayerNorm "
            f"{diff_text(ln_t)} (equivalence margin ±0.01).",
            "",
            f"{verdict(trails)} CNN: DyT is {diff_text(dyt_c)}.",
            "",
            "**What this does not show.** Zhu et al. train ViTs, LLaMA and diffusion models for "
            "hundreds of epochs; here 1,500 steps on MNIST-1D. DyT's alpha is initialised at 0.5 "
            "as in the paper's default; its recommended per-model tuning was not done.",
        ]
    )

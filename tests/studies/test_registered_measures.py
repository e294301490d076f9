"""The claims registered for issue 47 on the sections that had none (What LayerNorm does, QK-norm's
logit growth, float32 statistics in fp16): each claim's outcome, Reproduced, Not reproduced or
Inconclusive, is reachable on designed per-seed values (the fp16 claim on a designed store),
and each study-own measure is computed per seed as its claim's file says."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from normbench.report.results import BITS_PER_BYTE
from normbench.store import catalog
from normbench.studies import claims, family, qk_norm, registry
from normbench.studies.study import log_growth, seed_pairs
from tests.helpers import make_run

SEEDS = 8
JITTER = np.array([0.3, -0.2, 0.1, -0.3, 0.2, -0.1, 0.25, -0.25])  # in margins, mean 0
SWING = np.array([12, -12, 12, -12, 12, -12, 12, -12])  # in margins: undecided both ways


def values(groups: dict[tuple[str, ...], np.ndarray]) -> pd.DataFrame:
    """A row per group and seed: the group's filter columns, ``seed`` and ``value``."""
    rows = []
    for filters, per_seed in groups.items():
        named = dict(item.split("=", 1) for item in filters)
        rows += [{**named, "seed": s, "value": float(v)} for s, v in enumerate(per_seed)]
    return pd.DataFrame(rows)


def outcome(claim_id: str, frame: pd.DataFrame, lower=True, resolution=0.0) -> bool | None:
    claim = registry.claim(claim_id)
    pairs = seed_pairs(claim, frame, lower_is_better=lower)
    tested = family.decide_claim(claim, pairs, [resolution] * len(pairs))
    return family.label_of(tested)


OUTCOMES = {"reproduced": True, "not reproduced": False, "inconclusive": None}
# a group's value over its reference's, in margins, per outcome: for a claim that predicts
# the group better on a measure where lower is better
LOWER_BETTER = {"reproduced": -5 + JITTER, "not reproduced": 5 + JITTER, "inconclusive": SWING}


@pytest.mark.parametrize("outcome_name", OUTCOMES)
@pytest.mark.parametrize(
    "claim_id",
    [
        "notes-layernorm-converges",
        "notes-layernorm-generalises",
        "notes-layernorm-gradient-spread",
        "notes-layernorm-feature-scale",
    ],
)
def test_each_outcome_of_a_layernorm_against_no_norm_claim_is_reachable(claim_id, outcome_name):
    margin = registry.claim(claim_id).margin
    base = 3.0 + 0.05 * np.arange(SEEDS)
    frame = values(
        {
            ("norm.name=none",): base,
            ("norm.name=layernorm",): base + LOWER_BETTER[outcome_name] * margin,
            ("norm.name=rmsnorm",): base,  # not compared
        }
    )
    assert outcome(claim_id, frame) is OUTCOMES[outcome_name]


@pytest.mark.parametrize("outcome_name", OUTCOMES)
def test_each_outcome_of_the_stability_claim_is_reachable(outcome_name):
    base = 0.5 + 0.02 * np.arange(SEEDS)  # LR sensitivity in bits per byte
    frame = values(
        {
            ("norm.name=none", "placement.name=pre"): base,
            ("norm.name=layernorm", "placement.name=post"): base,  # another placement
            ("norm.name=layernorm", "placement.name=pre"): base + LOWER_BETTER[outcome_name] * 0.01,
        }
    )
    assert outcome("notes-layernorm-stabilises", frame) is OUTCOMES[outcome_name]


@pytest.mark.parametrize(
    "outcome_name, pre_over_post",
    [
        ("reproduced", np.full(SEEDS, 2.0)),  # two doublings deeper in every seed
        ("not reproduced", np.zeros(SEEDS)),  # as deep: within a doubling, shown
        ("inconclusive", np.array([2, -1, 2, -1, 1, -1, 2, -1.0])),
    ],
)
def test_each_outcome_of_the_residual_claim_is_reachable(outcome_name, pre_over_post):
    post = np.full(SEEDS, 2.0)  # log2 of depth 4
    frame = values(
        {
            ("placement.name=post",): post,
            ("placement.name=pre",): post + pre_over_post,
            ("placement.name=sandwich",): post + pre_over_post,
        }
    )
    assert (
        outcome("notes-layernorm-residual", frame, lower=False, resolution=1.0)
        is (OUTCOMES[outcome_name])
    )


def test_the_residual_claim_at_the_grid_s_top_is_censored_never_refuted_on_it():
    # issue 58: Pre-LN and sandwich train at depth 16, the top of the grid, in every seed:
    # log2 16 = 4 is a lower bound, and pooled as a value it let the claim be refuted by a
    # Post-LN as deep as the grid goes, which says nothing about which trains deeper
    claim = registry.claim("notes-layernorm-residual")
    top = np.full(SEEDS, 4.0)  # every arm at depth 16 in every seed
    frame = values({(f"placement.name={p}",): top for p in ("post", "pre", "sandwich")})
    pairs = seed_pairs(claim, frame, lower_is_better=False)
    plain = family.decide_claim(claim, pairs, [1.0] * len(pairs))
    assert family.label_of(plain) is False  # uncensored: "as deep", refuted
    both = [family.censor(t, SEEDS, SEEDS, "depth 16") for t in plain]
    assert family.label_of(both) is None and all(t.decided is None for t in both)
    assert "no test: the reference at depth 16" in both[0].text(claim.alpha)
    # the predicted arms at the top, Post-LN below: decided for, never against
    for post, label in ((top - 2, True), (top - 0.5 + 0.1 * JITTER, None)):
        frame = values(
            {("placement.name=post",): post}
            | {(f"placement.name={p}",): top for p in ("pre", "sandwich")}
        )
        pairs = seed_pairs(claim, frame, lower_is_better=False)
        plain = family.decide_claim(claim, pairs, [1.0] * len(pairs))
        censored = [family.censor(t, SEEDS, 0, "depth 16") for t in plain]
        assert family.label_of(censored) is label, [t.text(claim.alpha) for t in censored]
        assert all("against not tested" in t.text(claim.alpha) for t in censored)
    assert family.label_of(plain) is False  # within a doubling: refuted were it a value


@pytest.mark.parametrize(
    "outcome_name, none_growth",
    [
        ("reproduced", 3.0 + 0.1 * JITTER),  # a thousandfold, QK-norm's twofold
        ("not reproduced", 0.5 + 0.1 * JITTER),  # more, but shown less than tenfold more
        ("inconclusive", 0.3 + 0.25 * SWING),
    ],
)
def test_each_outcome_of_the_logit_growth_claim_is_reachable(outcome_name, none_growth):
    qk = 0.3 + 0.05 * JITTER
    frame = values(
        {("qk_norm=none",): none_growth, ("qk_norm=layernorm",): qk, ("qk_norm=rmsnorm",): qk}
    )
    assert outcome("wortsman-logit-growth", frame) is OUTCOMES[outcome_name]


def test_logit_growth_per_seed_is_the_largest_over_the_grid_of_a_seed_with_every_rate():
    growth = pd.DataFrame(
        [
            dict(qk_norm="none", lr=lr, seed=seed, trained=True, logit_0=2.0, logit_early=early)
            for seed in (0, 1)
            for lr, early in ((0.01, 4.0), (1.0, 2000.0))
        ]
        + [dict(qk_norm="none", lr=0.01, seed=2, trained=True, logit_0=2.0, logit_early=4.0)]
    )
    by_seed = qk_norm.growth_by_seed(growth)
    assert list(by_seed["seed"]) == [0, 1]  # seed 2 has no run at lr 1.0
    assert by_seed["value"].tolist() == pytest.approx([3.0, 3.0])  # log10(2000 / 2)
    assert qk_norm.growth_by_seed(growth.iloc[:0]).empty


def test_a_logit_that_overflowed_counts_as_growth_not_as_a_missing_seed():
    # the seeds that blow up most are the claim's evidence: leaving them out would bias
    # against it; an overflow (inf, or NaN after it) counts as float32's largest
    growth = pd.DataFrame(
        [
            dict(qk_norm="none", lr=lr, seed=seed, trained=lr < 1, logit_0=2.0, logit_early=early)
            for seed, blown in ((0, math.inf), (1, math.nan), (2, 2000.0))
            for lr, early in ((0.01, 4.0), (1.0, blown))
        ]
    )
    by_seed = qk_norm.growth_by_seed(growth)
    assert list(by_seed["seed"]) == [0, 1, 2]
    lower_bound = math.log10(float(np.finfo(np.float32).max) / 2.0)
    assert by_seed["value"].tolist() == pytest.approx([lower_bound, lower_bound, 3.0])
    # a step-0 logit that is not positive and finite leaves nothing to grow from
    assert qk_norm.growth_by_seed(growth.assign(logit_0=0.0)).empty


def test_curve_area_counts_a_missing_or_non_finite_evaluation_as_the_uniform_prediction():
    metrics = pd.DataFrame(
        {
            "step": [1, 2, 2, 4, 4],
            "val_bpb": [math.nan, 5.0, 5.0, 3.0, math.inf],  # the last one diverged
        }
    )
    # evaluations at 2, 4 (every 2) and 5 (the last): 5, uniform (8), uniform (8)
    assert claims.curve_area(metrics, 2, 5, 256.0) == pytest.approx((5 + 8 + 8) / 3)


def test_deepest_depth_per_seed_and_its_resolution():
    rows = []
    for seed in (0, 1):
        for depth, bpb in ((4, 3.0), (8, 3.1), (16, 4.6)):
            rows.append({"placement.name": "pre", "seed": seed, "model.depth": depth, "b": bpb})
        for depth in (4, 8, 16):
            rows.append({"placement.name": "post", "seed": seed, "model.depth": depth, "b": 4.6})
    rows.append({"placement.name": "pre", "seed": 2, "model.depth": 4, "b": 3.0})  # no 8, 16
    runs = pd.DataFrame(rows).assign(status="complete", num_classes=256.0, unigram_bpb=4.53)
    runs[BITS_PER_BYTE.column] = runs.pop("b")
    deepest = claims.deepest_by_seed(runs, BITS_PER_BYTE)
    by = deepest.set_index(["placement.name", "seed"])["value"]
    assert by.to_dict() == {("post", 0): 1.0, ("post", 1): 1.0, ("pre", 0): 3.0, ("pre", 1): 3.0}
    assert not deepest["censored"].any()  # none trains at 16, the top
    runs.loc[runs["placement.name"] == "pre", BITS_PER_BYTE.column] = 3.0  # now 16 trains
    deepest = claims.deepest_by_seed(runs, BITS_PER_BYTE).set_index(["placement.name", "seed"])
    assert deepest["censored"].to_dict() == {
        ("post", 0): False,
        ("post", 1): False,
        ("pre", 0): True,
        ("pre", 1): True,
    }
    assert claims.censored_seeds(deepest.reset_index(), ("placement.name=pre",)) == 2
    assert claims.depth_resolution(runs) == 1.0


def test_gradient_spread_and_feature_drift_per_seed():
    diagnostics = pd.DataFrame(
        {
            "norm.name": ["layernorm"] * 4,
            "seed": ["0"] * 4,  # diagnostics_table labels its keys
            "unit": [0, 0, 1, 1],
            "sublayer": ["attention", "mlp", "attention", "mlp"],
            "grad_norm": [1.0, 1.0, 10.0, 2.0],
            "in_std": [1.0, 1.0, 100.0, 100.0],
        }
    )
    (spread,) = claims.spread_by_seed(diagnostics)["value"]
    assert spread == pytest.approx(1.0)  # attention's 10x, the larger of 10x and 2x
    (drift,) = claims.drift_by_seed(diagnostics)["value"]
    assert drift == pytest.approx(2.0)  # 100x from the first unit to the last
    assert claims.spread_by_seed(None).empty and claims.drift_by_seed(None).empty


FP16_SEEDS = 7


def fp16_store(tmp_path, without_fp32_stats: list[float]) -> pd.DataFrame:
    """SwitchNorm and ScaleNorm runs of the fp16 study's grid: float32 at 0.90 + a seed's
    share, fp16 with float32 statistics the same, fp16 without them ``without_fp32_stats``
    (per seed) below float32."""
    runs = tmp_path / "runs"
    for norm in ("switchnorm", "scalenorm"):
        for seed in range(FP16_SEEDS):
            base = 0.90 + 0.004 * seed
            for precision, stats, acc in (
                ("fp32", "true", base),
                ("fp16", "true", base + 0.001 * (-1) ** seed),
                ("fp16", "false", base - without_fp32_stats[seed]),
            ):
                overrides = [
                    f"norm={norm}",
                    f"precision={precision}",
                    f"norm.fp32_stats={stats}",
                    f"seed={seed}",
                ]
                make_run(runs, overrides, acc=round(acc, 4))
    return catalog.select(catalog.load_runs(runs), [], None).runs


@pytest.mark.parametrize(
    "outcome_name, loss",
    [
        ("reproduced", [0.05 + 0.002 * s for s in range(FP16_SEEDS)]),  # fp16 stats cost 5%
        ("not reproduced", [0.001 * (-1) ** s for s in range(FP16_SEEDS)]),  # they cost nothing
        ("inconclusive", [0.04 * (-1) ** s for s in range(FP16_SEEDS)]),
    ],
)
def test_each_outcome_of_the_fp32_statistics_claim_is_reachable_on_a_designed_store(
    tmp_path, outcome_name, loss
):
    claim = registry.claim("micikevicius-fp32-statistics")
    runs = fp16_store(tmp_path, loss)
    tested = family.decide_claim(claim, *family.results_of(claim, runs))
    assert all(t.difference is not None for t in tested), [t.why for t in tested]
    assert family.label_of(tested) is OUTCOMES[outcome_name], [t.text(0.05) for t in tested]


def test_log_growth_the_muon_and_qk_norm_measure_share():
    assert log_growth(2.0, 20.0) == pytest.approx(1.0)
    assert log_growth(2.0, math.inf) == log_growth(2.0, math.nan) > 38
    assert log_growth(math.inf, 2.0) is None and log_growth(-1.0, 2.0) is None
    assert log_growth(2.0, -3.0) is None

"""The convergence table on hand-made run stores: means, intervals, verdicts against the
best or a reference named before looking, diverged and stale runs, --best-over."""

from __future__ import annotations

import json
import math
from dataclasses import fields

import pandas as pd
import pytest
from helpers import make_run
from typer.testing import CliRunner

from normbench.cli import app
from normbench.report import stats
from normbench.report.base import ACCURACY, Method
from normbench.report.markdown import markdown
from normbench.report.results import resolution
from normbench.report.sections import build
from normbench.store.catalog import load_runs

runner = CliRunner()


T_975 = {2: 4.302652729911275, 3: 3.182446305284263}  # Student's t quantiles, df = 2, 3


def convergence(runs, **method):
    report = build(load_runs(runs), method=Method(**method))
    (section,) = report.sections
    return section.tables["convergence"], section


def test_convergence_numbers_match_hand_computations(study):
    table, section = convergence(study)
    assert section.keys == ["norm.name", "norm.ghost_batch"]
    rows = {(r["norm.name"], r["norm.ghost_batch"]): r for _, r in table.iterrows()}
    bn32 = rows[("batchnorm", 32)]
    assert bn32["n"] == 3 and bn32["val_acc_mean"] == pytest.approx(0.92)
    assert bn32["val_acc_ci95"] == pytest.approx(T_975[2] * 0.02 / math.sqrt(3))
    assert bn32["test_acc_mean"] == pytest.approx(0.91)
    assert bn32["steps_to_target"] == 200 and bn32["reached_target"] == 3
    assert bn32["time_to_target_s"] == pytest.approx(2.0)
    assert bn32["train_loss_auc"] == pytest.approx(0.2) and bn32["parameters"] == 1234
    assert rows[("batchnorm", 2)]["reached_target"] == 1
    assert rows[("groupnorm", None)]["val_acc_mean"] == pytest.approx(0.92)  # ignores ghost
    assert table.iloc[0]["verdict"] == "reference"
    assert isinstance(bn32["norm.ghost_batch"], int)  # numbers stay numbers


def test_verdicts_against_the_best_are_the_stats_modules(study):
    table, _ = convergence(study)
    step = resolution(load_runs(study).runs, ACCURACY)
    assert step == pytest.approx(1 / 1600)  # mnist1d's validation split: 1,600 samples
    groups = [dict(zip(row["seeds"], row["values"], strict=True)) for _, row in table.iterrows()]
    best, verdicts = stats.compare_with_best(groups, 0.05, 0.01, step)
    assert best == 0 and table.iloc[0]["verdict"] == "reference"
    bn2 = table[table["norm.ghost_batch"] == 2].index[0]
    d = stats.difference(groups[bn2], groups[0], step)
    assert d.paired and table.loc[bn2, "diff_vs_best"] == pytest.approx(d.diff)
    low, high = stats.interval(d, 0.05)
    assert (table.loc[bn2, "diff_ci_low"], table.loc[bn2, "diff_ci_high"]) == pytest.approx(
        (low, high)
    )
    assert table.loc[bn2, "p_worse_adj"] == pytest.approx(verdicts[bn2].p_differs)
    assert table.loc[bn2, "reason"] == "paired, 3 seeds"
    assert table.loc[bn2, "values"] == [0.8, 0.82, 0.84]


def test_every_verdict_on_a_hand_made_store(tmp_path):
    runs = tmp_path / "runs"
    groups = {
        "layernorm": [0.950, 0.951, 0.949, 0.950],  # the best
        "rmsnorm": [0.949, 0.950, 0.948, 0.949],  # equivalent within 0.01
        "batchnorm": [0.700, 0.701, 0.699, 0.700],  # worse
        "groupnorm": [0.90, 0.99, 0.85, 0.97],  # inconclusive: noisy
        "dyt": [0.99],  # one seed: no verdict, "-" (one run): not even inconclusive
    }
    for norm, accs in groups.items():
        for seed, acc in enumerate(accs):
            make_run(runs, [f"norm={norm}", f"seed={seed}"], acc=acc)
    table, section = convergence(runs)
    verdicts = dict(zip(table["norm.name"], table["verdict"], strict=True))
    assert verdicts == {
        "layernorm": "reference",
        "rmsnorm": "equivalent",
        "batchnorm": "worse",
        "groupnorm": "inconclusive",
        "dyt": "-",
    }
    dyt = table[table["norm.name"] == "dyt"].iloc[0]
    assert dyt["reason"] == "one run" and math.isnan(dyt["diff_vs_best"])
    # a stricter margin turns the equivalence inconclusive or worse, never equivalent
    strict, _ = convergence(runs, margin=0.0001)
    assert strict.set_index("norm.name").loc["rmsnorm", "verdict"] != "equivalent"


def test_diverged_runs_count_at_chance_and_can_be_excluded(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, ["seed=0"], acc=0.9)
    make_run(runs, ["seed=1"], acc=0.8)
    make_run(runs, ["seed=2"], status="diverged", acc=0.85)  # last accuracy before NaN
    table, section = convergence(runs)
    row = table.iloc[0]
    assert row["val_acc_mean"] == pytest.approx((0.9 + 0.8 + 0.1) / 3)  # chance = 1/10
    assert row["diverged"] == 1 and row["results"] == 3
    assert any("counted at chance" in note for note in section.notes)
    table, section = convergence(runs, diverged="exclude")
    assert table.iloc[0]["val_acc_mean"] == pytest.approx(0.85)
    assert any("1 diverged run(s) excluded" in note for note in section.notes)


def test_groups_mixing_code_fingerprints_are_marked(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, ["seed=0"], acc=0.9)
    make_run(runs, ["seed=1"], acc=0.9, code="0123456789abcdef")  # a stale run
    table, _ = convergence(runs)
    assert table.iloc[0]["mixed"] == "code"
    result = runner.invoke(app, ["report", str(runs)])
    assert "(code mixed)" in result.output


def test_best_over_chooses_on_validation_and_reports_test(tmp_path):
    runs = tmp_path / "runs"
    cells = {  # (norm, lr): (validation, test)
        ("batchnorm", 0.1): (0.90, 0.70),
        ("batchnorm", 0.01): (0.80, 0.80),
        ("groupnorm", 0.1): (0.70, 0.70),
        ("groupnorm", 0.01): (0.85, 0.84),
    }
    for (norm, lr), (val, test) in cells.items():
        for seed in range(2):
            make_run(
                runs,
                [f"norm={norm}", f"train.lr={lr}", f"seed={seed}"],
                acc=val + seed / 1000,
                test_acc=test + seed / 1000,
            )
    report = build(load_runs(runs), best_over_key="train.lr")
    table = report.sections[0].tables["convergence"].set_index("norm.name")
    assert table.loc["batchnorm", "train.lr"] == pytest.approx(0.1)  # best on validation
    assert table.loc["groupnorm", "train.lr"] == pytest.approx(0.01)
    assert table.loc["batchnorm", "test_acc_mean"] == pytest.approx(0.7005)
    assert report.method.test and table.index[0] == "groupnorm"  # verdicts on test
    assert "Verdicts on test" in markdown(report, None)
    # chosen on the same runs whose test numbers are judged: said in every output
    assert any("chosen on validation from the same runs" in n for n in report.sections[0].notes)
    assert "from the same runs" in markdown(report, None)
    for fmt in ("json", "markdown", "csv", "rich"):
        table = ["--table", "convergence"] if fmt == "csv" else []
        out = CliRunner().invoke(
            app, ["report", str(runs), "--best-over", "train.lr", "--format", fmt, *table]
        )
        assert out.exit_code == 0 and "same runs" in out.output.replace("\n", " "), fmt


def test_an_exploded_bits_per_byte_run_counts_at_chance_never_beyond():
    """A run that ended complete at 1e10 bits per byte is as useless as a diverged one: it
    counts at chance (log2 256 = 8), like a diverged run, instead of swamping the mean."""
    from normbench.report.base import BITS_PER_BYTE
    from normbench.report.results import seeded_results

    part = pd.DataFrame(
        {
            "seed": [0, 1, 2],
            "status": ["complete", "complete", "diverged"],
            "final_val_bpb": [3.0, 4.5e10, float("nan")],
            "num_classes": [256, 256, 256],
        }
    )
    values = seeded_results(part, BITS_PER_BYTE.column, BITS_PER_BYTE, Method())
    assert values == {0: 3.0, 1: 8.0, 2: 8.0}


def test_a_reference_named_before_looking_gives_better_worse_and_equivalent(tmp_path):
    runs = tmp_path / "runs"
    base = [0.90, 0.93, 0.88, 0.95]
    shifts = {
        "layernorm": [0, 0, 0, 0],
        "groupnorm": [0.05, 0.052, 0.049, 0.051],  # better at every seed
        "batchnorm": [-0.05, -0.052, -0.049, -0.051],  # worse at every seed
        "rmsnorm": [0.001, -0.001, 0.0015, -0.0005],  # equivalent within 0.01
        "none": [0.06, -0.07, 0.05, -0.04],  # noisy: inconclusive
    }
    for norm, shift in shifts.items():
        for seed, (acc, delta) in enumerate(zip(base, shift, strict=True)):
            make_run(runs, [f"norm={norm}", f"seed={seed}"], acc=acc + delta)
    method = Method.from_options(0.05, 0.01, reference=["norm=layernorm"])
    table, _ = convergence(runs, **{f.name: getattr(method, f.name) for f in fields(Method)})
    verdicts = dict(zip(table["norm.name"], table["verdict"], strict=True))
    assert verdicts == {
        "layernorm": "reference",
        "groupnorm": "better",
        "batchnorm": "worse",
        "rmsnorm": "equivalent",
        "none": "inconclusive",
    }
    assert table.iloc[0]["norm.name"] == "layernorm" and "diff_vs_reference" in table
    better = table.set_index("norm.name").loc["groupnorm"]
    assert better["diff_vs_reference"] == pytest.approx(0.0505) and better["p_differs_adj"] < 0.05
    assert better["reason"] == "paired, 4 seeds"
    for fmt, word in (("json", '"better"'), ("markdown", "better"), ("csv", ",better,")):
        args = ["report", str(runs), "--reference", "norm=layernorm", "--format", fmt]
        result = runner.invoke(app, [*args, "--table", "convergence"])
        assert result.exit_code == 0, result.output
        assert word in result.output
    named = ["report", str(runs), "--reference", "norm=layernorm"]
    payload = json.loads(runner.invoke(app, [*named, "--format", "json"]).stdout)
    assert payload["method"]["reference"] == "norm=layernorm"
    rich = runner.invoke(app, named)
    assert "Δ ref" in rich.output and "named before looking" in rich.output


def test_a_reference_without_a_key_of_the_stratum_serves_every_value_of_it():
    """GroupNorm has no ghost batch ('-'): named as the reference, it serves BatchNorm at each
    ghost batch; an exact stratum wins over '-', and two equally good references give none."""
    from normbench.report.convergence import reference_indices

    keys = ["norm.name", "norm.ghost_batch"]
    rows = [
        {"norm.name": "groupnorm", "norm.ghost_batch": None},
        {"norm.name": "batchnorm", "norm.ghost_batch": 32},
        {"norm.name": "batchnorm", "norm.ghost_batch": 2},
    ]
    assert reference_indices(rows, keys, ("norm=groupnorm",)) == [0, 0, 0]
    assert reference_indices(rows, keys, ("norm=batchnorm",)) == [None, 1, 2]
    lr = ["norm.name", "train.lr"]
    strata = [
        {"norm.name": "layernorm", "train.lr": 0.1},
        {"norm.name": "layernorm", "train.lr": 0.3},
        {"norm.name": "rmsnorm", "train.lr": 0.1},
        {"norm.name": "dyt", "train.lr": None},
    ]
    assert reference_indices(strata, lr, ("norm=layernorm",)) == [0, 1, 0, None]


def test_a_reference_world_size_is_not_kept_apart_by_the_per_device_batch_it_sets():
    """At one global batch each world size has its own per-device batch (a column the report
    derives): ``--reference train.devices=1`` must still be every N's reference, as a sweep
    over train.devices asks, not a stratum of one per per-device batch."""
    from normbench.report.convergence import reference_indices

    keys = ["norm.name", "train.devices", "per_device_batch"]
    rows = [
        {"norm.name": "batchnorm", "train.devices": n, "per_device_batch": 16 // n}
        for n in (1, 2, 4)
    ]
    rows += [
        {"norm.name": "layernorm", "train.devices": n, "per_device_batch": 16 // n} for n in (1, 2)
    ]
    assert reference_indices(rows, keys, ("train.devices=1",)) == [0, 0, 0, 3, 3]


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("norm=fancy", "--reference norm=fancy matches no group; valid: norm=batchnorm"),
        ("seed=3", "--reference seed=3: seed does not tell the groups of this table apart"),
        ("norm=a,b", "--reference norm=a,b: one KEY=VALUE per key"),
    ],
)
def test_a_reference_that_names_no_group_is_one_line(study, given, words):
    result = runner.invoke(app, ["report", str(study), "--reference", given])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert words in result.output


def test_a_reference_per_stratum_of_the_other_keys(study):
    """--reference norm=batchnorm where the ghost batch varies too: BatchNorm at each ghost
    batch is the reference of the groups at that ghost batch; GroupNorm, which ignores the
    ghost batch, has no BatchNorm beside it and is inconclusive, saying why."""
    method = Method(reference=("norm=batchnorm",))
    table, _ = convergence(study, **{f.name: getattr(method, f.name) for f in fields(Method)})
    rows = {(r["norm.name"], r["norm.ghost_batch"]): r for _, r in table.iterrows()}
    assert rows[("batchnorm", 2)]["verdict"] == rows[("batchnorm", 32)]["verdict"] == "reference"
    assert rows[("groupnorm", None)]["verdict"] == "inconclusive"
    assert rows[("groupnorm", None)]["reason"] == "no reference group beside it"


def test_a_reference_error_lists_each_choice_once(study):
    """BatchNorm at two ghost batches is two groups but one choice of norm: named once."""
    result = runner.invoke(app, ["report", str(study), "--reference", "norm=fancy"])
    assert result.exit_code == 2
    assert result.output.count("norm=batchnorm") == 1, result.output


def test_a_report_of_several_sections_is_written_in_every_format(tmp_path):
    """The convergence tables keep their comparisons' numbers beside them (attrs, read by a
    sweep's looks); pandas compares attrs when it joins the sections' tables for CSV and
    JSON, so they are plain tuples: an array there made every multi-section export fail."""
    runs = tmp_path / "runs"
    for data in ("digits", "mnist1d"):
        for norm, acc in (("batchnorm", 0.9), ("layernorm", 0.8)):
            for seed in range(2):
                make_run(
                    runs, [f"data={data}", f"norm={norm}", f"seed={seed}"], acc=acc + seed / 100
                )
    for fmt in ("json", "markdown"):
        out = CliRunner().invoke(app, ["report", str(runs), "--format", fmt])
        assert out.exit_code == 0, out.output
    out = CliRunner().invoke(
        app, ["report", str(runs), "--format", "csv", "--out", str(tmp_path / "t.csv")]
    )
    assert out.exit_code == 0, out.output
    from normbench import api

    assert len(api.report(runs)["convergence"]) == 4


def test_the_target_column_names_the_target_it_counts_steps_to(tmp_path):
    # newcomer friction: "target" named neither the metric nor the value
    runs = tmp_path / "runs"
    for norm, seed in [(n, s) for n in ("batchnorm", "groupnorm") for s in (0, 1)]:
        make_run(runs, [f"norm={norm}", f"seed={seed}", "target.value=0.7"], steps_to_target=100)
    shown = runner.invoke(app, ["report", str(runs), "--format", "markdown"])
    assert shown.exit_code == 0, shown.output
    said = " ".join(shown.output.split())
    assert "to 0.7: median steps until val acc >= 0.7 (target.metric, target.value)" in said
    # and the column's header says it too (issue 62: "target" said neither what nor to what)
    header = next(line for line in shown.output.splitlines() if "verdict" in line)
    assert "| to 0.7 |" in header and "| target |" not in header, header
    make_run(runs, ["norm=layernorm", "seed=0", "target.value=0.8"], steps_to_target=100)
    mixed = runner.invoke(
        app, ["report", str(runs), "norm=batchnorm,layernorm", "--format", "markdown"]
    )
    assert "until each run's target (target.metric, target.value differ" in " ".join(
        mixed.output.split()
    )

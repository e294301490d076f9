"""Scaling ladders (normbench.sweeps.ladder, ladder_plan; normbench.experiment.budget): the
budget rule on real models, data subsets on real data, the plan and its refusals through the
CLI, and resume at any rung and phase. The resume tests use designed runs (a fake launcher
writes each run as normbench writes it, so the real planner, record and tuning read them);
one slow test trains a tiny ladder end to end and runs it again."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from normbench import api
from normbench.core.errors import UsageError
from normbench.data import datasets, pysource
from normbench.experiment.budget import size_of, tokens_per_param
from normbench.experiment.probe import compose_checked
from normbench.experiment.schema import MAX_DEPTH
from normbench.report.base import Method
from normbench.store.records import latest_record
from normbench.store.rundir import Rerun
from normbench.sweeps import ladder, ladder_plan, tuned, tuned_plan
from normbench.sweeps.session import Launch, run_rounds
from tests.helpers import QUICK, invoke, limited, one_line, run_dirs
from tests.sweeps.test_tuned import FakeLauncher

UNSIZED = [o for o in QUICK if not o.startswith("model.width=")]  # the ladder sets it
LM = ["data=pysource", "data.context=16", "data.eval_windows=8", "batch_size=8", "device=cpu"]


# ------------------------------------------------------------------ the budget rule
def test_the_rule_counts_non_embedding_parameters_and_sets_the_steps():
    for width in (16, 32):
        cfg = compose_checked([*LM, f"model.width={width}"])
        size = size_of(cfg)
        embedding = 256 * width + 16 * width  # byte table and 16 learned positions
        assert size.parameters - size.non_embedding == embedding
        assert size.tokens_per_step == 8 * 16  # batch x context bytes
        steps = size.steps_for(20)
        assert steps == math.ceil(20 * size.non_embedding / 128)
        assert size.flops(steps) == 6 * size.non_embedding * steps * 128
    patched = size_of(compose_checked(["model.width=16", "batch_size=4"]))  # mnist1d: 40 / 4
    assert patched.tokens_per_step == 4 * 10
    given = ["model.width=16", "norm=dyt", "model.qk_norm=rmsnorm"]
    built = api.build_model(given)  # on the CPU, as a run builds it: the meta device agrees
    assert size_of(compose_checked(given)).parameters == sum(p.numel() for p in built.parameters())
    huge = size_of(compose_checked(["model=cnn", "model.width=99999999"]))  # no memory taken
    assert huge.parameters > 10**16


@pytest.mark.parametrize("text", ["0", "-1", "abc", "nan"])
def test_a_rule_that_is_not_a_positive_number_is_refused(text):
    with pytest.raises(UsageError, match="train.tokens_per_param"):
        tokens_per_param(text, "--ladder")


PLUGIN = """
from torch import nn


class Stack(nn.Module):  # depth layers of width, or (squared) one layer of depth x depth

    def __init__(self, inputs, width, depth, num_classes, squared):
        super().__init__()
        hidden, layers = (depth, 1) if squared else (width, depth)
        self.stem = nn.Linear(inputs, hidden)
        self.units = nn.Sequential(*(nn.Linear(hidden, hidden) for _ in range(layers)))
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x, mask=None):
        return self.head(self.units(self.stem(x.flatten(1))))


def linear(cfg, make_norm, input_shape, num_classes, width: int = 4, depth: int = 3):
    return Stack(input_shape[0] * input_shape[1], width, depth, num_classes, False)


def squared(cfg, make_norm, input_shape, num_classes, width: int = 4, depth: int = 3):
    return Stack(input_shape[0] * input_shape[1], width, depth, num_classes, True)
"""


def test_a_deep_user_model_is_counted_by_extrapolation_only_where_its_count_is_linear(
    tmp_path, monkeypatch
):
    (tmp_path / "deep_models.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    given = ["model=deep_models:linear", "model.depth=300"]
    size = size_of(compose_checked(given))
    built = api.build_model(given)
    assert size.parameters == sum(p.numel() for p in built.parameters())
    assert size.non_embedding_no_head == size.parameters - sum(
        p.numel() for p in built.head.parameters()
    )
    with limited(10, 2 << 30):  # 10^7 layers: counted, not built (a user's model has no bound)
        deep = size_of(compose_checked(["model=deep_models:linear", "model.depth=10000000"]))
    per_layer = 4 * 4 + 4  # a Linear(4, 4) per layer
    assert deep.parameters == size.parameters + (10_000_000 - 300) * per_layer
    with pytest.raises(UsageError, match="do not grow linearly with its depth"):
        size_of(compose_checked(["model=deep_models:squared", "model.depth=300"]))


# ------------------------------------------------------------------ data subsets
def test_a_subset_of_the_train_split_is_fixed_nested_and_leaves_val_and_test_alone():
    base = {**compose_checked(["data.num_samples=600"])["data"]}
    whole = datasets.load(base)
    small = datasets.load({**base, "train_samples": 50})
    large = datasets.load({**base, "train_samples": 200})
    again = datasets.load({**base, "train_samples": 50})
    assert len(small.train) == 50 and len(large.train) == 200
    np.testing.assert_array_equal(small.train.x, again.train.x)  # the same for the same size
    np.testing.assert_array_equal(small.train.x, large.train.x[:50])  # nested
    np.testing.assert_array_equal(large.train.x, whole.train.x[:200])
    for split in ("val", "test"):
        np.testing.assert_array_equal(getattr(small, split).x, getattr(whole, split).x)
    assert datasets.split_sizes({**base, "train_samples": 50})["train"] == 50


def test_a_pysource_subset_is_a_prefix_of_a_larger_one_and_of_train_files_only():
    small = pysource.train_subset(0.05, 0.05, 2_000)
    large = pysource.train_subset(0.05, 0.05, 50_000)
    assert len(small) == 2_000 and bytes(large[:2_000]) == bytes(small)
    train = bytes(pysource.pysource_streams(0.05, 0.05)["train"])
    first_file = bytes(large).split(bytes([pysource.FILE_SEPARATOR]))[0]
    assert first_file in train  # a whole train file, in the subset's own order
    cfg = compose_checked([*LM, "data.train_samples=100"])
    data = datasets.load(cfg["data"])
    assert len(data.train.bytes) == 100 * 16 + 1 and len(data.train) == 100


# ------------------------------------------------------------------ the plan, the CLI
def sweep(*args, runs):
    return invoke("sweep", *args, "--runs-dir", str(runs), seconds=120, memory=8 << 30)


def test_dry_run_shows_every_rung_and_writes_nothing(tmp_path):
    args = [*LM, "norm=layernorm,dyt", "--ladder", "model.width=32,16,24"]
    out = sweep(
        *args,
        "train.tokens_per_param=4",
        "--tune",
        "train.lr=1e-3,1e-2",
        "--dry-run",
        runs=tmp_path / "runs",
    )
    assert out.exit_code == 0, out.output
    rows = rung_rows(out.output)
    assert [row.split()[0] for row in rows] == ["16", "24", "32"]  # smallest first
    assert "tok/N" in out.output and "estimated" in out.output
    assert not (tmp_path / "runs").exists()
    plan = ladder_plan.design(
        ladder_plan.LadderSpec("model.width", ["16", "32"], 4.0),
        None,
        [*LM, "norm=layernorm,dyt"],
        100,
        {},
        (1, 3, None, True),
        None,
    )
    for rung in plan.rungs:  # every group of a rung at the same steps, from the first's N
        assert {job.cfg["train"]["max_steps"] for job in rung.grid.jobs} == {rung.steps}
        assert rung.steps == math.ceil(4 * rung.size.non_embedding / 128)
        assert rung.tokens_per_param == pytest.approx(4, rel=0.05)


def test_each_count_is_named_with_its_tokens_per_parameter(tmp_path):
    # issue 58 item 7: "Kaplan's N" held the output head (half of N at width 16); each count
    # is now named by its convention, tokens per parameter under each, in the plan's record
    # and the dry run
    spec = ladder_plan.LadderSpec("model.width", ["16", "32", "64"], 20.0)
    plan = ladder_plan.design(
        spec, None, [*LM, "norm=layernorm"], 100, {}, (1, 3, None, True), None
    )
    for rung, entry in zip(plan.rungs, plan.record()["rungs"], strict=True):
        width = int(rung.value)
        head = width * 256 + 256  # the readout: width -> 256 bytes, and its bias
        assert entry["parameters_non_embedding_no_head"] == entry["parameters_non_embedding"] - head
        by_count = entry["tokens_per_param_by_count"]
        assert by_count["non_embedding"] == entry["tokens_per_param"]
        assert by_count["non_embedding_no_head"] == pytest.approx(
            entry["tokens"] / entry["parameters_non_embedding_no_head"], rel=1e-3
        )
        assert by_count["total"] == pytest.approx(entry["tokens"] / entry["parameters"], rel=1e-3)
        assert by_count["total"] < by_count["non_embedding"] < by_count["non_embedding_no_head"]
    assert plan.record()["rule"]["count"] == "non-embedding, output head included"
    out = invoke(
        "sweep",
        *LM,
        "norm=layernorm",
        *("--ladder", "model.width=16,32,64", "train.tokens_per_param=20", "--dry-run"),
        "--runs-dir",
        str(tmp_path / "runs"),
        seconds=120,
        memory=8 << 30,
        columns=80,
    )
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    header = next(line for line in lines if "tok/Kaplan" in line)
    assert header.split() == [
        *("rung", "total", "tok/total", "non-emb", "tok/non-emb", "Kaplan", "N", "tok/Kaplan")
    ]
    rows = lines[lines.index(header) + 2 : lines.index(header) + 5]
    assert [row.split()[0] for row in rows] == ["16", "32", "64"]
    assert all(len(line) <= 80 for line in lines[lines.index(header) - 1 : lines.index(header) + 5])
    assert all(float(row.split()[4]) == pytest.approx(20, rel=0.05) for row in rows)
    text = " ".join(out.output.split())
    assert "the output head kept (the rule's N, not Kaplan's)" in text
    assert "Kaplan N: less the output head too, as Kaplan et al. 2020 count N" in text


def rung_rows(output: str) -> list[str]:
    """The rows of a ladder's --dry-run table: the lines under its header's rule, to the
    first that is not a rung's."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if set(line.strip()) == {"─"}) + 1
    rows = []
    for line in lines[start:]:
        if not line.strip() or not line.split()[0][0].isdigit():
            break
        rows.append(line)
    return rows


@pytest.mark.parametrize(
    ("columns", "gap"), [(80, " params non-emb steps "), (100, " params  non-emb  steps ")]
)
def test_the_dry_run_table_is_padded_and_fits_the_terminal(tmp_path, columns, gap):
    # newcomer friction: no padding (``│  16│   14k│``); at 80 columns one space between
    # columns, two where they fit, never a line past the width nor a row wrapped
    extra = ["--ladder-transfer", "1"]  # the widest cell of the tuned column: "transfer"
    out = invoke(
        "sweep",
        "data_regime",
        *extra,
        "--dry-run",
        "--runs-dir",
        str(tmp_path / "runs"),
        seconds=120,
        memory=8 << 30,
        columns=columns,
    )
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    header = next(line for line in lines if "non-emb" in line)
    assert gap in header and "│" not in out.output and "┃" not in out.output
    assert [row.split()[0] for row in rung_rows(out.output)] == [
        "250",
        "1000",
        "4000",
        "16000",
        "64000",
    ]
    assert all(
        "…" not in row and row.split()[-1] in ("yes", "transfer") for row in rung_rows(out.output)
    )
    table = lines[lines.index(header) - 1 : lines.index(header) + 7]
    assert all(len(line.rstrip()) <= columns for line in table), table


def test_with_a_head_dimension_the_heads_follow_the_width():
    spec = ladder_plan.LadderSpec("model.width", ["16", "48"], None, head_dim=8)
    plan = ladder_plan.design(
        spec, None, [*LM, "norm=layernorm"], 100, {}, (1, 3, None, True), None
    )
    assert [rung.grid.jobs[0].cfg["model"]["heads"] for rung in plan.rungs] == [2, 6]
    assert plan.record()["head_dim"] == 8


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--ladder", "train.lr=1,2"], ["train.lr", "model.width, model.depth"]),
        (["--ladder", "model.width=16"], ["one rung"]),
        (["--ladder", "model.width=16,x,32"], ["'x' is not a positive integer"]),
        (["--ladder", "model.width=16,32,64", "train.tokens_per_param=0"], ["yields 0 steps"]),
        (
            [
                *("--ladder", "model.width=16,32,64", "train.tokens_per_param=2"),
                "train.max_steps=5",
            ],
            ["give one"],
        ),
        (["train.tokens_per_param=2"], ["a ladder's setting", "--ladder"]),
        (["--ladder", "model.width=16,32,64", "--ladder-transfer", "1"], ["nothing is tuned"]),
        (
            [
                *("--ladder", "model.width=16,32,64", "--ladder-transfer", "3"),
                *("--tune", "train.lr=1,2"),
            ],
            ["--ladder-transfer 3", "valid: 0"],
        ),
        (
            ["--ladder", "data.train_samples=10,20,99999999"],
            ["data.train_samples=99999999", "valid: 1.."],
        ),
        (["--ladder", "model.width=16,30,32"], ["model.width=30"]),  # 4 heads do not divide 30
        (["--ladder", "model.width=16,24,32", "--ladder-head-dim", "16"], ["model.width=24"]),
        (["--ladder", "model.depth=1,2,3", "--ladder-head-dim", "8"], ["width ladder only"]),
        (
            ["--ladder", "model.width=16,32,64", "--ladder-head-dim", "8", "model.heads=2"],
            ["give one"],
        ),
        # issue 62: a 2-rung ladder fits no trend (its report said "no numeric key varies")
        (["--ladder", "model.width=16,32"], ["2 rungs fit no trend", "3 or more values"]),
        # an empty value was dropped unseen
        (["--ladder", "model.width=4,,8,16"], ["'model.width=4,,8,16'", "an empty value"]),
        (["--ladder", "model.width=4,8,16,"], ["an empty value"]),
        (["--ladder", "model.width="], ["'model.width=': no values"]),
        # digits that str.isdigit() takes and int() or Hydra refuse: a traceback, or a parser
        # class named (LexerNoViableAltException)
        (["--ladder", "model.width=²,16,32"], ["'²' is not a positive integer", "digits 0-9"]),
        (["--ladder", "model.width=16,③,32"], ["'③' is not a positive integer"]),
        (["--ladder", "model.width=¹,16,32"], ["'¹' is not a positive integer"]),
        (["--ladder", "model.width=٨,16,32"], ["'٨' is not a positive integer"]),
        # a second --ladder replaced the first unseen
        (
            ["--ladder", "model.width=8,16,32", "--ladder", "model.depth=1,2,3"],
            ["--ladder given 2 times", "'model.width=8,16,32', 'model.depth=1,2,3'"],
        ),
        (["--ladder-head-dim", "8"], ["a ladder's setting"]),
    ],
)
def test_bad_ladders_are_refused_in_one_line_before_anything_is_written(tmp_path, extra, words):
    out = sweep(*LM, "norm=layernorm", *extra, runs=tmp_path / "runs")
    one_line(out, *words)
    assert not (tmp_path / "runs").exists()


WIDTHS = ("--ladder", "model.width=8,16,32")


@pytest.mark.parametrize(
    "extra, words",
    [
        ([*WIDTHS, "--tune", "model.width=4,8"], ["--tune model.width: the ladder's axis"]),
        (
            ["--ladder", "model.depth=1,2,3", "--tune", "model.depth=1,4"],
            ["--tune model.depth: the ladder's axis (model.depth=1,2,3)"],
        ),
        (
            ["--ladder", "data.train_samples=50,100,200", "--tune", "data.train_samples=10,20"],
            ["--tune data.train_samples: the ladder's axis"],
        ),
        (
            [*WIDTHS, "--ladder-head-dim", "4", "--tune", "model.heads=1,2"],
            ["--tune model.heads: set at each rung by the ladder", "head dimension 4"],
        ),
    ],
)
def test_tuning_a_key_the_ladder_sets_is_refused(tmp_path, extra, words):
    # issue 62 H1: accepted, every rung trained at the tuned size and the ladder collapsed into
    # one while its record stated each rung's parameter count
    out = sweep(*LM, "norm=layernorm", *extra, "--dry-run", runs=tmp_path / "runs")
    one_line(out, *words, "not tunable", "valid: tune other keys")
    assert not (tmp_path / "runs").exists()


def test_a_preset_that_tunes_its_ladders_key_is_refused_naming_the_preset(tmp_path):
    preset = tmp_path / "mine.yaml"
    preset.write_text(
        "# A ladder that tunes its own width?\nversion: 1\nparams:\n  norm: layernorm\n"
        "ladder: {key: model.width, values: [8, 16, 32]}\ntune:\n  model.width: [8, 16]\n"
    )
    out = sweep(str(preset), *LM, "--dry-run", runs=tmp_path / "runs")
    one_line(out, f"sweep preset {preset}, tune: model.width", "the ladder's axis")


@pytest.mark.parametrize(
    "extra, words",
    [
        (  # 10^308 x N overflowed a float: a traceback (OverflowError)
            [*WIDTHS, "train.tokens_per_param=1e308"],
            ["model.width=8: one run is estimated at more hours than a float holds"],
        ),
        (
            [*WIDTHS, "train.tokens_per_param=1e12"],
            ["model.width=8: one run is estimated at", "a smaller train.tokens_per_param"],
        ),
        (["--ladder", "model.width=8,16,100000000"], ["model.width=100000000: one run"]),
        (
            [*WIDTHS, "train.max_steps=1000000000000000000000000000000"],
            ["model.width=8: one run is estimated at", "a smaller train.max_steps"],
        ),
        (  # built layer by layer to count it, depth 100000 planned for an hour in growing memory
            ["--ladder", f"model.depth=1,2,{MAX_DEPTH}", "model.width=8192"],
            [f"model.depth={MAX_DEPTH}: one run is estimated at", "5.5e+11 non-embedding"],
        ),
    ],
)
def test_a_rung_estimated_beyond_the_bound_is_refused_in_seconds(tmp_path, extra, words):
    # issue 62 H2 and its lows: planned at millions of hours (or a traceback, or a hang)
    out = sweep(*LM, "norm=layernorm", *extra, "--dry-run", runs=tmp_path / "runs")
    one_line(out, *words, f"beyond the {ladder_plan.MAX_RUNG_HOURS:,} h a rung may take")
    assert not (tmp_path / "runs").exists()


def test_a_deep_model_is_counted_without_building_every_layer():
    # depth 300 (beyond DEPTH_BUILT): extrapolated, and equal to the model built on the CPU
    given = [*LM, "model.width=8", "model.heads=2", "model.depth=300", "norm=dyt"]
    built = api.build_model(given)
    size = size_of(compose_checked(given))
    assert size.parameters == sum(p.numel() for p in built.parameters())
    assert size.non_embedding_no_head == size.non_embedding - sum(
        p.numel() for p in built.head.parameters()
    )
    one, two = (size_of(compose_checked([*LM, f"model.depth={d}"])) for d in (1, 2))
    deep = size_of(compose_checked([*LM, f"model.depth={MAX_DEPTH}"]))
    per_layer = two.parameters - one.parameters
    assert deep.parameters == one.parameters + (MAX_DEPTH - 1) * per_layer


@pytest.mark.parametrize(
    "ladder, words",
    [
        ("{key: train.lr, values: [1, 2]}", ["ladder: 'train.lr'", "not a size axis"]),
        ("{key: model.width, values: [16]}", ["ladder: 'model.width=16'", "one rung"]),
        ("{key: model.width, values: [16, 32, 64], transfer: x}", ["transfer: x", "valid: 0"]),
        ("{key: model.width, values: [16, 32, 64], tokens_per_param: 0}", ["yields 0 steps"]),
        ("{key: model.width, values: [16, 32]}", ["ladder: 'model.width=16,32'", "2 rungs"]),
        ("{axis: model.width}", ["ladder (key, values, tokens_per_param, transfer, head_dim)"]),
    ],
)
def test_a_bad_ladder_in_a_preset_is_refused_naming_the_preset(tmp_path, ladder, words):
    preset = tmp_path / "mine.yaml"
    preset.write_text(f"# A ladder?\nversion: 1\nparams:\n  norm: layernorm\nladder: {ladder}\n")
    out = sweep(str(preset), *LM, runs=tmp_path / "runs")
    one_line(out, *words)
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ rounds and resume
def lowest_at(cfg) -> tuple[float, float]:
    """Designed runs: validation loss lowest at lr 0.01 at width 8, at 0.001 at width 16."""
    best = 0.01 if cfg["model"]["width"] == 8 else 0.001
    val = 0.1 + abs(math.log10(cfg["train"]["lr"] / best)) * 0.1 + 0.001 * (cfg["seed"] % 3)
    return val, 0.5


def run_ladder(runs, launcher, transfer: int = 0):
    overrides = [*UNSIZED, "norm=batchnorm,layernorm", "seed=0,1"]
    spec = ladder_plan.LadderSpec("model.width", ["8", "16"], None, transfer)
    space = {"train.lr": ["0.001", "0.01"]}
    plan = ladder_plan.design(spec, None, overrides, 1000, space, (1, 3, None, True), "lad")
    design = ladder.Ladder(plan, Rerun(), None, Method())
    with ladder.session(plan, runs, Launch(), Console(quiet=True), {}, launcher) as session:
        run_rounds(session, design)
        session.finish()
    return design


def test_each_rung_is_tuned_and_recorded(tmp_path):
    design = run_ladder(tmp_path, FakeLauncher(tmp_path, lowest_at))
    record = latest_record(tmp_path, "lad")
    head = record["ladder"]
    assert head["key"] == "model.width" and head["values"] == ["8", "16"]
    assert [r["tuned"] for r in head["rungs"]] == [True, True]
    chosen = [r["chosen"]["norm=batchnorm"]["train.lr"] for r in head["rungs"]]
    assert chosen == ["0.01", "0.001"]  # each rung at its own best
    assert len(record["runs"]) == 8  # both rungs' confirmations: 2 norms x 2 seeds each
    assert all(rid in run_dirs(tmp_path) for rid in record["tuning"]["runs"])
    assert len(record["tuning"]["runs"]) == 2 * 2 * 2 + 2 * 2  # both rungs, edges included
    assert isinstance(design.designs[1], tuned.Tuned)


def test_transfer_tunes_the_smallest_rung_only(tmp_path):
    launcher = FakeLauncher(tmp_path, lowest_at)
    design = run_ladder(tmp_path, launcher, transfer=1)
    assert [rung.runs for rung in design.plan.rungs] == [14, 4]  # at most: 3 extension rounds
    head = latest_record(tmp_path, "lad")["ladder"]
    assert [r["tuned"] for r in head["rungs"]] == [True, False]
    assert head["transfer"]["from"] == "8"
    assert head["rungs"][1]["chosen"]["norm=layernorm"] == {"train.lr": "0.01"}
    at_16 = [cfg for cfg in launcher.trained if cfg["model"]["width"] == 16]
    assert len(at_16) == 4 and {cfg["train"]["lr"] for cfg in at_16} == {0.01}


@pytest.mark.parametrize("stop_after", [5, 8, 12, 17])
def test_stopped_at_any_rung_and_phase_the_resumed_ladder_ends_as_an_unbroken_one(
    tmp_path, stop_after
):
    # 20 runs: per rung 4 of tuning, 2 beyond the grid's edge, 4 of confirmation; stopped in
    # the first rung's edge and confirmation phases, the second's tuning and confirmation,
    # then the same ladder again
    whole = tmp_path / "whole"
    run_ladder(whole, FakeLauncher(whole, lowest_at))
    first = FakeLauncher(tmp_path / "cut", lowest_at, stop_after=stop_after)
    with pytest.raises(KeyboardInterrupt):
        run_ladder(tmp_path / "cut", first)
    again = FakeLauncher(tmp_path / "cut", lowest_at)
    run_ladder(tmp_path / "cut", again)
    assert len(run_dirs(whole)) == 20 and len(first.trained) == stop_after
    assert len(first.trained) + len(again.trained) == 20  # none trained twice
    expected, got = latest_record(whole, "lad"), latest_record(tmp_path / "cut", "lad")
    assert got["ladder"] == expected["ladder"] and got["runs"] == expected["runs"]


@pytest.mark.slow
def test_a_tiny_ladder_trains_end_to_end_and_resumes_only_what_was_lost(tmp_path):
    runs = tmp_path / "runs"
    command = [
        "data=digits",
        "model=cnn",
        "model.depth=1",
        "norm.groups=2",
        "norm=layernorm,batchnorm",
        "seed=0",
        "train.warmup_steps=1",
        "train.eval_every=5",
        "threads=1",
        "device=cpu",
        "--ladder",
        "model.width=4,8,12",  # a ladder has 3 rungs at least
        "train.tokens_per_param=0.5",
        "--tune",
        "train.lr=0.003,0.03",
        "--tune-seeds",
        "1",
        "--no-tune-extend",
        "-j",
        "1",
        "--name",
        "tiny",
    ]
    out = sweep(*command, runs=runs)
    assert out.exit_code == 0, out.output
    record = latest_record(runs, "tiny")
    assert [r["done"] for r in record["ladder"]["rungs"]] == [True, True, True]
    trained = run_dirs(runs)
    assert len(trained) == 3 * (2 * 2 + 2)  # per rung: tuning 2 norms x 2 lrs, confirmation 2
    ids = [run["run_id"] for run in record["runs"]]
    results = [json.loads((runs / rid / "meta.json").read_text()) for rid in ids]
    assert all(meta["summary"]["parameters_non_embedding"] > 0 for meta in results)
    # as if killed in the last rung's tuning: a tuning run of it and the first rung's
    # confirmation runs gone; the same command trains those three and nothing else
    lost = [record["tuning"]["runs"][-1], *ids[:2]]
    kept = {rid: (runs / rid / "meta.json").read_text() for rid in trained - set(lost)}
    for rid in lost:
        shutil.rmtree(runs / rid)
    again = sweep(*command, runs=runs)
    assert again.exit_code == 0 and run_dirs(runs) == trained
    assert kept == {rid: (runs / rid / "meta.json").read_text() for rid in kept}
    resumed = latest_record(runs, "tiny")
    assert resumed["ladder"]["rungs"] == record["ladder"]["rungs"]  # the same choices
    assert resumed["runs"] == record["runs"]


@pytest.mark.parametrize(
    "name, key",
    [
        ("ladder_lm", "model.width"),
        ("ladder_lm_gpu", "model.width"),
        ("ladder_tinystories_gpu", "model.width"),
        ("data_regime", "data.train_samples"),
        ("lr_sensitivity_scaling", "model.width"),
    ],
)
def test_the_ladder_presets_hold_a_ladder_and_say_their_estimate(name, key):
    spec, _ = ladder_plan.parse(None, None, name, [])
    assert spec.key == key and len(spec.values) >= 5
    header = (Path(__file__).parents[2] / "conf" / "sweep" / f"{name}.yaml").read_text()
    header = header.split("version:")[0]
    assert "?" in header and "Prediction" in header and "stimated" in header


def test_until_decided_adds_seeds_within_a_rung_only(tmp_path):
    # a plain ladder (nothing tuned) with --until-decided: each rung's looks count its own
    # groups; a seed added at one rung never lands at another
    overrides = [*UNSIZED, "norm=batchnorm,layernorm", "seed=0,1"]
    spec = ladder_plan.LadderSpec("model.width", ["8", "16"], None)
    plan = ladder_plan.design(spec, None, overrides, 1000, {}, (1, 3, None, True), "lad")
    design = ladder.Ladder(plan, Rerun(), 4, Method())
    launcher = FakeLauncher(tmp_path, lowest_at)
    with ladder.session(plan, tmp_path, Launch(), Console(quiet=True), {}, launcher) as session:
        run_rounds(session, design)
        session.finish()
    record = latest_record(tmp_path, "lad")
    widths = [cfg["model"]["width"] for cfg in launcher.trained]
    assert widths == sorted(widths)  # the first rung ends before the second starts
    assert len(record["runs"]) == len(launcher.trained) and "until_decided" in record
    per_rung = {
        w: sorted({cfg["seed"] for cfg in launcher.trained if cfg["model"]["width"] == w})
        for w in (8, 16)
    }
    assert all(seeds[:2] == [0, 1] and len(seeds) <= 4 for seeds in per_rung.values())


@pytest.mark.parametrize("name", ["ladder_lm", "data_regime", "lr_sensitivity_scaling"])
def test_each_cpu_ladder_preset_is_estimated_under_an_hour_on_two_workers(name):
    # what its header states from --dry-run: the plan's estimate at the default tuning seeds
    spec, overrides = ladder_plan.parse(None, None, name, [])
    space = tuned_plan.parse_space([], name)
    plan = ladder_plan.design(spec, name, overrides, 10_000, space, (2, 3, None, True), None)
    minutes = sum(rung.seconds() for rung in plan.rungs) / 2 / 60
    assert 5 < minutes < 60, minutes
    header = (Path(__file__).parents[2] / "conf" / "sweep" / f"{name}.yaml").read_text()
    assert f"about {minutes:.0f}\n# minutes" in header or f"about {minutes:.0f} minutes" in header

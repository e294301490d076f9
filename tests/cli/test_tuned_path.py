"""Issue 51's list ("Faults of the tuned path"), one regression test per item, through the CLI
on a real store where one can show it: a sweep record is untrusted input, and bad input is one
line naming the key, the bad value and the valid choices."""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import time

import pytest
from helpers import invoke as invoke_limited
from helpers import make_run, one_line
from rich.console import Console

from normbench.report import tuning

invoke = functools.partial(invoke_limited, seconds=120, memory=8 << 30)


GROUP = {
    "group": "norm=layernorm",
    "keys": ["train.lr"],
    "space": 2,
    "trials": 2,
    "steps": 16,
    "full_grid_steps": 16,
    "chosen": {"train.lr": "0.01"},
    "metric": "val_acc",
    "value": 0.8,
    "runner_up": "train.lr=0.1",
    "gap": 0.1,
    "regret_bound": 0.0,
    "tried": {"train.lr": ["0.01", "0.1"]},
    "edge": None,
}
STATE = {
    "phase": "done",
    "rung": 1,
    "rungs": [{"keep": 2, "steps": 8}],
    "trials": 2,
    "eta": 2,
    "tuning_seeds": [1000000, 1000001],
    "max_steps": 8,
    "equal_budget": True,
    "notes": [],
    "groups": [GROUP],
    "runs": [],
}


def tuned_store(tmp_path, state: dict, name: str = "t"):
    """Two groups of two seeds and a tuned sweep's record over them, with ``state`` as its
    ``tuning`` (as normbench.sweeps.tuned writes it, or crafted)."""
    runs = tmp_path / "runs"
    ids = [
        make_run(runs, [f"norm={norm}", f"seed={seed}"], acc=acc + 0.01 * seed)
        for norm, acc in (("layernorm", 0.8), ("batchnorm", 0.7))
        for seed in range(2)
    ]
    (runs / "sweeps").mkdir(exist_ok=True)
    record = {"name": name, "started": "2026-01-01T00:00:00", "runs": [{"run_id": i} for i in ids]}
    (runs / "sweeps" / f"{name}-20260101-000000.json").write_text(
        json.dumps({**record, "tuning": state})
    )
    return runs


# ------------------------------------------------ 3. formula injection in the tuning table
def test_the_tuning_csv_defuses_formulas_from_a_crafted_record(tmp_path):
    crafted = {
        **GROUP,
        "group": '=HYPERLINK("http://evil.example","x")',
        "metric": "=1+1",
        "runner_up": "@SUM(A1)",
        "keys": ["+cmd"],
    }
    runs = tuned_store(tmp_path, {**STATE, "groups": [crafted]})
    out = invoke(
        "report", "--sweep", "t", "--runs-dir", str(runs), "--format", "csv", "--table", "tuning"
    )
    assert out.exit_code == 0, out.output
    (row,) = csv.DictReader(io.StringIO(out.stdout))
    assert row["group"] == "'" + crafted["group"]
    assert row["metric"] == "'=1+1" and row["runner_up"] == "'@SUM(A1)"
    assert row["tuned"] == "'+cmd"
    assert row["val_gap"] == "0.1" and row["steps"] == "16"  # numbers stay numbers
    written = tmp_path / "report.csv"  # and the file written beside the report's tables
    out = invoke(
        "report", "--sweep", "t", "--runs-dir", str(runs), "--format", "csv", "--out", str(written)
    )
    assert out.exit_code == 0, out.output
    assert "'=HYPERLINK" in (tmp_path / "report-tuning.csv").read_text()


# ------------------------------------------------ 9. a hostile tuning section of a record
HOSTILE = [
    None,
    True,
    False,
    0,
    -1,
    5,
    10**400,
    -(10**400),
    10**20,
    1e308,
    -1e308,
    0.5,
    "",
    "x",
    "=1+1",
    "\x1b[31mred",
    "a" * 10_000,
    "NaN",
    "Infinity",
    [],
    [None],
    [10**400],
    [5, "x", None],
    ["=1+1"],
    [[1, 2]],
    [{}],
    [{"keep": 10**400, "steps": -1}],
    [{"keep": True, "steps": 2}],
    {},
    {"a": 10**400},
    {"=1+1": [1]},
    {"keep": 2, "steps": 8},
    [GROUP, 5],
    [{**GROUP, "chosen": []}],
]
STATE_FIELDS = list(STATE)
GROUP_FIELDS = list(GROUP)


def render(section: tuning.Tuning) -> None:
    """Every output of the section, as each --format writes it."""
    section.markdown(), section.html(), section.caption(), section.keys
    json.dumps(section.json())
    tuning.csv(section)
    Console(file=io.StringIO(), width=100).print(section.rich())


@pytest.mark.parametrize("field", STATE_FIELDS)
def test_every_field_of_the_tuning_section_is_checked(field):
    for value in HOSTILE:
        section = tuning.parse("t", {**STATE, field: value})
        render(section)
        assert section.phase in ("tuning", "confirmation", "done")
        assert all(isinstance(s, int) for s in section.tuning_seeds)


@pytest.mark.parametrize("field", GROUP_FIELDS)
def test_every_field_of_a_group_is_checked(field):
    for value in HOSTILE:
        section = tuning.parse("t", {**STATE, "groups": [{**GROUP, field: value}]})
        render(section)
        assert len(section.table) == 1 or any("malformed" in n for n in section.notes)
        numbers = section.table[["val_chosen", "val_gap", "regret_bound"]].astype(float)
        assert not numbers.isin([float("inf"), float("-inf")]).any().any()
        assert section.table["tried"].map(lambda t: isinstance(t, str) and len(t) < 5000).all()


@pytest.mark.parametrize("fmt", ["rich", "csv", "markdown", "json"])
def test_a_hostile_tuning_section_is_a_note_in_every_format(tmp_path, fmt):
    state = {**STATE, "tuning_seeds": 5, "groups": [{**GROUP, "gap": 10**400}, 7]}
    runs = tuned_store(tmp_path, state)
    table = ["--table", "tuning"] if fmt == "csv" else []
    out = invoke("report", "--sweep", "t", "--runs-dir", str(runs), "--format", fmt, *table)
    assert out.exit_code == 0, out.output
    assert "tuning.tuning_seeds is malformed" in out.output
    assert "a malformed group in the sweep record was left out" in out.output


# ------------------------------------------------ 16. an unreadable record is said so
def test_a_sweep_whose_only_record_is_unreadable_is_named_unreadable(tmp_path):
    runs = tuned_store(tmp_path, STATE)
    path = runs / "sweeps" / "t-20260101-000000.json"
    path.write_text('{"runs": 3')
    out = invoke("report", "--sweep", "t", "--runs-dir", str(runs))
    one_line(out, "--sweep t", "cannot be read", path.name)
    assert "no such sweep" not in out.output


# ------------------------------------------------ 17. a sweep named twice
def test_a_sweep_named_twice_is_refused_as_a_duplicate(tmp_path):
    runs = tuned_store(tmp_path, STATE)
    out = invoke("report", "--sweep", "t,t", "--runs-dir", str(runs))
    one_line(out, "--sweep", "t,t", "more than once", "each sweep once")
    assert "both tuned" not in out.output


# ------------------------------------------------ 12. glob() in a tuned key
def test_glob_in_a_tuned_key_is_one_line(tmp_path):
    out = invoke(
        "sweep",
        "--tune",
        "train.lr=glob(*)",
        "model=cnn",
        "--dry-run",
        "--runs-dir",
        str(tmp_path / "runs"),
    )
    one_line(out, "--tune train.lr=glob(*)", "glob()", "interval(LOW,HIGH)")
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------ 14. a tune with no key; the preset's tune:
@pytest.mark.parametrize("given", ["=", "=1,2"])
def test_a_tune_that_names_no_key_says_so(tmp_path, given):
    out = invoke(
        "sweep", "--tune", given, "model=cnn", "--dry-run", "--runs-dir", str(tmp_path / "runs")
    )
    one_line(out, "--tune", given, "names no key", "KEY=v1,v2")


@pytest.mark.parametrize(
    "tune, words",
    [
        ("train.lr: 0.001", ["tune: train.lr=0.001", "at least two values"]),
        ("seed: [1, 2]", ["tune: seed", "not tunable"]),
        ("train.lr: glob(*)", ["tune: train.lr=glob(*)", "glob()"]),
        ("train.lr: interval(2,1)", ["tune: train.lr=interval(2,1)", "LOW < HIGH"]),
    ],
)
def test_an_error_in_a_presets_tune_names_the_presets_key(tmp_path, tune, words):
    preset = tmp_path / "mine.yaml"
    preset.write_text(f"version: 1\nparams:\n  model: cnn\ntune:\n  {tune}\n")
    out = invoke("sweep", str(preset), "--dry-run", "--runs-dir", str(tmp_path / "runs"))
    one_line(out, f"sweep preset {preset}, tune:", *words)
    assert "--tune" not in out.output


# ------------------------------------------------ 10. keys the optimizer ignores: one run
TINY_RUN = [
    "model=cnn",
    "data=digits",
    "model.width=8",
    "model.depth=1",
    "train.max_steps=20",
    "train.eval_every=10",
    "threads=1",
    "device=cpu",
]


def test_adamw_runs_differing_only_in_muon_keys_are_one_run(tmp_path):
    runs = tmp_path / "runs"
    first = invoke("run", *TINY_RUN, "--runs-dir", str(runs))
    assert first.exit_code == 0, first.output
    (made,) = [p.name for p in runs.iterdir() if p.name.startswith("cnn-")]
    again = invoke(
        "run",
        *TINY_RUN,
        "train.muon_lr=0.5",
        "train.muon_momentum=0.5",
        "train.momentum=0.1",
        "--runs-dir",
        str(runs),
    )
    assert again.exit_code == 0, again.output
    assert [p.name for p in runs.iterdir() if p.name.startswith("cnn-")] == [made]
    config = (runs / made / "config.yaml").read_text()
    assert "muon_lr: null" in config and "momentum: null" in config


# ------------------------------------------------ 20. an edit that keeps mtime and size
def test_an_edit_of_equal_size_with_its_mtime_set_back_is_read(tmp_path):
    runs = tmp_path / "runs"
    rid = make_run(runs, ["norm=batchnorm", "seed=0"], acc=0.8)
    make_run(runs, ["norm=batchnorm", "seed=1"], acc=0.9)

    def values() -> list:
        out = invoke("report", "--runs-dir", str(runs), "--format", "json")
        assert out.exit_code == 0, out.output
        return json.loads(out.stdout)["convergence"][0]["values"]

    assert values() == [0.8, 0.9]  # and the index holds both rows
    meta = runs / rid / "meta.json"
    before = meta.stat()
    time.sleep(0.05)  # past the filesystem's coarse clock, which stamps ctime
    text = meta.read_text()
    edited = text.replace('"final_val_acc": 0.8,', '"final_val_acc": 0.2,')
    assert edited != text and len(edited) == len(text)
    with open(meta, "r+") as handle:  # in place: the same inode
        handle.write(edited)
    os.utime(meta, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = meta.stat()
    assert (after.st_mtime_ns, after.st_size, after.st_ino) == (
        before.st_mtime_ns,
        before.st_size,
        before.st_ino,
    )
    assert values() == [0.2, 0.9]


# ------------------------------------------------ 11. a kernel the conv models cannot use
@pytest.mark.parametrize(
    "overrides, words",
    [
        (["model=cnn", "model.kernel_size=4"], ["must be odd", "valid: 1, 3, 5, ..., 79"]),
        (["model=resnet", "model.kernel_size=2"], ["must be odd", "model=resnet"]),
        (
            ["model=cnn", "data=digits", "model.kernel_size=17"],
            ["wider than the input [8, 8]", "valid: 1, 3, 5, 7, 9, 11, 13, 15"],
        ),
        (["model=resnet", "model.kernel_size=81"], ["wider than the input [40]", "79"]),
    ],
)
def test_a_kernel_size_the_conv_models_cannot_use_is_refused_up_front(tmp_path, overrides, words):
    runs = tmp_path / "runs"
    out = invoke("run", *overrides, "--runs-dir", str(runs))
    one_line(out, f"model.kernel_size={overrides[-1].split('=')[1]}", *words)
    assert not runs.exists()


def test_odd_kernels_within_the_input_still_compose():
    for overrides in (
        ["model=cnn", "model.kernel_size=79"],
        ["data=digits", "model=resnet", "model.kernel_size=15"],
    ):
        out = invoke("run", *overrides, "--cfg")
        assert out.exit_code == 0, out.output


# ------------------------------------------------ 19. an alias is named as typed
def test_an_error_names_the_placement_as_typed_not_its_alias(tmp_path):
    out = invoke("run", "model=resnet", "placement=peri", "--runs-dir", str(tmp_path / "r"))
    one_line(out, "placement=peri (peri is placement=sandwich) has no meaning", "post, pre")
    out = invoke("run", "model=resnet", "placement=sandwich", "--runs-dir", str(tmp_path / "r"))
    one_line(out, "placement=sandwich has no meaning")
    assert "peri" not in out.output

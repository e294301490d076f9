"""A ladder sweep's report (issue 62): a verdict per rung, sections titled by the rung, the
reference the ladder lists first by default, and a record's own reference or a stopped ladder
said as what they are. Runs written with chosen numbers (tests.helpers.make_run) and the
record written by normbench.store.sweep_record.write, then `normbench report` itself."""

from __future__ import annotations

import json
from datetime import datetime

from helpers import make_run
from typer.testing import CliRunner

from normbench.cli import app
from normbench.report.tuning import ladder_choices
from normbench.store import sweep_record

runner = CliRunner()


def ladder_store(tmp_path, steps: dict[int, int], record_parts: dict | None = None):
    """A width ladder of the CNN: LayerNorm (listed first) and BatchNorm at each width of
    ``steps`` (width: its train.max_steps), three seeds; the wider rung clearly better, so
    that one table over every rung would rank all its groups above the narrow rung's."""
    runs = tmp_path / "runs"
    entries = []
    for width, max_steps in steps.items():
        for norm, shift in (("layernorm", 0.0), ("batchnorm", 0.02)):
            for seed in range(3):
                overrides = [
                    f"norm={norm}",
                    f"seed={seed}",
                    f"model.width={width}",
                    f"train.max_steps={max_steps}",
                ]
                acc = 0.5 + width / 100 + shift + 0.005 * seed
                loss = {"final_val_loss": 2.0 - acc, "test_loss": 2.0 - acc}
                rid = make_run(runs, overrides, acc=acc, test_acc=acc, summary_extra=loss)
                entries.append({"run_id": rid, "overrides": overrides})
    ladder = {
        "key": "model.width",
        "values": [str(w) for w in steps],
        "rungs": [{"value": str(w), "steps": s, "done": True} for w, s in steps.items()],
    }
    sweep_record.write(
        "lad",
        None,
        ["norm", "seed"],
        entries,
        runs,
        "local",
        datetime.now(),
        ["normbench", "sweep", "--ladder", "model.width=..."],
        {"ladder": ladder, **(record_parts or {})},
    )
    return runs


def report_json(runs, *extra: str) -> dict:
    args = ["report", "--sweep", "lad", "--runs-dir", str(runs), "--format", "json", *extra]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_ladder_at_fixed_steps_has_a_verdict_per_rung(tmp_path):
    """Every rung at train.max_steps=30: one section (so one verdict table) per width, each
    group judged against a group of its own width, never a width-8 group against width 4."""
    runs = ladder_store(tmp_path, {4: 30, 8: 30})
    payload = report_json(runs)
    assert [s["setting"] for s in payload["sections"]] == [{"model.width": 4}, {"model.width": 8}]
    rows = payload["convergence"]
    assert len(rows) == 4
    for width in (4, 8):
        of_rung = [row for row in rows if row["model.width"] == width]
        assert len(of_rung) == 2, rows
        assert sum(row["verdict"] == "reference" for row in of_rung) == 1, of_rung


def test_a_ladder_section_is_titled_by_its_rung_not_its_steps(tmp_path):
    """A budget rule gives each rung its own steps (width 8: 40, width 16: 20): the sections
    are the rungs, smallest first (16 sorts before 8 as text), titled model.width=..."""
    runs = ladder_store(tmp_path, {8: 40, 16: 20})
    payload = report_json(runs)
    assert [s["setting"] for s in payload["sections"]] == [
        {"model.width": 8},
        {"model.width": 16},
    ]
    assert [s["fixed"]["train.max_steps"] for s in payload["sections"]] == [40, 20]
    text = runner.invoke(app, ["report", "--sweep", "lad", "--runs-dir", str(runs)]).output
    assert "== model.width=8 ==" in text and "== model.width=16 ==" in text, text
    assert "== train.max_steps" not in text
    assert text.index("== model.width=8 ==") < text.index("== model.width=16 ==")


def test_a_ladder_without_a_reference_compares_with_the_group_it_lists_first(tmp_path):
    """LayerNorm is listed first (as ladder_lm's preset lists it), BatchNorm is better and
    first by name: every rung's verdicts are against LayerNorm, and a note says so."""
    runs = ladder_store(tmp_path, {4: 30, 8: 30})
    result = runner.invoke(
        app, ["report", "--sweep", "lad", "--runs-dir", str(runs), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["method"]["reference"] == "norm=layernorm"
    references = [row for row in payload["convergence"] if row["verdict"] == "reference"]
    assert [(row["norm.name"], row["model.width"]) for row in references] == [
        ("layernorm", 4),
        ("layernorm", 8),
    ]
    assert "the group the ladder lists first" in result.stderr
    named = report_json(runs, "--reference", "norm=batchnorm")  # a named one wins
    assert named["method"]["reference"] == "norm=batchnorm"


def test_a_recorded_reference_that_names_no_group_is_said_to_come_from_the_record(tmp_path):
    runs = ladder_store(tmp_path, {4: 30, 8: 30}, {"reference": ["norm=nonorm"]})
    result = runner.invoke(app, ["report", "--sweep", "lad", "--runs-dir", str(runs)])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("normbench: error: --sweep lad: its recorded reference norm=nonorm "), (
        line
    )
    assert "matches no group; valid: norm=batchnorm | norm=layernorm" in line


def test_a_tuned_ladder_stopped_in_a_rung_says_so_instead_of_an_empty_table(tmp_path):
    """Stopped in width 8's tuning phase (width 4 done, its choice recorded): no table of no
    rows, and the per-rung line says which rung was not chosen yet and which not reached."""
    ladder = {
        "key": "model.width",
        "values": ["4", "8", "16"],
        "rungs": [
            {"value": "4", "done": True, "tuned": True, "chosen": {"norm=layernorm": {"lr": 1}}},
            {"value": "8", "done": None, "tuned": True, "chosen": None},
            {"value": "16", "done": None, "tuned": True, "chosen": None},
        ],
    }
    tuning = {"phase": "tuning", "groups": [], "runs": [], "tuning_seeds": [1000000]}
    runs = ladder_store(tmp_path, {4: 30}, {"ladder": ladder, "tuning": tuning})
    result = runner.invoke(app, ["report", "--sweep", "lad", "--runs-dir", str(runs)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "tuned: lad: no table: the sweep stopped in its tuning phase" in text, text
    assert "group trials steps" not in text
    assert "the ladder stopped at model.width=8, the table's rung" in text
    assert "norm=layernorm 1, not chosen yet, not reached" in text


def test_the_rung_a_ladder_stopped_in_shows_the_choice_its_table_shows():
    """Stopped in width 32's confirmation: the table holds its choices, which the record's
    rungs do not yet (a rung's choice is written once the rung is done): the sentence gives
    them too, never a '-' under a value shown above it."""
    ladder = {
        "key": "model.width",
        "rungs": [
            {"value": "16", "done": True, "chosen": {"norm=a": {"train.lr": "0.03"}}},
            {"value": "32", "done": None, "chosen": None},
            {"value": "64", "done": None, "chosen": None},
        ],
    }
    (line,) = ladder_choices(ladder, {"norm=a": "0.01"})
    assert line == (
        "Chosen per rung (model.width 16, 32, 64; the ladder stopped at model.width=32, the "
        "table's rung): norm=a 0.03, 0.01, not reached"
    )


def test_a_ladder_report_by_a_group_name_and_narrowed_to_one_group_still_reports(tmp_path):
    """``--by norm`` reached the scaling section as ``norm``, not its column ``norm.name`` (a
    KeyError); a filter leaving one norm leaves the default reference nothing to name (the
    report's own default then, never an error about a reference nobody typed)."""
    runs = ladder_store(tmp_path, {4: 30, 8: 30, 16: 30})
    by_norm = report_json(runs, "--by", "norm")
    assert by_norm["method"]["reference"] == "norm=layernorm"
    assert len(by_norm["sections"]) == 3
    one_norm = report_json(runs, "norm=layernorm")  # the very group it lists first
    assert one_norm["method"]["reference"] is None
    assert [s["setting"] for s in one_norm["sections"]] == [
        {"model.width": width} for width in (4, 8, 16)
    ]

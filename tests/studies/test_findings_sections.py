"""`normbench findings --study`: a document regenerated study by study. The named studies train
and their sections are rewritten, dated; every other section of the document stays as it was,
word for word, so that a section's numbers always come from the runs its own line names."""

from __future__ import annotations

import io

from rich.console import Console
from typer.testing import CliRunner

from normbench.cli import app
from normbench.studies import findings
from normbench.studies.study import Context, Study
from tests.studies.test_findings_progress import InstantPool

ALPHA = Study("alpha", ["model=cnn", "norm=batchnorm"], [])
BETA = Study("beta", ["model=cnn", "norm=groupnorm"], [])
CALLS: list[str] = []


def alpha_section(ctx: Context) -> str:
    CALLS.append("alpha")
    return f"## Alpha\n\nalpha body {len(CALLS)}"


def beta_section(ctx: Context) -> str:
    CALLS.append("beta")
    return f"## Beta\n\nbeta body {len(CALLS)}"


def both_section(ctx: Context) -> str:
    CALLS.append("both")
    return f"## Both\n\nboth body {len(CALLS)}"


def designed(monkeypatch) -> None:
    """Two studies and three sections: one reads alpha, one beta, one both."""
    CALLS.clear()
    monkeypatch.setattr(findings, "STUDIES", (ALPHA, BETA))
    monkeypatch.setattr(
        findings,
        "SECTIONS",
        (
            (alpha_section, ("alpha",)),
            (beta_section, ("beta",)),
            (both_section, ("alpha", "beta")),
        ),
    )
    monkeypatch.setattr(findings, "LocalLauncher", InstantPool)


def write(tmp_path, only=()) -> str:
    out = tmp_path / "docs" / "findings.md"
    console = Console(file=io.StringIO(), width=200)
    assert findings.write(tmp_path / "runs", out, 1, "smoke", console, only)
    return out.read_text()


def test_a_study_rewrites_its_sections_and_keeps_the_others_word_for_word(tmp_path, monkeypatch):
    designed(monkeypatch)
    first = write(tmp_path)
    assert CALLS == ["alpha", "beta", "both"]
    assert "alpha body 1" in first and "beta body 2" in first and "both body 3" in first
    assert first.count("*Section generated on ") == 3
    assert "`normbench findings --smoke --study alpha --study beta`" in first

    second = write(tmp_path, only=("beta",))
    assert CALLS[3:] == ["beta"]  # alpha's and both's sections are not recomputed
    assert "beta body 4" in second and "beta body 2" not in second
    kept = [line for line in first.splitlines() if "alpha body" in line or "both body" in line]
    assert kept == [line for line in second.splitlines() if "body 1" in line or "body 3" in line]
    for key in ("alpha_section", "beta_section", "both_section"):
        assert second.count(findings.marker(f"test_findings_sections.{key}")) == 1
    assert second.index("## Alpha") < second.index("## Beta") < second.index("## Both")


def test_a_section_never_written_says_which_studies_compute_it(tmp_path, monkeypatch):
    designed(monkeypatch)
    text = write(tmp_path, only=("alpha",))
    assert "alpha body 1" in text and "beta body" not in text
    assert "Not computed yet: `normbench findings --smoke --study beta` computes it." in text
    assert "## The beta study, not computed\n" in text  # its heading names it, not a code key
    assert "## The alpha, beta studies, not computed\n" in text
    assert "`normbench findings --smoke --study alpha --study beta` computes it." in text


def test_an_unknown_study_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "findings.md"
    result = CliRunner().invoke(
        app, ["findings", "--study", "sweet", "--runs-dir", str(runs), "--out", str(out)]
    )
    assert result.exit_code == 2
    line = result.output.strip()
    valid = ", ".join(findings.study_names())
    assert f"--study sweet: no such study; valid: {valid}" in line and "placement" in valid
    assert "\n" not in line and "Traceback" not in result.output
    assert not runs.exists() and not out.exists()


def test_a_study_trained_twice_counts_both_sweeps_and_a_record_never_finished_none(tmp_path):
    import json

    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    times = [("00:00", "00:20"), ("01:00", "01:10"), ("02:00", None)]
    for index, (start, end) in enumerate(times):
        record = {"runs": [], "started": f"2026-01-01T{start}:00+00:00"}
        if end:
            record["finished"] = f"2026-01-01T{end}:00+00:00"
        (sweeps / f"findings-dyt-2026010{index}-000000-abc.json").write_text(json.dumps(record))
    assert findings.training_walls(tmp_path) == {"dyt": 30 * 60.0}


def test_the_header_sums_the_training_time_its_sections_state(tmp_path, monkeypatch):
    import json

    designed(monkeypatch)
    assert findings.total_text({}) == "no section states a training time"
    sweeps = tmp_path / "runs" / "sweeps"
    sweeps.mkdir(parents=True)
    for name, end in (("alpha", "00:20"), ("beta", "01:40")):  # 20 and 100 minutes
        record = {"runs": [], "started": "2026-01-01T00:00:00+00:00"}
        record["finished"] = f"2026-01-01T{end}:00+00:00"
        (sweeps / f"findings-{name}-20260101-000000-abc.json").write_text(json.dumps(record))
    header = write(tmp_path).split("<!--")[0]  # both_section reads both: each counts once
    assert "(120 min in all: the training each section states, over 2 studies;" in header
    # alpha rewritten from another run store, which holds no record of beta: beta's kept
    # section still states its 100 minutes, the kept section of both its 20 and 100, and the
    # header counts each training once (alpha's new one took 0 min)
    out = tmp_path / "docs" / "findings.md"
    console = Console(file=io.StringIO(), width=200)
    assert findings.write(tmp_path / "elsewhere", out, 1, "smoke", console, ("alpha",))
    header = out.read_text().split("<!--")[0]
    assert "(120 min in all: the training each section states, over 2 studies;" in header
    assert "--smoke --study alpha`, trained in 0 min)" in out.read_text()


def test_stated_walls_read_each_sections_first_line():
    line = "*Section generated on 2026-12-07 by normbench 0.6.0 (`{}`{}).*"
    sections = [
        "## A\n\n"
        + line.format("normbench findings --study x --study y", ", trained in 3 min + 4 min"),
        "## B\n\n" + line.format("normbench findings --smoke --study x", ", trained in 3 min"),
        "## C\n\n" + line.format("normbench findings --study z", ""),  # no time: none counted
        "## D\n\nNot computed yet.",
    ]
    assert findings.stated_walls(sections) == {("x", 180.0), ("y", 240.0)}
    assert findings.total_text({("x", 180.0)}).startswith("3 min in all: the training each ")
    assert "over 1 study;" in findings.total_text({("x", 180.0), ("x", 60.0)})


def test_a_kept_section_is_named_with_the_command_that_rewrites_it(tmp_path, monkeypatch):
    designed(monkeypatch)
    out = io.StringIO()
    findings.write(
        tmp_path / "runs", tmp_path / "f.md", 1, "smoke", Console(file=out, width=300), ("beta",)
    )
    assert (
        "kept section test_findings_sections.alpha_section as it was "
        "(`normbench findings --smoke --study alpha` rewrites it)" in out.getvalue()
    )

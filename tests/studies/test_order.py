"""Registration before runs (normbench.studies.order, family.labelled): a claim registered after
the earliest run it reads is refused a label, on a designed git history (a temporary repository
with commits at chosen dates) and a designed store (runs with chosen meta.json start times)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from normbench.cli.app import app
from normbench.store.rundir import RunDir
from normbench.studies import family, order, pilots, registry
from normbench.studies.study import load
from tests.helpers import make_run

CLAIM = """\
source: a designed paper
says: RMSNorm trains better than LayerNorm.
study: toy
metric: accuracy
margin: 0.01
comparisons:
  - name: RMSNorm against LayerNorm
    group: [norm.name=rmsnorm]
    reference: [norm.name=layernorm]
    predicted: better
power: {effect: 2.0, basis: designed, target: 0.8}
seeds: 5
"""


def git(repo: Path, *args: str, when: str | None = None) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
    }
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    if when:
        env.update(GIT_AUTHOR_DATE=when, GIT_COMMITTER_DATE=when)
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def registered_at(tmp_path: Path, when: str, name: str = "toy-claim") -> Path:
    """A repository whose one claim file, ``name``.yaml, was committed at ``when``; its
    folder."""
    repo = tmp_path / "repo"
    folder = repo / "registered"
    folder.mkdir(parents=True)
    git(repo, "init", "-q")
    (folder / f"{name}.yaml").write_text(CLAIM)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "register", when=when)
    registry.claims.cache_clear()
    return folder


def store_started_at(tmp_path: Path, when: str, study: str = "toy", digest=None) -> Path:
    """Five seeds of RMSNorm well above LayerNorm, every run started at ``when``, recorded as
    the sweep findings-<study> (with the claims' hashes ``digest`` when given)."""
    runs = tmp_path / "runs"
    ids = []
    for seed in range(5):
        for norm, acc in (("rmsnorm", 0.90 + 0.01 * seed), ("layernorm", 0.70 + 0.012 * seed)):
            rid = make_run(runs, [f"norm={norm}", f"seed={seed}"], acc=acc)
            meta_path = RunDir(runs, rid).meta_path
            meta = json.loads(meta_path.read_text())
            RunDir(runs, rid).write_meta({**meta, "started": when})
            ids.append(rid)
    record = {"name": f"findings-{study}", "started": when, "finished": when, "command": []}
    record.update(runs=[{"run_id": i, "overrides": []} for i in ids], counts={}, axes={})
    if digest is not None:
        record["claims"] = digest
    (runs / "sweeps").mkdir()
    (runs / "sweeps" / f"findings-{study}-20260101-000000-abc123.json").write_text(
        json.dumps(record)
    )
    return runs


def test_a_claim_registered_before_its_runs_is_labelled(tmp_path):
    folder = registered_at(tmp_path, "2026-01-01T00:00:00+00:00")
    runs = store_started_at(tmp_path, "2026-02-01T00:00:00+00:00")
    claim = registry.claim("toy-claim", folder)
    text = family.claim_lines(claim, load(runs, "toy").runs)
    assert text.startswith("**Reproduced.**"), text
    assert "registered at" in text and "2026-01-01T00:00" in text
    assert "runs from 2026-02-01T00:00+00:00 to 2026-02-01T00:00+00:00" in text
    assert order.problems(runs, folder) == []


def test_a_claim_registered_after_a_pilot_says_so_and_is_no_reproduction(tmp_path):
    # issue 58: three claims were written after pilots of the same design had shown the
    # outcome, and were labelled Reproduced like the others
    folder = registered_at(tmp_path, "2026-01-01T00:00:00+00:00", "notes-layernorm-residual")
    runs = store_started_at(tmp_path, "2026-02-01T00:00:00+00:00")
    claim = registry.claim("notes-layernorm-residual", folder)
    text = family.claim_lines(claim, load(runs, "toy").runs)
    assert text.startswith("**Pilot confirmed.**") and "Reproduced" not in text, text
    said = text[text.index("Registered after a pilot of the same design (") :]
    assert pilots.pilot_of("notes-layernorm-residual") in said
    assert "error rates above hold for them" in said
    assert "not an independent reproduction of the claim" in said


def test_every_claim_whose_power_rests_on_a_project_pilot_is_listed_as_piloted():
    cited = {
        claim.id
        for claim in registry.claims().values()
        if "the project's exploratory" in claim.basis
    }
    # listed need not cite: the devices claims were written after a look at seed 0 of their
    # design, their power resting on other studies
    assert cited <= set(pilots.PILOTS), cited - set(pilots.PILOTS)


def test_a_claim_registered_after_its_runs_is_refused_a_label(tmp_path):
    folder = registered_at(tmp_path, "2026-03-01T00:00:00+00:00")
    runs = store_started_at(tmp_path, "2026-02-01T00:00:00+00:00")
    claim = registry.claim("toy-claim", folder)
    text = family.claim_lines(claim, load(runs, "toy").runs)
    assert text.startswith("**Exploratory.**"), text
    assert not any(word in text for word in ("Reproduced", "Inconclusive"))
    (line,) = order.problems(runs, folder)
    assert line.startswith("toy-claim: registered at") and "not registered before" in line


def test_an_uncommitted_edit_is_no_registration(tmp_path):
    folder = registered_at(tmp_path, "2026-01-01T00:00:00+00:00")
    runs = store_started_at(tmp_path, "2026-02-01T00:00:00+00:00")
    path = folder / "toy-claim.yaml"
    path.write_text(CLAIM.replace("margin: 0.01", "margin: 0.02"))
    registry.claims.cache_clear()
    assert registry.registration(path).why == "uncommitted changes to its file"
    (line,) = order.problems(runs, folder)
    assert "not registered (uncommitted changes to its file)" in line


def test_a_claim_changed_since_its_sweep_started_is_named(tmp_path):
    folder = registered_at(tmp_path, "2026-01-01T00:00:00+00:00")
    runs = store_started_at(tmp_path, "2026-02-01T00:00:00+00:00", digest={"toy-claim": "0" * 16})
    (line,) = order.problems(runs, folder)
    assert line.startswith("toy-claim: changed since its sweep started")


def test_findings_check_refuses_this_repository_claims_on_runs_that_predate_them(tmp_path):
    # xiong-warmup reads the placement study: runs started in 2020 predate its registration
    runs = store_started_at(tmp_path, "2020-01-01T00:00:00+00:00", study="placement")
    registry.claims.cache_clear()
    result = CliRunner().invoke(app, ["findings", "--check", "--runs-dir", str(runs)])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("xiong-warmup: "), lines


def test_a_claim_missing_from_its_sweeps_recorded_claims_is_named(tmp_path):
    folder = registered_at(tmp_path, "2026-01-01T00:00:00+00:00")
    runs = store_started_at(tmp_path, "2026-02-01T00:00:00+00:00", digest={})
    (line,) = order.problems(runs, folder)
    assert line == "toy-claim: not among the claims its sweep recorded when it started"


def test_findings_check_says_when_it_checked_nothing_and_refuses_a_runs_dir_that_is_not_one(
    tmp_path,
):
    """A store with no study's runs passes, saying it checked none; a missing directory or a
    file is refused in one line, as every command refuses it."""
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(app, ["findings", "--check", "--runs-dir", str(tmp_path / "empty")])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("0 of ") and "nothing to check" in result.output
    (tmp_path / "afile").write_text("x")
    for where, says in (("afile", "a file, not a directory"), ("absent", "does not exist")):
        out = CliRunner().invoke(app, ["findings", "--check", "--runs-dir", str(tmp_path / where)])
        assert out.exit_code == 2 and out.output.count("\n") == 1 and says in out.output, out.output


def test_a_claim_registered_after_its_tuning_runs_is_named(tmp_path):
    """Registered between the tuning that chose its values and the confirmation runs: the
    check names it (the confirmation runs alone would pass it)."""
    folder = registered_at(tmp_path, "2026-01-15T00:00:00+00:00")
    runs = store_started_at(tmp_path, "2026-02-01T00:00:00+00:00")
    tuning = make_run(runs, ["norm=rmsnorm", "seed=1000000"], acc=0.9)
    meta = json.loads(RunDir(runs, tuning).meta_path.read_text())
    RunDir(runs, tuning).write_meta({**meta, "started": "2026-01-01T00:00:00+00:00"})
    (path,) = (runs / "sweeps").glob("*.json")
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "tuning": {"runs": [tuning]}}))
    (line,) = order.problems(runs, folder)
    assert line.startswith("toy-claim: registered at") and "tuning runs" in line
    assert "began 2026-01-01T00:00:00+00:00" in line
    path.write_text(json.dumps(record))  # without the tuning phase: nothing to name
    assert order.problems(runs, folder) == []


def check_cli(runs: Path):
    registry.claims.cache_clear()
    return CliRunner().invoke(app, ["findings", "--check", "--runs-dir", str(runs)])


def test_findings_check_fails_on_a_study_record_it_cannot_read(tmp_path):
    """The placement study's runs are there, its record truncated: the claims that read it
    cannot be checked, which is a failure in one line each, never "nothing to check"."""
    runs = store_started_at(tmp_path, "2020-01-01T00:00:00+00:00", study="placement")
    (path,) = (runs / "sweeps").glob("*.json")
    path.write_text(path.read_text()[:50])
    result = check_cli(runs)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("xiong-warmup: its study's sweep record"), lines
    assert "cannot be checked" in lines[0] and "nothing to check" not in result.output


@pytest.mark.parametrize("claims", ["not a mapping", ["toy-claim"], {"toy-claim": 5}, None])
def test_a_malformed_claims_part_is_a_problem_not_a_pass(tmp_path, claims):
    folder = registered_at(tmp_path, "2026-01-01T00:00:00+00:00")
    runs = store_started_at(tmp_path, "2026-02-01T00:00:00+00:00")
    (path,) = (runs / "sweeps").glob("*.json")
    path.write_text(json.dumps({**json.loads(path.read_text()), "claims": claims}))
    (line,) = order.problems(runs, folder)
    assert line.startswith("toy-claim: its sweep record's claims part is malformed"), line


def test_findings_check_counts_the_claims_whose_study_has_runs_and_the_runs(tmp_path):
    """A record whose runs are all gone checks nothing (it once counted as a claim checked);
    with its ten runs present, the line counts them."""
    now = datetime.now(UTC).isoformat(timespec="seconds")  # after every claim's commit
    runs = store_started_at(tmp_path, now, study="placement")
    with_runs = check_cli(runs)
    assert with_runs.exit_code == 0, with_runs.output
    assert " registered claims have runs in " in with_runs.output
    assert with_runs.output.startswith("1 of ") and "(10 runs)" in with_runs.output
    for run in runs.iterdir():
        if run.name != "sweeps" and not run.name.startswith("."):
            shutil.rmtree(run)
    without = check_cli(runs)
    assert without.exit_code == 0, without.output
    assert without.output.startswith("0 of ") and "nothing to check" in without.output

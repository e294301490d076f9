"""`normbench findings` says up front how many runs it will train, and each study's title how
many are left and, once some have trained, about how long."""

from __future__ import annotations

import io
from datetime import datetime

from rich.console import Console

from normbench.studies import findings
from normbench.studies.study import Study


class InstantPool:
    """A pool that 'trains' every run at once: the studies' bookkeeping without torch."""

    def __init__(self, *args):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def launch(self, todo, view):
        for job in todo:
            view.started(job.run_id)
            view.done(job.run_id, "complete")


def test_findings_counts_the_runs_first_and_the_time_left_per_study(tmp_path, monkeypatch):
    tiny = Study("tiny", ["model=cnn", "norm=batchnorm,groupnorm"], [])
    studies = (tiny, tiny)  # the second finds every run complete
    monkeypatch.setattr(findings, "STUDIES", studies)
    monkeypatch.setattr(findings, "LocalLauncher", InstantPool)
    out = io.StringIO()
    findings.run_studies(tmp_path / "runs", 1, "smoke", Console(file=out, width=200))
    lines = out.getvalue().splitlines()
    first, second = studies
    assert lines[0].startswith("findings (smoke): 2 studies, ")
    total = int(lines[0].split(", ")[-1].removesuffix(" to train"))
    assert f"study {first.name} (1 of 2; {total} runs left)" in lines
    assert any(
        line.startswith(f"study {second.name} (2 of 2; ") and "min)" in line for line in lines
    )


def test_a_tuned_study_counts_its_runs_at_their_most_until_its_record_is_done(tmp_path):
    """The suite's confirmation runs sit at choices its tuning has not made: the count to
    train is its most (every candidate at 2 tuning seeds, an edge extended up to 3 steps per
    key, 11 confirmation seeds), less what its record has completed, and none once the record
    is done."""
    from normbench.store import sweep_record
    from normbench.store.rundir import Rerun
    from normbench.studies import suite
    from normbench.sweeps import tuned_plan

    request = findings.request_of(suite.SUITE, "full")
    grid, left, exact = findings.planned_of(request, tmp_path, Rerun())
    groups = len(grid.jobs) // 11
    assert not exact and len(grid.jobs) == 451
    most = len(grid.jobs) + groups * (4 + 2 * tuned_plan.MAX_EXTENSIONS) * 2  # 2 keys at most
    assert len(grid.jobs) + groups * 4 * 2 < left <= most
    for hour, counts, phase, expected in ((9, 100, "tuning", left - 100), (10, 877, "done", 0)):
        parts = {"counts": {"complete": counts}, "tuning": {"phase": phase}}
        started = datetime(2026, 12, 6, hour)
        sweep_record.write(grid.name, None, [], [], tmp_path, "local", started, [], parts)
        assert findings.planned_of(request, tmp_path, Rerun())[1] == expected
    # a record is untrusted: counts that are not numbers count as none completed
    parts = {"counts": {"complete": "many"}, "tuning": ["done"]}
    sweep_record.write(
        grid.name, None, [], [], tmp_path, "local", datetime(2026, 12, 6, 11), [], parts
    )
    assert findings.planned_of(request, tmp_path, Rerun())[1] == left

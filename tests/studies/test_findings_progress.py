"""`normbench findings` says up front how many runs it will train, and each study's title how
many are left and, once some have trained, about how long."""

from __future__ import annotations

import io

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


def test_a_tuned_study_counts_its_tuning_runs_at_their_most(tmp_path):
    """The suite trains its tuning runs before its confirmation runs: the opening line counts
    them as the design's most (halving and edges decide the rest as it goes), not as zero."""
    from normbench.store.rundir import Rerun
    from normbench.studies import suite

    request = findings.request_of(suite.SUITE, "full")
    grid, todo, most = findings.planned_of(request, tmp_path, Rerun())
    assert len(todo) == len(grid.jobs) == 451  # 41 groups at 11 seeds
    groups = len(grid.jobs) // 11
    # every group's candidates at 2 tuning seeds, one step beyond an edge per tuned key
    assert len(grid.jobs) + groups * 4 * 2 < most <= len(grid.jobs) + groups * (4 + 2) * 2

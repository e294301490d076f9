"""docs/notebook.md runs: its python cells, in order and in one namespace (IPython's magics
left out), on a small store as the README leaves it: the smoke sweep's runs (two norms at
batches 8 and 16, three seeds, with their sweep record) beside the README's first run."""

from __future__ import annotations

import json
import re
from pathlib import Path

from helpers import make_run, tiny

import normbench
from normbench.experiment.compose import compose
from normbench.training.run import run_experiment

NOTEBOOK = Path(normbench.__file__).resolve().parents[1] / "docs" / "notebook.md"
CELL = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def test_every_cell_of_the_notebook_runs(tmp_path, monkeypatch):
    runs_dir = tmp_path / "runs"
    smoke = []
    for norm in ("batchnorm", "groupnorm"):
        for batch in (8, 16):
            for seed in range(3):
                acc = 0.8 + 0.02 * seed - (0.1 if (norm, batch) == ("batchnorm", 8) else 0)
                overrides = [f"norm={norm}", f"batch_size={batch}", f"seed={seed}"]
                smoke.append(make_run(runs_dir, overrides, acc=acc))
    # the README's first run: another budget, so a section and a figure of its own if mixed in
    make_run(runs_dir, ["norm=batchnorm", "train.max_steps=300"], acc=0.96)
    # the diagnosed language model of "Activations per layer", trained (a few steps)
    run_experiment(compose(tiny("diagnostics=true", data="pysource")), runs_dir, progress=False)
    (runs_dir / "sweeps").mkdir()
    record = {"name": "smoke", "started": "2026-01-01T00:00:00+00:00"}
    (runs_dir / "sweeps" / "smoke-20260101-000000-abc.json").write_text(
        json.dumps({**record, "runs": [{"run_id": run_id} for run_id in smoke]})
    )
    monkeypatch.chdir(tmp_path)
    cells = CELL.findall(NOTEBOOK.read_text())
    assert len(cells) >= 5
    namespace: dict = {}
    for number, cell in enumerate(cells, 1):
        python = "\n".join(line for line in cell.splitlines() if not line.startswith("%"))
        exec(compile(python, f"{NOTEBOOK.name}, cell {number}", "exec"), namespace)
    assert len(namespace["runs"]) == 12
    assert (tmp_path / "learning_curves.png").stat().st_size > 10_000
    batch = namespace["batch"].set_index("norm.name")
    assert batch.loc["batchnorm", "verdict"] == "sensitive"
    last = namespace["last"]
    assert len(last) == 4 and last["sublayer_kurtosis"].notna().all()  # depth 2: 4 units
    assert last["attn_sink"].notna().tolist() == [True, False, True, False]


def test_the_intervals_the_notebook_names_are_the_reports(tmp_path):
    """The page's level for the drop's interval is the one the report computes (it said 95%
    of a 90% interval)."""
    from typer.testing import CliRunner

    from normbench.cli import app

    runs_dir = tmp_path / "runs"
    for norm in ("batchnorm", "groupnorm"):
        for batch in (8, 16):
            for seed in range(2):
                make_run(runs_dir, [f"norm={norm}", f"batch_size={batch}", f"seed={seed}"])
    stated = re.search(r"with its (\d+)% interval \(`drop_ci_low`", NOTEBOOK.read_text())
    assert stated, "the notebook no longer names the drop interval's level"
    result = CliRunner().invoke(app, ["report", str(runs_dir), "--format", "json"])
    assert result.exit_code == 0, result.output
    method = json.loads(result.stdout)["method"]
    assert (method["alpha"], method["ci_level"]) == (0.05, int(stated.group(1)) / 100)

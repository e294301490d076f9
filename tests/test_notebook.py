"""docs/notebook.md runs: its python cells, in order and in one namespace (IPython's magics
left out), on a small store of the smoke sweep's shape (two norms at batches 8 and 16, three
seeds)."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import make_run

import normbench

NOTEBOOK = Path(normbench.__file__).resolve().parents[1] / "docs" / "notebook.md"
CELL = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def test_every_cell_of_the_notebook_runs(tmp_path, monkeypatch):
    for norm in ("batchnorm", "groupnorm"):
        for batch in (8, 16):
            for seed in range(3):
                acc = 0.8 + 0.02 * seed - (0.1 if (norm, batch) == ("batchnorm", 8) else 0)
                make_run(
                    tmp_path / "runs",
                    [f"norm={norm}", f"batch_size={batch}", f"seed={seed}"],
                    acc=acc,
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

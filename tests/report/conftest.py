"""Fixtures the report's tests share."""

from __future__ import annotations

import pytest
from helpers import make_run


@pytest.fixture
def study(tmp_path):
    """BatchNorm at ghost batch 2 and 32, GroupNorm (batch-independent), three seeds each."""
    runs = tmp_path / "runs"
    numbers = {
        ("batchnorm", 2): ([0.80, 0.82, 0.84], [None, 300, None]),
        ("batchnorm", 32): ([0.90, 0.92, 0.94], [100, 200, 300]),
        ("groupnorm", 32): ([0.91, 0.91, 0.94], [200, 200, 400]),
    }
    for (norm, ghost), (accs, targets) in numbers.items():
        for seed, (acc, target) in enumerate(zip(accs, targets, strict=True)):
            make_run(
                runs,
                [f"norm={norm}", f"norm.ghost_batch={ghost}", f"seed={seed}"],
                acc=acc,
                test_acc=acc - 0.01,
                steps_to_target=target,
                auc=0.1 * (seed + 1),
            )
    return runs

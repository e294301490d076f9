"""Runs that differ in train.devices: the report names the world size and the per-device batch,
and the batch-sensitivity table puts BatchNorm at its per-device batch."""

from __future__ import annotations

import pytest
from helpers import make_run

from normbench.report.sections import build
from normbench.store.catalog import load_runs

# val acc by norm, train.devices and norm.sync at a global batch of 32
ACC = {
    ("batchnorm", 1, "device"): 0.90,
    ("batchnorm", 2, "device"): 0.80,
    ("batchnorm", 2, "global"): 0.90,
    ("layernorm", 1, "device"): 0.85,
    ("layernorm", 2, "device"): 0.85,
}


@pytest.fixture
def devices_study(tmp_path):
    runs = tmp_path / "runs"
    for (norm, devices, sync), acc in ACC.items():
        for seed in range(3):
            overrides = [f"norm={norm}", f"train.devices={devices}", f"seed={seed}"]
            sync_key = [f"norm.sync={sync}"] if norm == "batchnorm" else []
            make_run(runs, [*overrides, *sync_key], acc=acc + 0.01 * seed)
    return runs


def test_the_groups_show_world_size_and_per_device_batch(devices_study):
    section = build(load_runs(devices_study)).sections[0]
    table = section.tables["convergence"]
    assert "train.devices" in section.keys
    shown = set(
        zip(table["norm.name"], table["train.devices"], table["per_device_batch"], strict=True)
    )
    assert ("batchnorm", 2, 16) in shown and ("layernorm", 1, 32) in shown
    assert {batch for _, devices, batch in shown if devices == 2} == {16}


def test_batchnorm_sits_at_its_per_device_batch_unless_synchronized(devices_study):
    section = build(load_runs(devices_study)).sections[0]
    table = section.tables["batch_sensitivity"]
    rows = {(row["norm.name"], row["norm.sync"]): row for _, row in table.iterrows()}
    per_device = rows[("batchnorm", "device")]  # 2 devices: 16 a device; 1 device: 32
    assert per_device["b16_mean"] == pytest.approx(0.81)
    assert per_device["b32_mean"] == pytest.approx(0.91)
    assert per_device["verdict"] == "sensitive"
    synced = rows[("batchnorm", "global")]  # statistics over the global batch: 32, never 16
    assert synced["b16_n"] == 0 and synced["b32_mean"] == pytest.approx(0.91)
    assert rows[("layernorm", None)]["reason"] == "same runs"


def test_one_world_size_for_every_run_is_on_the_fixed_line(tmp_path):
    runs = tmp_path / "runs"
    for norm in ("batchnorm", "layernorm"):
        for seed in range(2):
            make_run(runs, [f"norm={norm}", "train.devices=4", f"seed={seed}"])
    section = build(load_runs(runs)).sections[0]
    assert section.fixed["train.devices"] == 4 and section.fixed["per_device_batch"] == 8
    assert "train.devices" not in section.tables["convergence"]
    one_device = tmp_path / "one"
    make_run(one_device, ["norm=batchnorm"])
    assert "train.devices" not in build(load_runs(one_device)).sections[0].fixed

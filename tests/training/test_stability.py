"""What the stability studies add to training: z-loss, and the loss at initialisation."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from helpers import tiny

from normbench.experiment.compose import compose
from normbench.store.rundir import RunDir
from normbench.training.run import run_experiment
from normbench.training.trainer import Trainer, z_loss


def test_z_loss_is_palms_squared_log_partition_averaged_over_predictions():
    """PaLM: z_loss = 1e-4 * (log Z)^2, log Z = log sum_i exp(logit_i), per prediction."""
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [-50.0, 10.0, 10.0]])
    log_z = [
        math.log(math.e + math.e**2 + math.e**3),
        math.log(3.0),
        10.0 + math.log(2.0 + math.exp(-60.0)),
    ]
    expected = sum(value**2 for value in log_z) / 3
    assert z_loss(logits).item() == pytest.approx(expected, rel=1e-6)


def test_z_loss_enters_the_gradient_and_the_recorded_loss_stays_the_cross_entropy(tmp_path):
    """The same first step with and without z-loss: the loss it returns (what metrics record as
    train_loss) is the cross-entropy in both, the weights it leaves differ."""
    trainers = []
    for coefficient in (0.0, 0.5):
        cfg = compose(tiny(f"train.z_loss={coefficient}", data="pysource"))
        trainer = Trainer(cfg, torch.device("cpu"), RunDir(tmp_path, str(coefficient)), False)
        trainer.setup()
        x, y, mask = next(trainer.batches())
        with torch.no_grad():
            cross_entropy = F.cross_entropy(trainer.model(x).flatten(0, 1), y.flatten())
        loss, _, _ = trainer.step(x, y, mask, want_grad_norm=False)
        assert loss.item() == pytest.approx(cross_entropy.item(), rel=1e-6)
        trainers.append(trainer)
    plain, with_z = (t.model.head.weight for t in trainers)
    assert not torch.equal(plain, with_z)


@pytest.mark.parametrize("data", ["mnist1d", "pysource"])
def test_the_validation_loss_at_initialisation_is_in_the_summary(data, tmp_path):
    """initial_val_loss is the seeded model's validation loss before any update (bits per
    byte too for next-byte data: near log2(256) = 8, a near-uniform prediction)."""
    cfg = compose(tiny(data=data))
    trainer = Trainer(cfg, torch.device("cpu"), RunDir(tmp_path / "hand", "r"), False)
    trainer.setup()
    by_hand, _ = trainer.evaluate("val")
    summary = run_experiment(cfg, tmp_path / "runs", progress=False).summary
    assert summary["initial_val_loss"] == pytest.approx(by_hand, rel=1e-6)
    if data == "pysource":
        assert summary["initial_val_bpb"] == pytest.approx(by_hand / math.log(2))
        assert 7.5 < summary["initial_val_bpb"] < 9
    else:
        assert summary["initial_val_bpb"] is None


def test_the_evaluation_at_initialisation_changes_no_result(tmp_path, monkeypatch):
    """Metrics to the bit with and without it (BatchNorm: running statistics would show an
    evaluation that moved them); metrics.parquet still starts at the first logged step."""
    cfg = compose(tiny("norm=batchnorm"))
    recorded = run_experiment(cfg, tmp_path / "a", progress=False)
    monkeypatch.setattr(Trainer, "record_initial_loss", lambda self: None)
    skipped = run_experiment(cfg, tmp_path / "b", progress=False)
    a, b = (
        pd.read_parquet(o.path / "metrics.parquet").drop(columns="elapsed_s")
        for o in (recorded, skipped)
    )
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert a["step"].iloc[0] == 2 and recorded.summary["test_loss"] == skipped.summary["test_loss"]
    assert recorded.path.name == skipped.path.name  # one run id

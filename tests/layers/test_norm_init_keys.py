"""norm.alpha_init (dyt, derf) and norm.shift_init (derf): checked keys, built into the norm,
out of the run id at their defaults (issue 28 item 4)."""

from __future__ import annotations

import pytest
import yaml
from helpers import make_run

from normbench.api import runs
from normbench.core.errors import UsageError
from normbench.data.datasets import input_shape
from normbench.experiment.compose import compose
from normbench.layers.models import build_model
from normbench.store.rundir import RunDir, run_id

# Computed by the code before these keys existed (commit 4204ca5): the defaults keep them.
IDS_BEFORE = {
    ("norm=dyt",): "transformer-dyt-pre-fp32-b32-s0-06bfdaf2",
    ("norm=derf",): "transformer-derf-pre-fp32-b32-s0-f898c333",
    ("model=cnn", "norm=dyt"): "cnn-dyt-pre-fp32-b32-s0-21587018",
    ("model=cnn", "norm=derf", "placement=post"): "cnn-derf-post-fp32-b32-s0-639cde13",
    ("norm=layernorm",): "transformer-layernorm-pre-fp32-b32-s0-5c3bb75c",
    # a plugin's own alpha_init stays in its id, at any value
    ("norm=normbench.layers.norms:DyT",): "transformer-dyt-pre-fp32-b32-s0-523b047a",
}


@pytest.mark.parametrize("overrides", list(IDS_BEFORE))
def test_default_configs_keep_the_run_ids_they_had(overrides):
    assert run_id(compose(list(overrides))) == IDS_BEFORE[overrides]


def test_a_value_off_the_default_is_another_run():
    default = run_id(compose(["norm=derf"]))
    assert run_id(compose(["norm=derf", "norm.alpha_init=1.0"])) != default
    assert run_id(compose(["norm=derf", "norm.shift_init=0.1"])) != default
    assert run_id(compose(["norm=derf", "norm.alpha_init=0.5", "norm.shift_init=0"])) == default


def test_the_inits_reach_the_norms():
    cfg = compose(["model=cnn", "norm=derf", "norm.alpha_init=2", "norm.shift_init=0.25"])
    model = build_model(cfg, input_shape(cfg["data"]), 10)
    norm = model.units[0].norm
    assert (norm.alpha.item(), norm.shift.item()) == (2.0, 0.25)
    cfg = compose(["norm=dyt", "norm.alpha_init=1.5"])
    assert build_model(cfg, input_shape(cfg["data"]), 10).final_norm.alpha.item() == 1.5


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["norm=layernorm", "norm.alpha_init=1"], "norm.alpha_init is a key of norm=dyt/derf"),
        (["norm=dyt", "norm.shift_init=1"], "norm.shift_init is a key of norm=derf"),
        (["norm=dyt", "norm.alpha_init=-1"], "norm.alpha_init=-1 is not valid; valid: a finite"),
        (["norm=derf", "norm.shift_init=nan"], "norm.shift_init=nan is not valid"),
    ],
)
def test_bad_values_and_other_norms_are_refused(overrides, message):
    with pytest.raises(UsageError, match=message):
        compose(overrides)


def test_a_run_made_before_the_key_reads_as_the_default(tmp_path):
    """An old run's config.yaml has no norm.alpha_init: the index gives it the value that
    made it, so it groups with new runs at that value."""
    old = make_run(tmp_path, ["norm=dyt"])
    path = RunDir(tmp_path, old).config_path
    cfg = yaml.safe_load(path.read_text())
    del cfg["norm"]["alpha_init"]
    path.write_text(yaml.safe_dump(cfg))
    make_run(tmp_path, ["norm=dyt", "norm.alpha_init=1.0"])
    table = runs(tmp_path)
    assert sorted(table["norm.alpha_init"]) == [0.5, 1.0]

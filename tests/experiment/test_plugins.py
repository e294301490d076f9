"""Your own norm, model and data (issue 12): a user package made in tmp_path, found by import
path, by entry point (an installed dist-info) and by config directory; its keys read off its
signature; its errors one line before anything is written; through run, sweep and report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers import TINY, tiny
from typer.testing import CliRunner

import normbench
from normbench.cli import app
from normbench.core import registry
from normbench.core.errors import UsageError
from normbench.data.arrays import _file_arrays, _plugin_arrays
from normbench.data.datasets import input_shape, load, split_sizes
from normbench.experiment import probe
from normbench.experiment.compose import _base_config, compose
from normbench.experiment.options import (
    CONFIG_PATH_VARIABLE,
    group_options,
    options_in,
    use_config_dirs,
)
from normbench.store import provenance
from normbench.store.rundir import earlier_run_id, run_id

runner = CliRunner()

NORMS = '''
import torch
from torch import nn

from normbench.api import feature_view


class PowerNorm(nn.Module):
    """x over the p-th root of the mean of |x|^p across features, times a gain."""

    def __init__(self, num_features: int, layout: str, p: float = 2.0, eps: float = 1e-5):
        super().__init__()
        self.layout, self.p, self.eps = layout, p, eps
        self.dim = -1 if layout == "tokens" else 1
        self.gain = nn.Parameter(torch.ones(num_features))

    def forward(self, x, mask=None, cond=None):
        scale = x.abs().pow(self.p).mean(self.dim, keepdim=True).add(self.eps).pow(1 / self.p)
        return x / scale * feature_view(self.gain, x, self.layout)


class Scaled(nn.Module):
    """Needs its scale: a parameter without a default."""

    def __init__(self, num_features, layout, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, mask=None, cond=None):
        return x * self.scale


class Sized(nn.Module):
    """A tuple default is no key: the class keeps it."""

    def __init__(self, num_features, layout, sizes=(1, 2), scale: float = 1.0):
        super().__init__()
        self.sizes, self.scale = sizes, scale

    def forward(self, x, mask=None, cond=None):
        return x * self.scale


class Shrinks(nn.Module):
    def __init__(self, num_features, layout):
        super().__init__()

    def forward(self, x, mask=None, cond=None):
        return x.mean(-1)


class NoLayout(nn.Module):
    def __init__(self, num_features):
        super().__init__()


class Raises(nn.Module):
    def __init__(self, num_features, layout):
        raise RuntimeError("not today")


class FailsInEval(nn.Module):
    def __init__(self, num_features, layout):
        super().__init__()

    def forward(self, x, mask=None, cond=None):
        if not self.training:
            raise RuntimeError("eval mode broke")
        return x
'''

MODELS = '''
from torch import nn

from normbench.api import ResidualUnit, final_norm


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x, mask=None):
        return self.fc(x).relu()


class Net(nn.Module):
    """Flatten, project to `width` features on one token, residual MLP units, a head."""

    def __init__(self, make_norm, placement, features, num_classes, width, depth):
        super().__init__()
        self.project = nn.Linear(features, width)
        self.units = nn.ModuleList(
            ResidualUnit(Block(width), width, "tokens", placement, depth, make_norm)
            for _ in range(depth)
        )
        self.final_norm = final_norm(make_norm, width, "tokens", placement)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x, mask=None):
        h = self.project(x.flatten(1).float())[:, None, :]
        for unit in self.units:
            h = unit(h)
        return self.head(self.final_norm(h)[:, 0])


def build(cfg, make_norm, input_shape, num_classes, width: int = 16, depth: int = 2):
    features = 1
    for side in input_shape:
        features *= side
    return Net(make_norm, cfg["placement"]["name"], features, num_classes, width, depth)


def too_few_logits(cfg, make_norm, input_shape, num_classes):
    return build(cfg, make_norm, input_shape, num_classes - 1)
'''

DATA = '''
import numpy as np


def blobs(num_samples: int = 300, length: int = 8):
    """Three classes of noisy constant signals (N, 1, length)."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, num_samples)
    x = rng.normal(size=(num_samples, 1, length)) + y[:, None, None]
    return {"x_train": x.astype(np.float32), "y_train": y}
'''

ENTRY_POINTS = """
[normbench.norms]
powernorm = mypkg.norms:PowerNorm

[normbench.models]
mlpnet = mypkg.models:build

[normbench.data]
blobs = mypkg.data:blobs
"""

CONFIG_DIR = {
    "norm/power3.yaml": "# PowerNorm with p = 3\n_target_: mypkg.norms.PowerNorm\np: 3.0\n",
    "model/narrow.yaml": "# a narrow CNN\nname: cnn\nwidth: 16\ndepth: 2\n",
    "data/mine.yaml": "# my arrays\nname: arrays\npath: data.npz\n",
    "sweep/mine.yaml": "version: 1\nparams:\n  norm: batchnorm,power3\n  model: narrow\n",
}
SWEEP_FILE = """
version: 1
params:
  model: cnn
  model.width: 16
  model.depth: 2
  data: mine
  norm: groupnorm,powernorm,mypkg.norms:PowerNorm
  norm.groups: 4
  batch_size: 8,16
  train.max_steps: 6
  train.eval_every: 3
  train.log_every: 2
  train.warmup_steps: 2
"""


def forget_plugins() -> None:
    """What one process caches about plugins (in a real run they do not change under it)."""
    for cached in (
        registry.entry_points,
        registry.resolve,
        options_in,
        _base_config,
        _file_arrays,
        _plugin_arrays,
        probe._probe,
        provenance.source_hash,
    ):
        cached.cache_clear()
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]


def save_arrays(path: Path, seed: int = 0, n: int = 240, **extra) -> Path:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    x = (rng.normal(size=(n, 2, 16)) + y[:, None, None]).astype(np.float32)
    np.savez(path, **{"x_train": x, "y_train": y, **extra})
    return path


@pytest.fixture
def user(tmp_path, monkeypatch):
    """A user's project: an installed package (mypkg and its dist-info with entry points in
    site/), a config directory, a sweep file and an .npz file; the current directory."""
    site = tmp_path / "site"
    for name, source in (("norms", NORMS), ("models", MODELS), ("data", DATA)):
        (site / "mypkg" / f"{name}.py").parent.mkdir(parents=True, exist_ok=True)
        (site / "mypkg" / f"{name}.py").write_text(textwrap.dedent(source))
    (site / "mypkg" / "__init__.py").write_text("")
    dist = site / "mypkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mypkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    for relative, text in CONFIG_DIR.items():
        (tmp_path / "myconf" / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "myconf" / relative).write_text(text)
    (tmp_path / "grids").mkdir()
    (tmp_path / "grids" / "mine.yaml").write_text(SWEEP_FILE)
    save_arrays(tmp_path / "data.npz")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(site))
    repository = str(Path(normbench.__file__).resolve().parents[1])
    paths = [str(site), repository, os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.delenv(CONFIG_PATH_VARIABLE, raising=False)
    forget_plugins()
    yield tmp_path
    use_config_dirs([])
    forget_plugins()


# ------------------------------------------------------------------------ finding plugins
def test_a_norm_by_import_path_takes_its_own_keys_and_the_shared_ones_it_reads(user):
    cfg = compose(["norm=mypkg.norms:PowerNorm", "norm.p=3"])
    norm = cfg["norm"]
    assert norm["name"] == "mypkg.norms:PowerNorm" and norm["_target_"] == "mypkg.norms:PowerNorm"
    assert norm["p"] == 3.0 and isinstance(norm["p"], float)
    assert norm["eps"] == 1e-5  # a shared key its signature names keeps the config's value
    assert all(norm[k] is None for k in ("momentum", "groups", "ghost_batch", "fp32_stats"))
    assert run_id(cfg).startswith("transformer-powernorm-pre-fp32-b32-s0-")


def test_entry_points_and_config_directories_name_plugins(user, monkeypatch):
    by_entry_point = compose(["norm=powernorm", "model=mlpnet", "data=blobs"])
    assert by_entry_point["norm"]["_target_"] == "mypkg.norms:PowerNorm"
    assert by_entry_point["model"] == {
        "name": "mlpnet",
        "_target_": "mypkg.models:build",
        "width": 16,
        "depth": 2,
    }
    assert by_entry_point["data"]["num_samples"] == 300
    assert len(by_entry_point["data"]["sha256"]) == 16
    use_config_dirs(["myconf"])
    from_dir = compose(["norm=power3", "model=narrow", "data=mine"])
    assert from_dir["norm"]["name"] == "power3" and from_dir["norm"]["p"] == 3.0
    # a preset of a shipped option: its keys over the shipped option's
    assert from_dir["model"]["name"] == "cnn" and from_dir["model"]["width"] == 16
    assert from_dir["model"]["kernel_size"] == 3
    assert from_dir["data"]["path"] == str(user / "data.npz")
    use_config_dirs([])
    with pytest.raises(UsageError, match="unknown norm"):
        compose(["norm=power3"])
    monkeypatch.setenv(CONFIG_PATH_VARIABLE, str(user / "myconf"))
    assert compose(["norm=power3"])["norm"]["p"] == 3.0


def test_only_plain_defaults_become_keys(user):
    norm = compose(["norm=mypkg.norms:Sized", "norm.scale=2"])["norm"]
    assert norm["scale"] == 2.0 and "sizes" not in norm


def test_a_dotted_target_and_an_import_path_are_one_object(user):
    use_config_dirs(["myconf"])
    from_yaml = compose(["norm=power3", "norm.p=2"])
    by_path = compose(["norm=mypkg.norms:PowerNorm"])
    assert from_yaml["norm"]["_target_"] == by_path["norm"]["_target_"]


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["norm=mypkg.norms:PowerNorm", "norm.q=1"], "unknown key 'norm.q' (did you mean norm.p?)"),
        (["norm=mypkg.norms:PowerNorm", "norm.p=abc"], "norm.p='abc' is not valid"),
        (["norm=mypkg.norms:Scaled"], "norm.scale has no default; set it: norm.scale=VALUE"),
        (["norm=mypkg.norms:Nope"], "norm=mypkg.norms:Nope: mypkg.norms has no attribute Nope"),
        (["norm=nopkg.norms:X"], "cannot import nopkg.norms"),
        (["norm=mypkg.norms:NoLayout"], "NoLayout must accept (num_features, layout, ...)"),
        (
            ["norm=mypkg.norms:PowerNorm", "norm._target_=x:Y"],
            "norm._target_ names the chosen norm",
        ),
        (["model=mlpnet", "model.width=wide"], "model.width='wide' is not valid"),
        (["model=mlpnet", "data=pysource"], "cannot take data=pysource"),
        (["norm=mypkg.norms.PowerNorm"], "or an import path package.module:Object"),
    ],
)
def test_plugin_keys_and_import_paths_are_checked(user, overrides, words):
    with pytest.raises(UsageError) as caught:
        compose(overrides)
    assert words in str(caught.value)


def test_a_name_defined_twice_is_refused(user):
    (user / "myconf" / "norm" / "batchnorm.yaml").write_text("_target_: mypkg.norms.PowerNorm\n")
    use_config_dirs(["myconf"])
    with pytest.raises(UsageError, match="norm=batchnorm is defined twice: by normbench and by"):
        compose([])


def test_a_config_directory_yaml_needs_a_target_or_a_shipped_name(user):
    (user / "myconf" / "norm" / "mystery.yaml").write_text("name: mystery\n")
    use_config_dirs(["myconf"])
    with pytest.raises(UsageError, match=r"norm=mystery \(.*mystery.yaml\): set _target_"):
        compose(["norm=mystery"])


def test_a_missing_config_directory_is_refused(user):
    with pytest.raises(UsageError, match="--config-dir 'nowhere': not a directory"):
        use_config_dirs(["nowhere"])


# Run ids computed before plugins existed: built-in norms and models keep them.
RUN_IDS = {
    (): "transformer-layernorm-pre-fp32-b32-s0-5c3bb75c",
    ("model=cnn", "norm=groupnorm"): "cnn-groupnorm-pre-fp32-b32-s0-7b35517d",
    # the hash of 0.4, the norm now naming its ghost batch (its 0.4 id: earlier_run_id)
    ("norm=batchnorm", "norm.ghost_batch=4"): (
        "transformer-batchnorm.ghost4-pre-fp32-b32-s0-4745458d"
    ),
    ("data=tokens", "norm=rmsnorm", "placement=post"): (
        "transformer-rmsnorm-post-fp32-b32-s0-c313b16c"
    ),
    ("data=digits", "model=cnn", "norm=switchnorm", "precision=bf16"): (
        "cnn-switchnorm-pre-bf16-b32-s0-0620ee77"
    ),
    ("norm=adaln", "placement=sandwich"): "transformer-adaln-sandwich-fp32-b32-s0-7bbd9fa5",
    ("norm=adaln", "placement=peri"): "transformer-adaln-sandwich-fp32-b32-s0-7bbd9fa5",
    ("model=cnn", "norm=groupnorm", "model.qk_norm=none", "train.z_loss=0"): (
        "cnn-groupnorm-pre-fp32-b32-s0-7b35517d"
    ),
    ("norm=dyt", "seed=3", "batch_size=8"): "transformer-dyt-pre-fp32-b8-s3-107e53c6",
    ("norm=none", "placement=deepnorm"): "transformer-none-deepnorm-fp32-b32-s0-41233de7",
}


@pytest.mark.parametrize("overrides", list(RUN_IDS), ids=lambda o: " ".join(o) or "defaults")
def test_built_in_run_ids_did_not_change(overrides):
    cfg = compose(list(overrides))
    assert run_id(cfg) == RUN_IDS[overrides]
    assert earlier_run_id(cfg) == RUN_IDS[overrides].replace(".ghost4", "")


def test_one_norm_under_three_names_is_one_run_named_by_its_import_path(user):
    """A config directory's power3, the entry point's powernorm at p=3 and the import path
    at p=3 build the same norm: one run id (issue 50, item 16), the import path's of 0.4."""
    use_config_dirs(["myconf"])
    by_dir = compose(["norm=power3"])
    by_entry_point = compose(["norm=powernorm", "norm.p=3"])
    by_path = compose(["norm=mypkg.norms:PowerNorm", "norm.p=3"])
    assert run_id(by_dir) == run_id(by_entry_point) == run_id(by_path) == earlier_run_id(by_path)
    assert (
        run_id(by_dir).startswith("transformer-powernorm-") and by_dir["norm"]["name"] == "power3"
    )
    assert run_id(compose(["norm=power3", "norm.p=2"])) != run_id(by_dir)


@pytest.mark.slow
def test_a_run_of_an_earlier_id_is_kept_and_one_norm_trains_once(user):
    """Through the CLI: power3 trains; the import path at p=3 is the same run, skipped. A
    finished run stored under its 0.4 id (``transformer-power3-...``) is kept by run and by
    sweep, which records it under that id."""
    tiny = ["data=blobs", "model.width=8", "model.depth=1", "model.heads=2", "threads=1"]
    tiny += ["train.max_steps=4", "train.eval_every=2", "train.log_every=2"]
    tiny += ["train.warmup_steps=1", "--runs-dir", "runs"]
    first = runner.invoke(app, ["run", "--config-dir", "myconf", "norm=power3", *tiny, "-q"])
    assert first.exit_code == 0, first.output
    (trained,) = [p.name for p in (user / "runs").iterdir() if not p.name.startswith(".")]
    again = runner.invoke(app, ["run", "norm=mypkg.norms:PowerNorm", "norm.p=3", *tiny, "-q"])
    assert "skipped, already finished" in again.output and trained in again.output
    use_config_dirs(["myconf"])
    earlier = earlier_run_id(compose(["norm=power3", *tiny[:-2]]))
    assert earlier.startswith("transformer-power3-") and earlier != trained
    (user / "runs" / trained).rename(user / "runs" / earlier)
    kept = runner.invoke(app, ["run", "--config-dir", "myconf", "norm=power3", *tiny, "-q"])
    assert "skipped, already finished" in kept.output and earlier in kept.output
    swept = runner.invoke(app, ["sweep", "--config-dir", "myconf", "norm=power3", *tiny])
    assert swept.exit_code == 0, swept.output
    (record,) = (user / "runs" / "sweeps").glob("*.json")
    assert [r["run_id"] for r in json.loads(record.read_text())["runs"]] == [earlier]
    kept_names = sorted(p.name for p in (user / "runs").iterdir() if not p.name.startswith("."))
    assert kept_names == sorted([earlier, "sweeps"])


# ----------------------------------------------------------------------------- your data
def test_arrays_from_a_file_are_split_by_the_fractions_and_hashed_into_the_run_id(user):
    cfg = compose(["data=arrays", "data.path=data.npz", "model=cnn"])
    assert cfg["data"]["path"] == str(user / "data.npz")
    loaded = load(cfg["data"])
    assert (len(loaded.train), len(loaded.val), len(loaded.test)) == (173, 19, 48)
    assert loaded.num_classes == 4 and loaded.train.x.dtype == np.float32
    assert loaded.train.x.shape[1:] == (2, 16) == input_shape(cfg["data"])
    save_arrays(user / "data.npz", seed=1)
    forget_plugins()
    changed = compose(["data=arrays", "data.path=data.npz", "model=cnn"])
    assert changed["data"]["sha256"] != cfg["data"]["sha256"]
    assert run_id(changed) != run_id(cfg)
    with pytest.raises(UsageError, match="the arrays changed since this run was configured"):
        load(cfg["data"])  # a worker given the old config refuses the new file


def test_splits_the_file_holds_are_used_and_their_fractions_nulled(user):
    rng = np.random.default_rng(3)
    extra = {
        "x_test": rng.normal(size=(30, 2, 16)).astype(np.float32),
        "y_test": rng.integers(0, 4, 30),
    }
    save_arrays(user / "split.npz", **extra)
    cfg = compose(["data=arrays", "data.path=split.npz", "data.test_fraction=0.5"])
    assert cfg["data"]["test_fraction"] is None and cfg["data"]["val_fraction"] == 0.1
    assert run_id(cfg) == run_id(compose(["data=arrays", "data.path=split.npz"]))
    assert split_sizes(cfg["data"]) == {"train": 216, "val": 24, "test": 30}


def test_token_ids_take_the_transformer_with_padding_masks(user):
    rng = np.random.default_rng(0)
    x = rng.integers(1, 9, size=(200, 10))
    x[:, 7:] = 0  # padding
    np.savez(user / "tokens.npz", x_train=x, y_train=rng.integers(0, 3, 200))
    cfg = compose(["data=arrays", "data.path=tokens.npz", "model.heads=2", "model.width=16"])
    loaded = load(cfg["data"])
    assert loaded.vocab_size == 8 and loaded.num_classes == 3
    assert loaded.train.mask is not None and not loaded.train.mask[:, 7:].any()
    with pytest.raises(UsageError, match="model=cnn cannot take data=arrays"):
        compose(["data=arrays", "data.path=tokens.npz", "model=cnn"])


def bad_file(name: str, path: Path) -> None:
    """Write the ``name``d kind of bad data to ``path``."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(50, 1, 8)).astype(np.float32), rng.integers(0, 3, 50)
    arrays = {
        "no x_train": {"x": x, "y": y},
        "pairs": {"x_train": x, "y_train": y, "x_val": x},
        "rank": {"x_train": x[:, 0, 0], "y_train": y},
        "2-D floats": {"x_train": x[:, 0], "y_train": y},
        "float labels": {"x_train": x, "y_train": y.astype(float)},
        "negative labels": {"x_train": x, "y_train": y - 1},
        "NaN": {"x_train": np.where(x > 2, np.nan, x), "y_train": y},
        "lengths": {"x_train": x, "y_train": y[:40]},
        "shapes": {"x_train": x, "y_train": y, "x_test": x[:, :, :4], "y_test": y},
        "empty val": {"x_train": x[:5], "y_train": y[:5]},
        "object": {"x_train": np.array([{"a": 1}] * 50, dtype=object), "y_train": y},
    }
    if name == "not a zip":
        path.write_text("hello")
    elif name == "object":
        np.savez(path, allow_pickle=True, **arrays[name])
    else:
        np.savez(path, **arrays[name])


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("missing", "cannot read it (No such file or directory)"),
        ("not a zip", "not an .npz file"),
        ("no x_train", "unexpected array 'x'"),
        ("pairs", "x_val and y_val come together"),
        ("rank", "x_train has shape (50,)"),
        ("2-D floats", "2-D arrays are token ids"),
        ("float labels", "y_train has dtype float64; valid: integer class labels"),
        ("negative labels", "y_train holds labels from -1"),
        ("NaN", "NaN or infinite values"),
        ("lengths", "x_train has 50 samples but y_train has 40"),
        ("shapes", "x_test has samples of shape (1, 4)"),
        ("empty val", "the val split is empty"),
        ("object", "array 'x_train' holds Python objects"),
    ],
)
def test_bad_arrays_are_one_line_exit_2_before_anything_is_written(user, kind, words):
    if kind != "missing":
        bad_file(kind, user / "bad.npz")
    result = runner.invoke(app, ["run", "data=arrays", "data.path=bad.npz", "--runs-dir", "runs"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("normbench: error: data.path="), result.output
    assert words in lines[0]
    assert not (user / "runs").exists()


# ------------------------------------------------------------------------- the probe
@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (
            ["norm=mypkg.norms:Shrinks"],
            "forward returned (6, 8) for an input of shape (6, 8, 5) in the channels layout",
        ),
        (["norm=mypkg.norms:Raises"], "raised RuntimeError: not today"),
        (
            ["model=mypkg.models:too_few_logits"],
            "returned logits of shape (2, 9) for a batch of 2; expected (2, 10)",
        ),
        (["data=arrays"], "data=arrays needs data.path=FILE.npz"),
    ],
)
def test_user_code_that_breaks_the_contract_is_one_line_exit_2(user, overrides, words):
    result = runner.invoke(app, ["run", *overrides, "--runs-dir", "runs"])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and words in result.output
    assert "Traceback" not in result.output and not (user / "runs").exists()


def test_an_exception_in_user_code_during_training_is_a_failed_run(user):
    from normbench.training.run import run_experiment

    cfg = compose(tiny("norm=mypkg.norms:FailsInEval", "model=cnn"))
    outcome = run_experiment(cfg, user / "runs", progress=False)
    assert outcome.status == "failed" and outcome.error == "RuntimeError: eval mode broke"
    meta = json.loads((outcome.path / "meta.json").read_text())
    assert "FailsInEval" not in meta["error"] and "norms.py" in meta["traceback"]


def test_editing_a_plugin_makes_its_runs_stale(user):
    cfg = compose(["norm=mypkg.norms:PowerNorm"])
    meta = {"code": provenance.fingerprint(cfg)}
    assert not provenance.is_stale(meta, cfg)
    assert meta["code"]["source_hash"] != provenance.source_hash()
    norms = user / "site" / "mypkg" / "norms.py"
    norms.write_text(norms.read_text() + "\n# a change\n")
    provenance.source_hash.cache_clear()
    assert provenance.is_stale(meta, cfg)


# ----------------------------------------------------------------------------- the CLI
def test_list_shows_plugins_and_where_they_come_from_without_torch(user):
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom normbench.cli import app\n"
        "result = CliRunner().invoke(app, ['list', '--config-dir', 'myconf'])\n"
        "assert result.exit_code == 0, result.output\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print(result.output)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    assert "powernorm" in out and "from entry point (mypkg 0.1)" in out
    assert "power3" in out and "PowerNorm with p = 3" in out and "from config dir" in out
    assert "mlpnet" in out and "blobs" in out and "narrow" in out
    assert "mine" in out  # the config directory's sweep preset
    # every entry says where it comes from, built-in ones too (issue 50, item 16)
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in out.splitlines()
        if line.startswith("│") and line.split("│")[1].strip()
    }
    assert rows["batchnorm"] == rows["cnn"] == rows["pre"] == "built-in"
    assert rows["power3"] == rows["narrow"] == "config dir"
    assert rows["powernorm"] == rows["mlpnet"] == rows["blobs"] == "plugin"


def test_check_norm_passes_a_good_norm_and_fails_the_right_row(user):
    good = runner.invoke(app, ["check-norm", "mypkg.norms:PowerNorm", "p=3"])
    assert good.exit_code == 0, good.output
    assert "18 of 18 checks hold: the norm keeps the contract" in good.output
    bad = runner.invoke(app, ["check-norm", "mypkg.norms:Shrinks"], env={"COLUMNS": "200"})
    assert bad.exit_code == 1, bad.output
    lines = bad.output.splitlines()
    row = next(line for line in lines if "output shape and dtype" in line)
    assert row.count("FAILS") == 2 and "!= input shape" in row
    # every check that reads the (wrong-shaped) output is skipped, not passed
    for check in ("padding changes", "eval mode", "autocast", "gradients", "state_dict", "seed"):
        row = next(line for line in lines if check in line)
        assert row.count("skipped (wrong shape)") == 2 and "holds" not in row, row
    assert "4 of 18 checks hold; 12 skipped: they read the output, whose shape is wrong" in (
        bad.output
    )
    config_dir = runner.invoke(app, ["check-norm", "--config-dir", "myconf", "power3"])
    assert config_dir.exit_code == 0, config_dir.output
    unknown = runner.invoke(app, ["check-norm", "mypkg.norms:PowerNorm", "q=1"])
    assert unknown.exit_code == 2 and "unknown key 'norm.q'" in unknown.output
    # the keys PowerNorm reads (eps: its signature names it; impl: every norm's, the factory
    # acts on it), not those every norm may take
    assert "valid under norm: norm._target_, norm.eps, norm.impl, norm.name, norm.p" in (
        unknown.output
    )


PADDING = "padding changes no real output or buffer"


@pytest.mark.parametrize(
    ("broken", "row", "layouts", "also"),
    [
        ("LeaksPadding", PADDING, ("tokens",), set()),
        ("ChangesShape", "output shape and dtype", ("channels", "tokens"), set()),
        ("NaNGradient", "finite gradients", ("channels", "tokens"), set()),
        # batch statistics over every token: padding reaches them too
        (
            "IgnoresEvalMode",
            "eval mode: no buffer moves, no batch dependence",
            ("channels", "tokens"),
            {PADDING},
        ),
    ],
)
def test_check_norm_fails_user_norms_on_their_row(broken, row, layouts, also):
    result = runner.invoke(app, ["check-norm", f"user_norms:{broken}"], env={"COLUMNS": "250"})
    assert result.exit_code == 1, result.output
    cells = {}
    for line in result.output.splitlines():
        parts = [part.strip() for part in line.split("│")[1:-1]]
        if len(parts) == 3:
            cells[parts[0]] = dict(zip(("channels", "tokens"), parts[1:], strict=True))
    assert all(cells[row][layout].startswith("FAILS") for layout in layouts), cells[row]
    failing = {name for name, by in cells.items() for cell in by.values() if "FAILS" in cell}
    assert failing == {row} | also


@pytest.mark.parametrize("name", ["batchnorm", "groupnorm", "rmsnorm", "derf"])
def test_check_norm_passes_shipped_norms(name):
    result = runner.invoke(app, ["check-norm", name])
    assert result.exit_code == 0, result.output


def test_the_public_api():
    from normbench import api
    from normbench.layers.models import PLACEMENTS

    assert set(api.__all__) >= {"make_norm", "Norm", "ResidualUnit", "PLACEMENTS", "QKNorm"}
    resolved = {
        compose([f"placement={p}"])["placement"]["name"] for p in group_options("placement")
    }
    assert resolved == set(PLACEMENTS)  # every option is a placement (peri is sandwich's name)


# ------------------------------------------------------------------ end to end, in workers
def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "normbench", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )


def in_process(*args: str) -> subprocess.CompletedProcess:
    """`normbench ARGS` in this process, returned as ``cli`` returns it: for the commands whose
    process is not what is tested (each subprocess costs seconds of importing torch); the
    sweeps keep theirs, so that their workers find the package as a user's would."""
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


@pytest.mark.slow
def test_a_user_package_runs_through_run_sweep_and_report(user):
    tiny = [o for o in TINY if not o.startswith(("model.", "norm.groups"))]
    done = in_process("run", "-q", "norm=powernorm", "model=mlpnet", "data=blobs", *tiny)
    assert done.returncode == 0 and done.stdout.startswith("complete"), done.stderr
    meta = json.loads(next((user / "runs").glob("mlpnet-powernorm-*/meta.json")).read_text())
    assert meta["summary"]["num_classes"] == 3
    parallel = {"local": "-j2", "submitit_local": "launcher.array_parallelism=2"}
    for launcher in ("local", "submitit_local"):
        swept = cli(
            "sweep", "--config-dir", "myconf", "grids/mine.yaml", "--launcher", launcher,
            parallel[launcher], "--name", launcher, "threads=1",
        )  # fmt: skip
        assert swept.returncode == 0, swept.stdout + swept.stderr
        # powernorm and mypkg.norms:PowerNorm are one norm: one run each (issue 50, item 16)
        assert "4 runs from 6 combinations (2 the same run as another" in swept.stdout
        assert "complete" in swept.stdout
    report = in_process(
        "report", "--sweep", "submitit_local", "--format", "csv", "--table", "convergence"
    )
    assert report.returncode == 0, report.stderr
    names = {line.split(",")[0] for line in report.stdout.splitlines()[1:]}
    assert names == {"groupnorm", "powernorm(p=2)"}  # p folded in
    preset = in_process("sweep", "--config-dir", "myconf", "mine", "--dry-run", *tiny)
    assert preset.returncode == 0 and "2 runs" in preset.stdout, preset.stdout + preset.stderr

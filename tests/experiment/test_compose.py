"""Config composition: Hydra's tree, the schema, and the rules that refuse combinations."""

from __future__ import annotations

import pytest

from normbench.core.errors import UsageError
from normbench.experiment.compose import compose
from normbench.experiment.options import conf_dir, group_options
from normbench.experiment.rules import RULES
from normbench.experiment.schema import GROUPS, flatten


def test_defaults_compose_to_the_documented_experiment():
    cfg = compose([])
    assert {g: cfg[g]["name"] for g in GROUPS} == {
        "model": "transformer",
        "norm": "layernorm",
        "placement": "pre",
        "data": "mnist1d",
        "precision": "fp32",
    }
    assert cfg["batch_size"] == 32 and cfg["device"] == "auto" and cfg["seed"] == 0
    assert set(cfg["train"]) >= {
        "epochs",
        "max_steps",
        "lr",
        "optimizer",
        "warmup_steps",
        "schedule",
        "lr_scaling",
        "base_batch_size",
        "eval_every",
        "grad_clip",
    }
    assert set(cfg["target"]) == {"metric", "value"}


def test_every_group_has_the_options_of_the_design():
    assert group_options("norm") == sorted(
        [
            "batchnorm",
            "layernorm",
            "instancenorm",
            "groupnorm",
            "switchnorm",
            "rmsnorm",
            "ssrmsnorm",
            "adaln",
            "dyt",
            "derf",
            "dyisru",
            "scalenorm",
            "none",
        ]
    )
    assert group_options("placement") == sorted(
        ["pre", "post", "res_post", "sandwich", "peri", "deepnorm", "lns", "mix", "gpas"]
    )
    assert group_options("model") == ["cnn", "resnet", "transformer"]
    assert group_options("precision") == ["bf16", "fp16", "fp32"]
    assert group_options("data") == sorted(
        ["arrays", "digits", "mnist1d", "pysource", "tokens"]
        + ["cifar10", "tinystories", "hub_images", "hub_text"]  # fetched once (docs/data.md)
    )


def test_overrides_are_typed_and_applied():
    cfg = compose(
        [
            "model=cnn",
            "norm=groupnorm",
            "norm.groups=4",
            "batch_size=8",
            "train.lr=1e-3",
            "norm.ghost_batch=4",
            "precision=bf16",
            "train.grad_clip=null",
        ]
    )
    assert cfg["model"]["name"] == "cnn" and cfg["norm"]["groups"] == 4
    assert cfg["train"]["lr"] == 0.001 and isinstance(cfg["train"]["lr"], float)
    assert cfg["norm"]["ghost_batch"] is None  # groupnorm ignores it
    assert cfg["train"]["grad_clip"] is None


def test_integers_are_accepted_where_a_number_is_expected():
    assert compose(["train.lr=1"])["train"]["lr"] == 1.0


def test_every_norm_model_and_placement_combination_composes():
    for norm in group_options("norm"):
        for model in group_options("model"):
            placement = "post" if model == "resnet" else "sandwich"  # a ResNet's own orders
            compose([f"norm={norm}", f"model={model}", f"placement={placement}"])


def test_rules_have_summaries_for_normbench_list():
    assert len(RULES) >= 6 and all(rule.summary for rule in RULES)


def test_flatten():
    assert flatten({"a": 1, "b": {"c": 2}}) == {"a": 1, "b.c": 2}


def test_conf_dir_is_found():
    assert (conf_dir() / "config.yaml").is_file()


@pytest.mark.parametrize(
    "bad",
    [
        ["norm.eps=abc"],
        ["train.epochs=1.5"],
        ["seed=-1"],
        ["data=tokens", "data.max_len=4", "data.min_len=6"],
        ["~norm"],
        ["train.schedule=linear"],
    ],
)
def test_more_bad_values_are_usage_errors(bad):
    with pytest.raises(UsageError):
        compose(bad)


def test_keys_a_norm_ignores_are_nulled_so_equal_experiments_share_a_run_id():
    from normbench.store.rundir import run_id

    gn = [compose(["norm=groupnorm", f"norm.ghost_batch={g}"]) for g in (2, 32)]
    assert gn[0]["norm"]["ghost_batch"] is None and run_id(gn[0]) == run_id(gn[1])
    bn = [compose(["norm=batchnorm", f"norm.ghost_batch={g}"]) for g in (2, 32)]
    assert bn[0]["norm"]["ghost_batch"] == 2 and run_id(bn[0]) != run_id(bn[1])
    assert compose(["norm=layernorm"])["norm"]["groups"] is None
    assert compose(["norm=groupnorm"])["norm"]["groups"] == 8
    compose(["norm=layernorm", "norm.ghost_batch=64"])  # ignored, so not refused


# Run ids computed by the commit before the optimizers' ignored keys were nulled (issue 51,
# item 10): at the defaults they must not change, or every finished run is trained again. A Muon
# run made then orthogonalised the fused qkv weight whole: train.muon_qkv=fused is that run (the
# default, split, computes another: issue 47).
IDS_BEFORE_NULLING = {
    ("model=cnn", "data=digits"): "cnn-layernorm-pre-fp32-b32-s0-f5aef3c1",
    ("model=transformer",): "transformer-layernorm-pre-fp32-b32-s0-5c3bb75c",
    ("model=transformer", "train.optimizer=muon", "train.muon_qkv=fused"): (
        "transformer-layernorm-pre-fp32-b32-s0-7944072c"
    ),
    ("model=cnn", "train.optimizer=sgd"): "cnn-layernorm-pre-fp32-b32-s0-5ef381cd",
    ("model=transformer", "train.optimizer=sgd", "train.momentum=0.5"): (
        "transformer-layernorm-pre-fp32-b32-s0-8c6ed97f"
    ),
}


@pytest.mark.parametrize("overrides", list(IDS_BEFORE_NULLING))
def test_keys_an_optimizer_ignores_are_nulled_and_default_ids_are_unchanged(overrides):
    from normbench.store.rundir import run_id

    cfg = compose(overrides)
    assert run_id(cfg) == IDS_BEFORE_NULLING[overrides]
    optimizer, train = cfg["train"]["optimizer"], cfg["train"]
    assert (train["momentum"] is None) == (optimizer != "sgd")
    assert (train["muon_lr"] is None) == (optimizer != "muon")
    assert (train["muon_momentum"] is None) == (optimizer != "muon")
    ignored = {
        "adamw": [
            "train.momentum=0.1",
            "train.muon_lr=0.5",
            "train.muon_momentum=0.5",
            "train.muon_qkv=split",
        ],
        "sgd": ["train.muon_lr=0.5", "train.muon_momentum=0.5", "train.adam_beta2=0.95"],
        "muon": ["train.momentum=0.1"],
    }[optimizer]
    for key in ignored:  # a key the optimizer ignores: the same run
        assert run_id(compose([*overrides, key])) == run_id(cfg), key
    read = {
        "adamw": ["train.adam_beta2=0.95"],
        "sgd": ["train.momentum=0.1"],
        "muon": ["train.muon_lr=0.5", "train.muon_qkv=split", "train.adam_beta2=0.95"],
    }
    for key in read[optimizer]:  # one it reads: another run
        assert run_id(compose([*overrides, key])) != run_id(cfg), key


def test_pysource_defaults_to_bits_per_byte_and_keeps_the_transformer_defaults():
    lm, classifier = compose(["data=pysource"]), compose([])
    assert lm["target"]["metric"] == "val_bpb" and classifier["target"]["metric"] == "val_acc"
    assert lm["model"] == classifier["model"]


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (["data=pysource", "model=cnn"], "model=cnn"),
        (["data=pysource", "norm=instancenorm"], "norm=instancenorm"),
        (["data=pysource", "norm=switchnorm"], "norm=switchnorm"),
        (["data=pysource", "norm=adaln"], "norm=adaln"),
        (["target.metric=val_bpb"], "target.metric=val_bpb"),
        (["data=pysource", "data.val_fraction=0"], "data.val_fraction=0.0"),
        (["data=pysource", "data.val_fraction=0.5", "data.test_fraction=0.5"], "0.9"),
        (["data=pysource", "data.corpus=python2.7-000000000000"], "data.corpus="),
    ],
)
def test_pysource_refuses_what_would_not_be_next_byte_prediction(bad, named):
    with pytest.raises(UsageError, match=named.replace(".", r"\.")):
        compose(bad)


# ------------------------------------------------------------- keys added for stability studies
def test_qk_norm_and_z_loss_at_their_defaults_leave_run_ids_as_they_were():
    from normbench.store.rundir import run_id

    for overrides in ([], ["model=cnn"], ["data=pysource"]):
        cfg = compose(overrides)
        assert cfg["model"]["qk_norm"] == "none" and cfg["train"]["z_loss"] == 0.0
        on = compose([*overrides, "train.z_loss=1e-4"])
        assert run_id(on) != run_id(cfg)
    qk = compose(["model.qk_norm=layernorm"])
    assert run_id(qk) != run_id(compose(["model.qk_norm=rmsnorm"])) != run_id(compose([]))


def test_peri_is_the_published_name_of_sandwich_and_the_same_run():
    from normbench.store.rundir import run_id

    peri, sandwich = compose(["placement=peri"]), compose(["placement=sandwich"])
    assert peri == sandwich and run_id(peri) == run_id(sandwich)


def test_mix_has_a_post_fraction_that_no_other_placement_takes():
    assert compose(["placement=mix"])["placement"] == {"name": "mix", "post_fraction": 0.25}
    assert (
        compose(["placement=mix", "placement.post_fraction=0.5"])["placement"]["post_fraction"]
        == 0.5
    )


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            ["model=cnn", "model.qk_norm=layernorm"],
            "model.qk_norm=layernorm needs attention, and model=cnn has none; valid for "
            "model=cnn: none",
        ),
        (
            ["model.qk_norm=l2"],
            "model.qk_norm='l2' is not valid; valid: none, layernorm, rmsnorm, rmsnorm_whole",
        ),
        (["train.z_loss=-1"], "train.z_loss=-1 is not valid; valid: a finite number >= 0.0"),
        (
            ["placement.post_fraction=0.5"],
            "placement.post_fraction is a key of placement=mix; it does not apply to placement=pre",
        ),
        (
            ["placement=mix", "placement.post_fraction=2"],
            "placement.post_fraction=2 is not valid; valid: a finite number from 0.0 to 1.0",
        ),
    ],
)
def test_new_keys_refuse_bad_values_in_one_line(bad, message):
    with pytest.raises(UsageError) as caught:
        compose(bad)
    assert str(caught.value) == message


def hydra_whole(monkeypatch):
    """compose() with every combination composed by Hydra whole (the slow reference)."""
    import json

    from normbench.experiment import compose as composing

    monkeypatch.setattr(
        composing,
        "_composed",
        lambda files, dirs: json.loads(composing._hydra_composed(files, dirs)),
    )
    composing._base_config.cache_clear()


def test_options_merged_in_place_compose_as_hydra_composes_them_whole(monkeypatch, tmp_path):
    """A grid's configs are the same, key order included, whether Hydra composes each group
    combination or only those of options that write outside their own group (data=pysource);
    on a preset and on a grid with overrides of every group kind and a config directory's
    option (a preset of a shipped norm) and plugin (a user norm)."""
    import json

    from normbench.experiment import compose as composing
    from normbench.experiment.options import use_config_dirs
    from normbench.sweeps.grid import grid_overrides

    (tmp_path / "norm").mkdir()
    (tmp_path / "norm" / "fewgroups.yaml").write_text("name: groupnorm\ngroups: 2\n")
    (tmp_path / "norm" / "mine.yaml").write_text("_target_: user_norms:IgnoresEvalMode\n")
    grid = [
        "model=cnn,transformer",
        "norm=fewgroups,mine",
        "placement=post",
        "data=digits",
        "precision=bf16",
    ]
    pysource = ["model=transformer", "data=pysource", "norm=rmsnorm", "placement=pre,peri"]
    use_config_dirs([tmp_path])
    try:
        jobs = grid_overrides("smoke", [])[1] + grid_overrides(None, grid)[1]
        jobs += grid_overrides(None, pysource)[1]
        composing._base_config.cache_clear()
        fast = [json.dumps(compose(job)) for job in jobs]
        with monkeypatch.context() as patch:
            hydra_whole(patch)
            whole = [json.dumps(compose(job)) for job in jobs]
    finally:
        composing._base_config.cache_clear()
        use_config_dirs([])
    assert len(jobs) == 4 + 4 + 2
    assert fast == whole


@pytest.mark.parametrize("model", ["transformer", "cnn", "resnet"])
def test_a_depth_beyond_the_bound_is_refused_in_seconds_with_nothing_written(tmp_path, model):
    # `run model.depth=100000` built layers for minutes, then needed 27 GB for weights and
    # gradients alone; the deepest shipped depth is MAX_DEPTH
    from normbench.experiment.schema import MAX_DEPTH
    from tests.helpers import invoke, one_line

    runs = tmp_path / "runs"
    out = invoke("run", f"model={model}", "model.depth=100000", "--runs-dir", str(runs), seconds=20)
    one_line(out, f"model.depth=100000 is not valid; valid: an integer from 1 to {MAX_DEPTH}")
    assert not runs.exists()
    assert compose([f"model={model}", f"model.depth={MAX_DEPTH}"])["model"]["depth"] == MAX_DEPTH

"""Shell completion goes past the commands: override keys, a group's options, a key's
choices, and the sweep's preset names (bash splits ``norm=ba`` at the ``=``)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from normbench.cli import app

runner = CliRunner()


def complete(words: str, shell: str = "bash") -> list[str]:
    if shell == "bash":
        parts = words.split(" ")
        env = {"COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1)}
    else:
        env = {"_TYPER_COMPLETE_ARGS": words}
    env["_NORMBENCH_COMPLETE"] = f"complete_{shell}"
    result = runner.invoke(app, [], prog_name="normbench", env=env)
    assert result.exit_code == 0, result.output
    return result.output.split()


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("normbench run norm = ba", ["batchnorm"]),
        ("normbench run seed=1 norm = gr", ["groupnorm"]),
        ("normbench run train.schedule = ", ["constant", "cosine"]),
        ("normbench run diagnostics = t", ["true"]),
        ("normbench run norm=ba", ["norm=batchnorm"]),
    ],
)
def test_values_of_a_key_complete(words, expected):
    assert complete(words) == expected


def test_keys_and_groups_complete():
    assert complete("normbench run precisi") == ["precision="]
    keys = complete("normbench run norm")
    assert "norm=" in keys and "norm.groups=" in keys
    assert set(complete("normbench run norm =")) >= {"batchnorm", "groupnorm"}  # after the =


def test_the_sweep_completes_presets_first_then_overrides():
    assert complete("normbench sweep ba") == [
        "batch_cifar10",
        "batch_resnet",
        "batch_sensitivity",
        "batch_size=",
    ]
    assert complete("normbench sweep smoke norm = g") == ["groupnorm"]
    assert complete("normbench sweep smoke sm") == []  # a preset only comes first


def test_zsh_completes_the_whole_override():
    assert "norm=groupnorm" in " ".join(complete("normbench run norm=gr", shell="zsh"))


def test_the_sweep_option_completes_the_stores_sweep_names(tmp_path, monkeypatch):
    """``report --sweep <TAB>`` (and every reader's --sweep) lists the sweeps recorded in the
    runs directory the command names, from file names alone (issue 50, item 14)."""
    for name in ("batch_sensitivity", "batch-2", "tuned"):
        (tmp_path / "runs" / "sweeps").mkdir(parents=True, exist_ok=True)
        (tmp_path / "runs" / "sweeps" / f"{name}-20260101-000000-ab12.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert complete("normbench report --sweep ") == ["batch-2", "batch_sensitivity", "tuned"]
    assert complete("normbench report --sweep batch_") == ["batch_sensitivity"]
    assert complete("normbench report --sweep tuned,b") == [
        "tuned,batch-2",
        "tuned,batch_sensitivity",
    ]
    assert complete("normbench runs list --sweep t") == ["tuned"]
    assert complete("normbench runs export --sweep t") == ["tuned"]
    assert complete("normbench report elsewhere --sweep ") == []  # another runs directory
    (tmp_path / "runs").rename(tmp_path / "elsewhere")
    assert complete("normbench report elsewhere --sweep tu") == ["tuned"]
    assert complete("normbench report --runs-dir elsewhere --sweep tu") == ["tuned"]

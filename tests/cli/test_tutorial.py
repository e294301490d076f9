"""docs/your-own-norm.md works as written: its files are written and its commands run in order,
in an empty directory, with tiny budgets appended to every run and sweep."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import normbench

REPOSITORY = Path(normbench.__file__).resolve().parents[1]
TUTORIAL = REPOSITORY / "docs" / "your-own-norm.md"
DOCS_EXAMPLES = REPOSITORY / "scripts" / "docs_examples.py"
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def docs_examples():
    """scripts/docs_examples.py, which generates the page's console examples."""
    spec = importlib.util.spec_from_file_location("docs_examples", DOCS_EXAMPLES)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


# The exit code of each command the page shows failing (its generated examples say which).
EXIT_CODES = {
    command: code
    for example in docs_examples().EXAMPLES.values()
    for command, code in zip(
        example.commands, example.exit_codes or (0,) * len(example.commands), strict=True
    )
}
# Appended to the tutorial's `run` and `sweep` commands, replacing the page's own value of a key
# (a key given twice is refused).
TINY = [
    "train.max_steps=12",
    "train.eval_every=6",
    "train.log_every=2",
    "train.warmup_steps=2",
    "model.width=16",
    "threads=1",
]


def tutorial_steps() -> list[tuple[str, str, str]]:
    """("file", path, content) for each block with a title, ("command", line, "") for each
    ``$ `` line of a console block, in the order of the page."""
    steps = []
    for language, info, body in FENCE.findall(TUTORIAL.read_text()):
        title = re.search(r'title="([^"]+)"', info)
        if title:
            steps.append(("file", title.group(1), body))
        elif language == "console":
            steps += [("command", line[2:], "") for line in body.splitlines() if line[:2] == "$ "]
    return steps


def argv(command: str) -> list[str]:
    """A tutorial command as this interpreter runs it, with tiny budgets for runs and sweeps."""
    words = shlex.split(command)
    program = {"normbench": [sys.executable, "-m", "normbench"], "python": [sys.executable]}
    line = program[words[0]] + words[1:]
    if words[:2] in (["normbench", "run"], ["normbench", "sweep"]):
        tiny = TINY + (
            [] if any(w.startswith("data=") for w in words) else ["data.num_samples=600"]
        )
        tiny += ["seed=range(2)"] if words[1] == "sweep" else []
        replaced = {t.partition("=")[0] for t in tiny}
        line = [w for w in line if w.partition("=")[0] not in replaced] + tiny
    return line


def test_the_tutorial_has_files_and_commands_and_measured_numbers():
    steps = tutorial_steps()
    files = [what for kind, what, _ in steps if kind == "file"]
    assert files[:2] == ["mynorms.py", "grids/powernorm.yaml"]
    assert {"myconf/norm/power3.yaml", "make_waves.py", "mymodels.py"} <= set(files)
    commands = [what for kind, what, _ in steps if kind == "command"]
    assert all(command.split()[0] in ("normbench", "python") for command in commands)
    for _, what, body in steps:
        if what.endswith(".py"):
            compile(body, what, "exec")
    assert "MEASURE" not in TUTORIAL.read_text()


def test_the_tutorials_norm_keeps_the_contract(tmp_path, monkeypatch):
    from normbench.layers.conformance import check_norm

    body = next(body for kind, what, body in tutorial_steps() if what == "mynorms.py")
    (tmp_path / "mynorms_tutorial.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    from mynorms_tutorial import PowerNorm

    for p in (2.0, 3.0):
        assert all(row.passed for row in check_norm(PowerNorm, {"p": p}))


@pytest.mark.slow
def test_the_tutorial_runs_as_written(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])
        ),
        "COLUMNS": "200",
    }
    outputs = {}
    for kind, what, body in tutorial_steps():
        if kind == "file":
            (tmp_path / what).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / what).write_text(body)
            continue
        done = subprocess.run(
            argv(what), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        expected = EXIT_CODES.get(what, 0)
        assert done.returncode == expected, f"$ {what}\n{done.stdout}\n{done.stderr}"
        outputs[what] = done.stdout
    assert "18 of 18 checks hold" in outputs["normbench check-norm mynorms:PowerNorm"]
    report = outputs["normbench report --sweep powernorm"]
    assert "mynorms:PowerNorm" in report and "batchnorm" in report
    assert "power3" in outputs["normbench list --config-dir myconf"]
    # the page reaches the language model (issue 62): PowerNorm, by path and by name, on it
    language_model = outputs["normbench report --sweep powernorm-lm"]
    assert "val bpb" in language_model and "mynorms:PowerNorm(p=2)" in language_model
    assert "p=3" in language_model or "power3" in language_model
    assert len(list((tmp_path / "runs").glob("*-powernorm-*"))) >= 3

"""A fresh install starts (issue 62): every package normbench imports is declared, CI installs
exactly the README's line first, and the lower bounds CI installs are the declared ones."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from lower_bounds import lower_bounds  # noqa: E402


def install_block(readme: str) -> list[str]:
    """The commands of the README's Install section's first bash block."""
    section = readme.split("## Install", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def test_ci_installs_the_readmes_project_line_alone_first():
    readme_lines = install_block((ROOT / "README.md").read_text())
    project_line = next(line for line in readme_lines if line.startswith("pip install -e"))
    assert project_line == "pip install -e '.[test]'"
    ci = (ROOT / ".ci" / "run").read_text()
    installs = re.findall(r"python -m pip install --quiet (-e \S+)", ci)
    assert installs[0] == project_line.removeprefix("pip install "), installs
    # and the README's test command runs in that environment before any extra is installed
    first_extra = ci.index("'.[test,tracking,docs]'")
    assert ci.index("python -m pytest -q   #") < first_extra


def test_every_imported_package_is_declared_and_every_declared_one_used():
    """deptry (CI's check, a test extra) over the package, scripts, benchmarks and tests: an
    import of an undeclared package (typer 0.29 stopped bringing click) fails here."""
    deptry = shutil.which("deptry") or pytest.fail("deptry is in the test extra")
    result = subprocess.run([deptry, "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_lower_bounds_pin_every_runtime_dependency_but_torch(tmp_path):
    pins = lower_bounds(ROOT / "pyproject.toml")
    names = [pin.split("==")[0] for pin in pins]
    assert "torch" not in names and len(names) == len(set(names))
    assert "typer==0.29" in pins  # the first typer without click, which the CLI is written for
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["pandas"]\n')
    with pytest.raises(SystemExit, match="'pandas': no lower bound"):
        lower_bounds(pyproject)

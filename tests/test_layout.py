"""The package's shape: imports point one way (from a role to a role below it, never in a
circle), the tree is the one docs/design.md draws, and every package ships in the wheel."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "normbench"
# The roles from the bottom up (docs/design.md, "Layout"): a module may import its own role
# and the roles before it. The modules at the package's top level (api, the norms redirect,
# __main__) sit above every role but the command line.
ORDER = (
    "core",
    "data",
    "layers",
    "experiment",
    "store",
    "trackers",
    "training",
    "report",
    "sweeps",
    "studies",
    "api",
    "norms",
    "cli",
    "__main__",
)


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The normbench modules ``name`` imports, at module level or inside functions."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("normbench"):
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def role(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_no_module_imports_itself_through_a_circle():
    edges = graph()
    # a package's __init__ importing its own modules is how a package re-exports; a module
    # importing its package __init__ reads its docstring only: neither is a dependency
    in_circle = []
    for start in edges:
        seen, todo = set(), [start]
        while todo:
            for target in edges[todo.pop()]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        if start in seen:
            in_circle.append(start)
    assert not in_circle, f"modules in an import cycle: {sorted(in_circle)}"


def test_every_import_points_from_a_role_to_itself_or_a_role_below():
    wrong = []
    for module, targets in graph().items():
        here = role(module)
        if here == "__init__":  # normbench/__init__.py: the version, nothing else
            assert not targets, targets
            continue
        for target in targets:
            there = role(target)
            if there == "__init__":  # `from normbench import __version__`
                continue
            if ORDER.index(there) > ORDER.index(here):
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports pointing up the layers:\n" + "\n".join(sorted(wrong))


def test_every_role_is_a_folder_whose_docstring_says_what_it_owns_and_may_import():
    for folder in sorted(p for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"):
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
        assert doc and "Owns" in doc and "May import" in doc, folder
        assert folder.name in ORDER, f"{folder.name} is not a role of docs/design.md's order"


def contract(folder: str) -> set[str] | None:
    """What a role's docstring says it may import: the names of its "May import:" sentence
    before any parenthesis or semicolon (roles, or role.module), None for "every role", an
    empty set for "nothing"."""
    doc = " ".join(
        ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text())).split()
    )
    sentence = re.split(r"\.(?:\s|$)", doc.split("May import:", 1)[1], maxsplit=1)[0].strip()
    if sentence.startswith("every role"):
        return None
    if sentence.startswith("nothing"):
        return set()
    named = set()
    for part in re.split(r"\([^)]*\)|,|;", sentence):
        name = part.strip().removeprefix("and ").strip()
        if name:
            named.add(name)
    return named


def test_every_role_imports_only_what_its_docstring_says_it_may():
    """Each package's "May import:" line is a contract this test holds: a role naming a role
    may import any of its modules; naming role.module, that module alone."""
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__")
    known = modules()
    broken = []
    for folder in folders:
        allowed = contract(folder)
        if allowed is None:
            continue
        for name in allowed:  # a name the line gives is a role or a module of one
            assert f"normbench.{name}" in known, f"{folder}: 'May import: {name}' names nothing"
        for module, targets in graph().items():
            if role(module) != folder:
                continue
            for target in targets:
                there = role(target)
                if there in (folder, "__init__"):
                    continue
                dotted = target.removeprefix("normbench.")
                if there not in allowed and not any(
                    dotted == name or dotted.startswith(f"{name}.") for name in allowed
                ):
                    broken.append(f"{module} -> {target} (May import: {sorted(allowed)})")
    assert not broken, "imports the docstrings do not allow:\n" + "\n".join(sorted(broken))


def test_a_broken_contract_is_caught(monkeypatch):
    """The check above can fail: a role that may import nothing but core is caught when one
    of its modules imports store."""
    real = graph()
    fake = {**real, "normbench.data.splits_fake": {"normbench.store.catalog"}}
    monkeypatch.setitem(globals(), "graph", lambda: fake)
    with pytest.raises(AssertionError, match="normbench.data.splits_fake -> normbench.store"):
        test_every_role_imports_only_what_its_docstring_says_it_may()


def test_design_md_draws_the_tree_as_it_is():
    text = (ROOT / "docs" / "design.md").read_text()
    layout = text.split("## Layout", 1)[1]
    drawn = set(re.findall(r"^\s*normbench/([a-z_]+)/", layout, flags=re.M))
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert drawn == folders
    for folder in folders:
        for module in (PACKAGE / folder).glob("*.py"):
            if module.stem != "__init__":
                assert module.stem in layout, f"{folder}/{module.name} missing from the layout"


def test_the_wheel_takes_the_whole_package_and_conf():
    """The wheel's contents are checked by building it (tests/test_packaging.py); here, that
    its declaration names the package and ships conf/ inside it."""
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    assert wheel["targets"]["wheel"]["packages"] == ["normbench"]
    assert wheel["targets"]["wheel"]["force-include"] == {"conf": "normbench/conf"}

"""Print pip constraints that pin every runtime dependency at the lower bound pyproject.toml
declares (``pandas>=2.1`` -> ``pandas==2.1``), so CI can install the oldest versions the
project claims to support and run normbench on them.

torch is left out: its lower bound (2.6) is only published as a CUDA build of gigabytes on
PyPI, so CI keeps the pinned CPU build and says so (docs/development.md).

    python scripts/lower_bounds.py > lower.txt && pip install -c lower.txt -e .
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI (the test extra)
    import tomli as tomllib

KEPT_AT_PIN = {"torch"}


def lower_bounds(pyproject: Path) -> list[str]:
    """``name==version`` for each ``name>=version`` among the project's runtime dependencies."""
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    pins = []
    for requirement in dependencies:
        found = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)\s*", requirement)
        if found is None:
            raise SystemExit(f"{requirement!r}: no lower bound of the form name>=version")
        name, version = found.groups()
        if name not in KEPT_AT_PIN:
            pins.append(f"{name}=={version}")
    return pins


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    sys.stdout.write("".join(f"{pin}\n" for pin in lower_bounds(root / "pyproject.toml")))

"""cli: the `normbench` command line. Thin: parse, call the roles below, print.

Owns: the commands (one module each: run, sweep, report, runs, choices, findings, cost, data)
and what they share (app). May import: every role; nothing imports it. `normbench --help` and
`list` never import torch: each command imports what it needs once its input is valid.
"""

from __future__ import annotations

import sys

# Importing a command's module registers it; `normbench --help` lists them in this order.
from normbench.cli import run, sweep, report, runs, choices, findings, cost, data  # noqa: F401  # isort: skip
from normbench.cli.app import app

__all__ = ["app", "main"]


def main() -> None:
    app(prog_name="normbench")


if __name__ == "__main__":
    sys.exit(main())

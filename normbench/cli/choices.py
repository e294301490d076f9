"""`normbench list` (what can be chosen) and `normbench check-norm` (does a norm keep the
contract?)."""

from __future__ import annotations

from typing import Annotated

import typer

from normbench.cli.app import ConfigDirs, app, fail, terminal


@app.command(
    "list", short_help="What can be chosen, where each choice comes from, what is refused."
)
def list_choices(config_dir: ConfigDirs = None) -> None:
    """What can be chosen (models, norms, placements, data, precisions, sweep presets), where
    each comes from, and what is refused."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from normbench.core.errors import UsageError
    from normbench.experiment.options import (
        PLUGIN_GROUPS,
        describe_option,
        options,
        use_config_dirs,
    )
    from normbench.experiment.rules import RULES
    from normbench.experiment.schema import DEVICES, GROUPS
    from normbench.sweeps.presets import presets

    try:
        use_config_dirs(config_dir or [])
        choices = {group: options(group) for group in GROUPS}
        preset_files = presets()
    except UsageError as err:
        raise fail(str(err)) from None
    console = Console()
    for group in GROUPS:
        table = Table(title=f"{group}=", title_justify="left", show_header=False)
        for name, option in choices[group].items():
            description = Text(describe_option(group, name))
            if option.source != "normbench":  # which directory or package, on its own line
                description.append(f"\nfrom {option.source}", style="dim")
            table.add_row(name, Text(origin(option.source), style="dim"), description)
        if group in PLUGIN_GROUPS:
            table.add_row(
                "package.module:Object",
                Text("your code", style="dim"),
                f"your own {group} by import path (docs/your-own-norm.md)",
            )
        console.print(table)
    console.print(f"device=  {' | '.join(DEVICES)}")
    console.print(f"sweep presets:  {' | '.join(preset_files)}", soft_wrap=not console.is_terminal)
    refused = Table(title="Refused before training", title_justify="left", show_header=False)
    for rule in RULES:
        refused.add_row(rule.summary)
    console.print(refused)


def origin(source: str) -> str:
    """Where an option comes from, in a word for every row of `normbench list`: built-in,
    config dir, or plugin (an installed package's entry point)."""
    if source == "normbench":
        return "built-in"
    return "config dir" if source.startswith("config dir") else "plugin"


CHECKED_FEATURES = (
    8  # normbench.layers.conformance.FEATURES (a test keeps them equal: no torch here)
)


@app.command(
    "check-norm", short_help="Does a norm keep the contract every model relies on? (exit 0: yes)"
)
def check_norm(
    target: Annotated[
        str,
        typer.Argument(
            metavar="NORM",
            help="A norm: a shipped one (groupnorm), an installed plugin or config-directory "
            "option by name, or an import path (mypkg.norms:PowerNorm).",
        ),
    ],
    keys: Annotated[
        list[str] | None,
        typer.Argument(
            help="The norm's options as key=value, e.g. groups=4 p=3.", show_default=False
        ),
    ] = None,
    config_dir: ConfigDirs = None,
) -> None:
    """Does a norm keep the contract every model relies on? One row per check and layout;
    exit 0 only when every check holds (1 when one fails, 2 for bad input)."""
    from normbench.core.errors import UsageError
    from normbench.experiment.compose import compose
    from normbench.experiment.options import use_config_dirs

    overrides = [f"norm={target}"] + [
        key if key.startswith("norm.") else f"norm.{key}" for key in keys or []
    ]
    try:
        use_config_dirs(config_dir or [])
        # the model's width as the checks' features, so that the rules about model.width
        # (norm.groups must divide it) are about what is checked
        config = compose(["device=cpu", f"model.width={CHECKED_FEATURES}", *overrides])
    except UsageError as err:
        raise fail(
            str(err).replace(
                f"model.width={CHECKED_FEATURES}",
                f"the {CHECKED_FEATURES} features check-norm builds the norm on",
            )
        ) from None
    from rich.table import Table
    from rich.text import Text

    from normbench.core.text import plain
    from normbench.layers import conformance
    from normbench.layers.norms import norm_factory

    bound = norm_factory(config["norm"])
    rows = conformance.check_norm(bound.cls, bound.options)
    cells: dict[str, dict[str, Text]] = {}
    for row in rows:
        if row.passed:
            mark = Text("holds", "green")
        elif row.skipped:
            mark = Text("skipped (wrong shape)", "yellow")
        else:
            mark = Text.assemble(("FAILS ", "red"), plain(row.detail))
        cells.setdefault(row.name, {})[row.layout] = mark
    table = Table(title=Text(f"norm={plain(config['norm']['name'])}"), title_justify="left")
    table.add_column("check", no_wrap=True)
    for layout in conformance.LAYOUTS:
        table.add_column(layout, overflow="fold")
    for name, by_layout in cells.items():
        table.add_row(name, *(by_layout.get(layout, "-") for layout in conformance.LAYOUTS))
    console = terminal()
    console.print(table)
    failed = [row for row in rows if not row.passed]
    skipped = sum(row.skipped for row in rows)
    console.print(
        f"{len(rows) - len(failed)} of {len(rows)} checks hold"
        + ("" if failed else ": the norm keeps the contract")
        + (f"; {skipped} skipped: they read the output, whose shape is wrong" if skipped else ""),
        soft_wrap=not console.is_terminal,
    )
    if failed:
        raise typer.Exit(1)

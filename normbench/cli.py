"""The `normbench` command line. Thin: parse, call config/train/store, print.

Nothing heavy is imported at module level, so `normbench --help` and `normbench list` start
without torch; `run` imports it only once the config is valid.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Benchmark normalization layers: which norm, placed where, holds up at which batch "
    "size and precision?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

Overrides = Annotated[
    list[str] | None,
    typer.Argument(
        help="Hydra overrides, e.g. model=cnn norm=groupnorm batch_size=8 train.lr=1e-3",
        show_default=False,
    ),
]
RunsDir = Annotated[Path, typer.Option("--runs-dir", help="Where runs are stored.")]


def fail(message: str) -> typer.Exit:
    """Report bad input in one line on stderr; the caller raises the returned Exit(2)."""
    typer.echo(f"normbench: error: {message}", err=True)
    return typer.Exit(2)


def _interrupt_on_sigterm() -> None:
    """SIGTERM (a scheduler's kill, a preemption) ends a run like Ctrl-C: recorded, not lost."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


@app.command()
def run(
    overrides: Overrides = None,
    cfg: Annotated[bool, typer.Option("--cfg", help="Print the resolved config and exit.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Run again even if complete.")] = False,
    runs_dir: RunsDir = Path("runs"),
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Train one model with one norm, placement, batch size and precision."""
    from normbench.config import UsageError, compose

    try:
        config = compose(overrides or [])
    except UsageError as err:
        raise fail(str(err)) from None
    from normbench.store import run_id

    if cfg:
        from omegaconf import OmegaConf

        typer.echo(f"# run_id: {run_id(config)}")
        typer.echo(OmegaConf.to_yaml(OmegaConf.create(config)), nl=False)
        return
    from normbench.train import run_experiment

    _interrupt_on_sigterm()
    try:
        outcome = run_experiment(config, runs_dir, force=force, progress=not quiet)
    except UsageError as err:
        raise fail(str(err)) from None
    except KeyboardInterrupt:
        typer.echo(f"interrupted: metrics so far kept in {runs_dir / run_id(config)}", err=True)
        raise typer.Exit(130) from None
    typer.echo(summary_line(outcome, config))
    if outcome.status == "failed":
        raise typer.Exit(1)


def summary_line(outcome, config: dict) -> str:
    """One line: status, final val acc, steps to target, wall time, run dir."""
    s = outcome.summary
    if outcome.status == "failed":
        return f"failed: {outcome.error}  ({outcome.path})"
    target = config["target"]
    comparison = ">=" if target["metric"] == "val_acc" else "<="
    reached = (
        f"step {s['steps_to_target']} ({s['time_to_target_s']:.1f} s)"
        if s.get("steps_to_target")
        else "not reached"
    )
    val = "-" if s.get("final_val_acc") is None else f"{s['final_val_acc']:.4f}"
    test = f"  test acc {s['test_acc']:.4f}" if s.get("test_acc") is not None else ""
    prefix = "skipped, already finished (--force runs it again): " if outcome.skipped else ""
    return (
        f"{prefix}{outcome.status}  val acc {val}{test}  "
        f"{target['metric']} {comparison} {target['value']}: {reached}  "
        f"train {s.get('train_s', 0):.1f} s  wall {s.get('wall_s', 0):.1f} s  {outcome.path}"
    )


@app.command("list")
def list_choices() -> None:
    """What can be chosen (models, norms, placements, data, precisions) and what is refused."""
    from rich.console import Console
    from rich.table import Table

    from normbench.config import DEVICES, GROUPS, RULES, describe_option, group_options

    console = Console()
    for group in GROUPS:
        table = Table(title=f"{group}=", title_justify="left", show_header=False)
        for option in group_options(group):
            table.add_row(option, describe_option(group, option))
        console.print(table)
    console.print(f"device=  {' | '.join(DEVICES)}")
    refused = Table(title="Refused before training", title_justify="left", show_header=False)
    for rule in RULES:
        refused.add_row(rule.summary)
    console.print(refused)


def main() -> None:
    app(prog_name="normbench")


if __name__ == "__main__":
    sys.exit(main())

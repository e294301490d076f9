"""The command line's shared parts: the Typer apps, the one-line error convention, the
argument types every command takes, and the terminal console.

Nothing heavy is imported at module level, so `normbench --help` and `normbench list` start
without torch; each command imports what it needs once its input is valid.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.exceptions import TyperException


class OneLineErrors(TyperGroup):
    """Usage errors that the command-line parser finds (an unknown option, a missing argument,
    a value of the wrong type) in the same one line as normbench's own, exit 2."""

    def __init__(self, **attrs) -> None:
        super().__init__(**attrs)
        plain_types(self)

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent, **extra)
        except TyperException as err:
            raise usage_exit(err) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TyperException as err:
            raise usage_exit(err) from None


# Typer's names of a value's type, as click names them in help
CLICK_TYPES = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "path": "PATH", "Path": "PATH"}


def plain_types(command: TyperCommand | TyperGroup) -> None:
    """Help that names what a value is as click does (TEXT, INTEGER, FLOAT, PATH, with ``...``
    where several are taken) and a flag by nothing, for this command and every command under
    it: typer 0.29 shows Python's types (``<bool>``, ``<list[str]>``, ``<list[Path]>``),
    which a user of the command line never writes. Through ``get_params``, which also hands
    out the options click and typer add (--help, --install-completion)."""
    get_params = command.get_params

    def plain_params(ctx: typer.Context) -> list[TyperOption | TyperArgument]:
        params = get_params(ctx)
        for param in params:
            if not getattr(param.display_type_rich, "plain", False):
                param.display_type_rich = _plain_type(param)
        return params

    command.get_params = plain_params
    for sub in getattr(command, "commands", {}).values():
        plain_types(sub)


def _plain_type(param: TyperOption | TyperArgument) -> Callable[[typer.Context], str]:
    """A parameter's type as click names it (``<list[Path]>`` is PATH...), a flag's as nothing."""
    typer_type = param.display_type_rich  # typer's own

    def shown(ctx: typer.Context) -> str:
        if getattr(param, "is_flag", False):
            return ""
        name = typer_type(ctx).strip("<>.")
        several = name.startswith("list[") or param.nargs != 1
        name = name.removeprefix("list[").removesuffix("]")
        return CLICK_TYPES.get(name, name.upper()) + "..." * several

    shown.plain = True
    return shown


def usage_exit(err: TyperException) -> typer.Exit:
    """``normbench: error: No such option: -0 (see normbench run --help)``."""
    context = getattr(err, "ctx", None)
    command = context.command_path if context else "normbench"
    message = _override_hint(err, " ".join(err.format_message().split()))
    echo_error(f"normbench: error: {message} (see {command} --help)")
    return typer.Exit(getattr(err, "exit_code", 2))


def _override_hint(err: TyperException, message: str) -> str:
    """``run --model cnn`` is an override written as an option: name the override instead of
    click's possible options."""
    from normbench.experiment.schema import GROUPS, SCHEMA

    name = getattr(err, "option_name", None) if type(err).__name__ == "NoSuchOption" else None
    key = (name or "").lstrip("-")
    if not name or key.split(".")[0] not in {k.split(".")[0] for k in SCHEMA} | set(GROUPS):
        return message
    given = [a.split("=", 1)[1] for a in sys.argv if a.startswith(f"{name}=")]
    if not given and name in sys.argv[:-1]:
        following = sys.argv[sys.argv.index(name) + 1]
        given = [following] if not following.startswith("-") else []
    return (
        f"No such option: {name}; overrides are KEY=VALUE: {key}={given[0] if given else 'VALUE'}"
    )


app = typer.Typer(
    cls=OneLineErrors,
    help="Benchmark normalization layers: which norm, placed where, holds up at which batch "
    "size and precision?",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
runs_app = typer.Typer(
    help="List, inspect, compare and clean the runs in a runs directory.",
    no_args_is_help=True,
)
app.add_typer(runs_app, name="runs")
data_app = typer.Typer(
    help="Fetch a data set from the Hugging Face hub once (the only command that uses the "
    "network), and list the cached ones.",
    no_args_is_help=True,
)
app.add_typer(data_app, name="data")


def complete_override(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of an override: ``no<TAB>`` gives the keys (``norm=``,
    ``norm.groups=``), ``norm=<TAB>`` the norms, ``train.schedule=<TAB>`` its choices. Bash
    splits ``norm=ba`` into ``norm``, ``=``, ``ba`` (``=`` breaks its words): then the value
    alone is completed. Reads the option files and the schema only (no torch, no Hydra)."""
    from normbench.core.errors import UsageError
    from normbench.experiment.options import options
    from normbench.experiment.schema import GROUPS, OPTION_SCHEMA, SCHEMA

    args = _words_before(ctx)
    keys = dict(SCHEMA)
    for by_option in OPTION_SCHEMA.values():
        for option_keys in by_option.values():
            keys.update(option_keys)
    if not incomplete and args and _bash_word() == "=":  # bash, the cursor just after `norm=`
        # readline replaces the text after its last word break, `=`: the value alone
        key, partial, prefix = args[-1], "", ""
    elif len(args) >= 2 and args[-1] == "=":  # bash, `norm=ba`
        key, partial, prefix = args[-2], incomplete, ""
    elif "=" in incomplete:
        key, _, partial = incomplete.partition("=")
        prefix = f"{key}="
    else:
        names = sorted({*GROUPS, *keys})
        return [f"{name}=" for name in names if name.startswith(incomplete)]
    if key in GROUPS:
        try:
            values = list(options(key))
        except UsageError:  # a config directory defines an option twice: nothing to offer
            values = []
    elif key in keys:
        spec = keys[key]
        values = list(spec.choices) or (["true", "false"] if spec.kind is bool else [])
    else:
        values = []
    return [f"{prefix}{value}" for value in values if value.startswith(partial)]


def _bash_word() -> str:
    """The word bash completes (click turns a lone ``=`` into an empty word)."""
    words, index = os.environ.get("COMP_WORDS", "").split(), os.environ.get("COMP_CWORD", "")
    return words[int(index)] if index.isdigit() and int(index) < len(words) else ""


def _words_before(ctx: typer.Context) -> list[str]:
    """The command's arguments before the one being completed, as parsed so far."""
    return [str(word) for word in ctx.params.get("overrides") or ctx.params.get("arguments") or []]


def complete_sweep(ctx: typer.Context, incomplete: str) -> list[str]:
    """The sweep's first argument may be a preset by name; every argument an override."""
    from normbench.core.errors import UsageError
    from normbench.sweeps.presets import presets

    overrides = complete_override(ctx, incomplete)
    if _words_before(ctx) or "=" in incomplete:
        return overrides
    try:
        names = [name for name in presets() if name.startswith(incomplete)]
    except UsageError:
        names = []
    return names + overrides


def complete_sweep_name(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of ``--sweep``: the sweeps recorded in the runs directory the command
    line names so far (a first argument without ``=``, or --runs-dir; else ./runs), after
    the names a list ``a,b`` already holds. Reads file names only (no torch, no pandas)."""
    from normbench.store.records import recorded_sweeps

    words = _words_before(ctx) or [str(word) for word in ctx.args]  # args: not yet parsed
    runs_dir = Path(words[0]) if words and "=" not in words[0] else ctx.params.get("runs_dir")
    done, _, partial = incomplete.rpartition(",")
    taken = set(done.split(","))
    return [
        f"{done},{name}" if done else name
        for name in recorded_sweeps(Path(runs_dir or "runs"))
        if name.startswith(partial) and name not in taken
    ]


SweepOption = Annotated[
    str | None,
    typer.Option(
        "--sweep",
        help="Only this sweep's runs (its latest record); a,b: several.",
        autocompletion=complete_sweep_name,
    ),
]
Overrides = Annotated[
    list[str] | None,
    typer.Argument(
        help="Hydra overrides, e.g. model=cnn norm=groupnorm batch_size=8 train.lr=1e-3",
        show_default=False,
        autocompletion=complete_override,
    ),
]
RunsDir = Annotated[Path, typer.Option("--runs-dir", help="Where runs are stored.")]
ConfigDirs = Annotated[
    list[Path] | None,
    typer.Option(
        "--config-dir",
        help="A directory of your own options (norm/, model/, data/, placement/, sweep/ YAML "
        "files), searched before NORMBENCH_CONFIG_PATH (repeatable).",
        show_default=False,
    ),
]


def show_version(value: bool) -> None:
    if value:
        from normbench import __version__

        typer.echo(f"normbench {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=show_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Benchmark normalization layers: which norm, placed where, holds up at which batch size
    and precision?"""


def fail(message: str) -> typer.Exit:
    """Report bad input in one line on stderr (control characters from a file name or a
    stored value shown as escapes); the caller raises the returned Exit(2)."""
    from normbench.core.text import plain

    echo_error(f"normbench: error: {plain(message)}")
    return typer.Exit(2)


def echo_error(line: str) -> None:
    """An error's one line on stderr. On a terminal it is broken between words at the
    terminal's width (COLUMNS, else the terminal's own), its later lines indented: the
    terminal itself would break it mid-word. Piped, it stays one line, for grep and logs."""
    import textwrap

    if sys.stderr.isatty():
        columns = os.environ.get("COLUMNS", "")
        try:
            width = int(columns) if columns.isdigit() else os.get_terminal_size(2).columns
        except OSError:  # a terminal that does not say its size
            width = 80
        line = textwrap.fill(
            line,
            width=max(width, 40),
            subsequent_indent="  ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    typer.echo(line, err=True)


def terminal():
    """A rich console; piped output honours COLUMNS (default 100) rather than 80, and its
    lines end where their text does (``StrippedLines``)."""

    from rich.console import Console

    if sys.stdout.isatty():
        return Console()
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 20 else 100
    return Console(width=width, file=StrippedLines(sys.stdout))


class StrippedLines(io.TextIOBase):
    """A text stream less the spaces rich pads each line of a table with: piped output is
    read, diffed and grepped, where trailing spaces are noise (spaces at the end of a write
    wait for the next one, which says whether a newline follows them)."""

    def __init__(self, out) -> None:
        self.out, self.pending = out, ""

    def write(self, text: str) -> int:
        joined = self.pending + text
        body = joined.rstrip(" ")
        self.pending = joined[len(body) :]
        self.out.write(re.sub(r" +\n", "\n", body))
        return len(text)

    def flush(self) -> None:
        self.out.flush()


RunsFilters = Annotated[
    list[str] | None,
    typer.Argument(
        help="[RUNS_DIR] [FILTER ...]: filters in override syntax, e.g. norm=batchnorm",
        show_default=False,
    ),
]


def runs_dir_and_filters(
    arguments: list[str] | None, runs_dir: Path, ctx: typer.Context | None = None
) -> tuple[Path, list[str]]:
    """``[RUNS_DIR] [FILTER ...]``: a first argument without ``=`` is the runs directory; the
    rest are filters. ``ctx``: the command's, to refuse a runs directory named both ways,
    differently (which one was meant cannot be guessed; one was silently ignored before)."""
    from normbench.core.errors import UsageError

    arguments = list(arguments or [])
    if arguments and "=" not in arguments[0]:
        named = Path(arguments.pop(0))
        source = ctx.get_parameter_source("runs_dir") if ctx is not None else None
        if source is not None and source.name == "COMMANDLINE" and named != runs_dir:
            raise UsageError(
                f"two runs directories: {named} (the first argument) and --runs-dir "
                f"{runs_dir}; give one"
            )
        runs_dir = named
    check_runs_dir(runs_dir)
    return runs_dir, arguments


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for a block, and restored as it was (tests run
    commands in-process). Reading a store of 100,000 runs makes millions of objects and no
    cycles worth collecting: the collector's passes over them took 0.25-0.3 s of a report's
    6 s, and the peak memory is the same without them (481 MB)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def scan_started(arguments: list[str] | None, runs_dir: Path):
    """The scan of the runs directory a command names, started in a child process before the
    command imports pandas (normbench.store.scan: it overlaps the imports and the index's
    read); catalog.load_runs collects it."""
    from normbench.core.errors import UsageError
    from normbench.store.scan import Scan

    try:
        named, _ = runs_dir_and_filters(arguments, runs_dir)
    except UsageError:  # refused by the command in a moment: nothing worth scanning
        return Scan(runs_dir)
    return Scan.start(named)


def check_runs_dir(runs_dir: Path, named: str = "runs directory") -> None:
    """A runs directory that exists as something else (a file) is refused as such, and a
    pasted run directory (``runs/<run_id>``) with the command's form for that one run (a
    run_id filter of its parent). ``named``: how the command's user gave it (``--runs-dir``)."""
    from normbench.core.errors import UsageError
    from normbench.store.rundir import is_run_id

    existing = next((p for p in (runs_dir, *runs_dir.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        what = "a file" if existing == runs_dir else f"{existing} is a file"
        raise UsageError(f"{named} {runs_dir}: {what}, not a directory; valid: a directory")
    if is_run_id(runs_dir.name) and (runs_dir / "meta.json").is_file():
        raise UsageError(
            f"{runs_dir} is one run's directory, not a runs directory; name the run by a filter "
            f"of its runs directory instead: {runs_dir.parent} run_id={runs_dir.name}"
        )


StatusOption = Annotated[
    str | None,
    typer.Option("--status", help="Only these statuses, e.g. failed,interrupted."),
]

"""The console examples of README.md and docs/*.md, produced by the code they show.

A page marks each example it shows:

    <!-- example: ID -->
    ```console
    $ normbench ...
    (what it printed)
    ```
    <!-- /example -->

This script runs the commands of example ID (EXAMPLES below) for real, in a fresh directory
per scene (the examples of one scene share it, in the order listed), with the budgets written
in the commands themselves, and writes the commands and what they printed between the
markers. ``--check`` writes nothing: it runs every example again and names each block that
differs from what the code prints now in its stable parts (durations, speeds, ages, dates,
a run's live line and spacing are masked: MASKS), exit 1. tests/docs/test_examples.py runs
the check in CI.

Generated as well: the preset table (``presets``: the comment that opens each
conf/sweep/*.yaml) and docs/index.md, the site's home page: README.md with its links made
relative to docs/.

Usage: python scripts/docs_examples.py [--check] [ID ...]   (no ID: every example; about a
minute of CPU)
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- example: ([\w-]+) -->\n(.*?)<!-- /example -->", re.DOTALL)
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# Pages others generate or that hold no console example of ours.
NOT_CHECKED = {"findings.md", "index.md"}
WIDTH = "100"  # the terminal width every example is printed at


@dataclass(frozen=True)
class Example:
    """Commands run in order in a scene's directory; ``exit_codes`` the codes each must end
    with (a crash fails the generation); ``unordered``: lines whose order follows which
    worker finished first (a runs list after a parallel sweep), compared as a set."""

    scene: str
    commands: tuple[str, ...]
    exit_codes: tuple[int, ...] | None = None
    unordered: bool = False


EXAMPLES: dict[str, Example] = {
    "first-run": Example(
        "first",
        (
            "normbench run model=cnn norm=batchnorm train.max_steps=300 threads=1",
            "normbench run model=cnn norm=batchnorm train.max_steps=300 threads=1",
        ),
    ),
    "bad-input": Example(
        "first",
        ("normbench run norm=fancy", "normbench run model=cnn train.lr=nan"),
        exit_codes=(2, 2),
    ),
    "first-sweep": Example("smoke", ("normbench sweep smoke 'seed=range(3)'",)),
    "first-report": Example("smoke", ("normbench report --sweep smoke",)),
    "runs-list": Example("smoke", ("normbench runs list seed=0",), unordered=True),
    "runs-diff": Example(
        "smoke", ("normbench runs diff cnn-batchnorm-pre-fp32-b8-s0 cnn-batchnorm-pre-fp32-b16-s0",)
    ),
    "until-decided": Example(
        "smoke", ("normbench sweep smoke 'seed=range(3)' --until-decided --max-seeds 5",)
    ),
    "check-norm": Example("tutorial", ("normbench check-norm mynorms:PowerNorm",)),
    "tutorial-typo": Example(
        "tutorial", ("normbench run model=cnn norm=mynorms:PowerNorm norm.q=3",), exit_codes=(2,)
    ),
    "tutorial-plan": Example("tutorial", ("normbench sweep grids/powernorm.yaml --dry-run",)),
}
# Files a scene starts with: the code blocks of a page that carry these titles.
SCENE_FILES = {"tutorial": ("docs/your-own-norm.md", ("mynorms.py", "grids/powernorm.yaml"))}

# What differs from one run of an example to the next and is masked before comparing.
MASKS = [
    # a run's live line, as its last frame: how much of the run id fits beside the speed
    # depends on the speed's digits (the closing line below it has the same numbers)
    (re.compile(r"^.*━.* steps/s .*$", re.MULTILINE), "LIVE"),
    # a cost table's row: measured step times order its rows and set its ratios and verdicts
    (re.compile(r"^.*\b\d+(\.\d+)? ?(ms|s) \[[^\]]*\].*$", re.MULTILINE), "COST ROW"),
    (re.compile(r"\d{4}-\d\d-\d\d([T ]\d\d:\d\d(:\d\d)?)?"), "DATE"),
    (re.compile(r"\b\d+(\.\d+)? ?(steps|runs)/s\b"), "SPEED"),
    (re.compile(r"\b\d+:\d\d(:\d\d)?\b"), "CLOCK"),
    (re.compile(r"\b\d+(\.\d+)? ?(ms|s|min|h|d)\b"), "TIME"),
    (re.compile(r"[─━═]+"), "─"),  # a rule's length follows its table's widths
    (re.compile(r"[ \t]+"), " "),
]


def masked(text: str) -> str:
    for pattern, replacement in MASKS:
        text = pattern.sub(replacement, text)
    return "\n".join(line.strip() for line in text.splitlines()).strip()


def stable_lines(example_id: str, block: str) -> list[str]:
    """The parts of a block that must not change while the code does not."""
    lines = masked(block).splitlines()
    example = EXAMPLES.get(example_id)
    return sorted(lines) if example is not None and example.unordered else lines


def page_files(page: str, titles: Iterable[str]) -> dict[str, str]:
    """The code blocks of a page (relative to the repository) that carry these titles."""
    text = (REPOSITORY / page).read_text()
    blocks = {}
    for _, info, body in FENCE.findall(text):
        title = re.search(r'title="([^"]+)"', info)
        if title and title.group(1) in titles:
            blocks[title.group(1)] = body
    missing = set(titles) - set(blocks)
    if missing:
        raise SystemExit(f"{page}: no code block titled {', '.join(sorted(missing))}")
    return blocks


# The caller's settings that would change what the commands print (with NORMBENCH_* but the
# cache, such as NORMBENCH_CONFIG_PATH, and TTY_*).
USER_SETTINGS = {"COLUMNS", "LINES", "FORCE_COLOR", "CLICOLOR_FORCE", "HYDRA_FULL_ERROR"}


def environment() -> dict[str, str]:
    """The environment of every command: this checkout's normbench, one torch thread, a
    terminal WIDTH columns wide that is not a terminal (no colour, no live redraws), none of
    the caller's own settings that change output."""
    path = os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))
    inherited = {
        name: value
        for name, value in os.environ.items()
        if name not in USER_SETTINGS and not name.startswith(("NORMBENCH_", "TTY_"))
    }
    if "NORMBENCH_CACHE" in os.environ:  # where the data sets are cached changes no output
        inherited["NORMBENCH_CACHE"] = os.environ["NORMBENCH_CACHE"]
    return {
        **inherited,
        "PYTHONPATH": path,
        "COLUMNS": WIDTH,
        "OMP_NUM_THREADS": "1",
        "NO_COLOR": "1",
        "TERM": "dumb",
    }


def run_command(command: str, where: Path) -> tuple[int, str]:
    """A page's command as this interpreter runs it, in ``where``: its exit code and what it
    printed (stdout and stderr as a terminal interleaves them), lines right-stripped, the
    scene's directory written as ``.``."""
    words = shlex.split(command)
    program = {"normbench": [sys.executable, "-m", "normbench"], "python": [sys.executable]}
    done = subprocess.run(
        program[words[0]] + words[1:],
        cwd=where,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        check=False,
    )
    output = done.stdout
    for spelling in {str(where.resolve()), str(where)}:
        output = output.replace(spelling + os.sep, "").replace(spelling, ".")
    return done.returncode, "\n".join(line.rstrip() for line in output.splitlines()).strip("\n")


def console_block(commands: Iterable[str], outputs: Iterable[str]) -> str:
    pairs = zip(commands, outputs, strict=True)
    parts = [f"$ {command}\n{output}".rstrip("\n") for command, output in pairs]
    return "```console\n" + "\n\n".join(parts) + "\n```\n"


def run_examples(ids: Iterable[str]) -> dict[str, str]:
    """Each example's block, from real runs: scene by scene, each in a fresh directory."""
    ids = [name for name in EXAMPLES if name in set(ids)]
    blocks: dict[str, str] = {}
    for scene in dict.fromkeys(EXAMPLES[name].scene for name in ids):
        # a scene runs every example of it up to the last one asked for: later ones read
        # what earlier ones made
        members = [name for name in EXAMPLES if EXAMPLES[name].scene == scene]
        members = members[: max(members.index(name) for name in ids if name in members) + 1]
        with tempfile.TemporaryDirectory(prefix=f"docs-{scene}-") as directory:
            where = Path(directory)
            if scene in SCENE_FILES:
                page, titles = SCENE_FILES[scene]
                for title, body in page_files(page, titles).items():
                    (where / title).parent.mkdir(parents=True, exist_ok=True)
                    (where / title).write_text(body)
            for name in members:
                blocks[name] = run_example(name, where)
    return {name: blocks[name] for name in ids}


def run_example(name: str, where: Path) -> str:
    example = EXAMPLES[name]
    expected = example.exit_codes or (0,) * len(example.commands)
    outputs = []
    for command, code in zip(example.commands, expected, strict=True):
        returned, output = run_command(command, where)
        if returned != code:
            raise SystemExit(f"example {name}: `{command}` exited {returned}, not {code}\n{output}")
        outputs.append(output)
    return console_block(example.commands, outputs)


def presets_table() -> str:
    """Every shipped preset's header (normbench.sweeps.live.preset_header): its question, its
    design, how to run it and what it costs, how to read it and what it decides; one source,
    the preset file."""
    from normbench.sweeps.live import HEADER_PARTS, preset_header

    rows = ["| preset | question | design | run | read |", "|---|---|---|---|---|"]
    for path in sorted((REPOSITORY / "conf" / "sweep").glob("*.yaml")):
        text, cells = preset_header(str(path)), []
        for part in HEADER_PARTS:
            cell, _, text = text.partition(f" {part} ")
            cells.append(cell)
        cells.append(text)
        rows.append(f"| `{path.stem}` | " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


GENERATED: dict[str, Callable[[], str]] = {"presets": presets_table}


def pages() -> list[Path]:
    """README.md and every docs page this script owns examples of."""
    docs = sorted(p for p in (REPOSITORY / "docs").glob("*.md") if p.name not in NOT_CHECKED)
    return [REPOSITORY / "README.md", *docs]


def examples_in(text: str) -> list[str]:
    return [match.group(1) for match in MARKER.finditer(text)]


def filled(text: str, blocks: dict[str, str]) -> str:
    """The page with each marked example that ``blocks`` has replaced by its block, where
    its stable parts changed (a block that differs only in timings is left as it is, so
    that a regeneration changes only what changed)."""

    def fill(match: re.Match) -> str:
        name, shown = match.group(1), match.group(2)
        if name not in blocks or stable_lines(name, shown) == stable_lines(name, blocks[name]):
            return match.group(0)
        return f"<!-- example: {name} -->\n{blocks[name]}<!-- /example -->"

    return MARKER.sub(fill, text)


def differences(text: str, blocks: dict[str, str], label: str) -> list[str]:
    """Each marked example of a page whose stable parts differ from its block now, with a
    diff of the masked lines; an unknown example ID is a difference too."""
    found = []
    for match in MARKER.finditer(text):
        name, shown = match.group(1), match.group(2)
        if name not in blocks:
            if name not in EXAMPLES and name not in GENERATED:
                found.append(f"{label}: unknown example {name!r}")
            continue
        before, now = stable_lines(name, shown), stable_lines(name, blocks[name])
        if before != now:
            title = f"{label} ({name})"
            diff = difflib.unified_diff(before, now, title, "the code now", lineterm="")
            found.append("\n".join(diff))
    return found


def unmarked_output(text: str) -> list[str]:
    """Console blocks outside the markers that show output (a line that is not a command):
    such output is typed by hand and would go stale."""
    outside = MARKER.sub("", text)
    found = []
    for language, _, body in FENCE.findall(outside):
        if language != "console":
            continue
        lines = [line for line in body.splitlines() if line.strip()]
        continued = False
        for line in lines:
            if not (line.startswith("$ ") or continued):
                found.append(line)
                break
            continued = line.endswith("\\")
    return found


def home_page() -> str:
    """docs/index.md: README.md, its links into docs/ made relative to docs/."""
    text = (REPOSITORY / "README.md").read_text()
    note = "<!-- generated from README.md by scripts/docs_examples.py: edit README.md -->\n"
    return note + re.sub(r"\]\(docs/", "](", text)


def all_blocks(ids: Iterable[str] | None = None) -> dict[str, str]:
    chosen = set(EXAMPLES) | set(GENERATED) if ids is None else set(ids)
    unknown = chosen - set(EXAMPLES) - set(GENERATED)
    if unknown:
        raise SystemExit(f"unknown example {sorted(unknown)[0]}; valid: {', '.join(EXAMPLES)}")
    blocks = run_examples(chosen & set(EXAMPLES))
    return {**blocks, **{name: GENERATED[name]() for name in chosen & set(GENERATED)}}


def check(blocks: dict[str, str]) -> list[str]:
    """Every difference between the pages and the code now, and hand-typed output."""
    found = []
    for page in pages():
        label = str(page.relative_to(REPOSITORY))
        text = page.read_text()
        found += differences(text, blocks, label)
        found += [
            f"{label}: console output outside an example: {line!r}"
            for line in unmarked_output(text)
        ]
    index = REPOSITORY / "docs" / "index.md"
    if not index.exists() or index.read_text() != home_page():
        found.append("docs/index.md is not README.md as generated")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("ids", nargs="*", help="examples to run (default: all)")
    arguments = parser.parse_args()
    blocks = all_blocks(arguments.ids or None)
    if arguments.check:
        found = check(blocks)
        print("\n\n".join(found) if found else f"{len(blocks)} examples match the code")
        return 1 if found else 0
    for page in pages():
        text = page.read_text()
        new = filled(text, blocks)
        if new != text:
            page.write_text(new)
            print(f"wrote {page.relative_to(REPOSITORY)}")
    (REPOSITORY / "docs" / "index.md").write_text(home_page())
    return 0


if __name__ == "__main__":
    sys.exit(main())

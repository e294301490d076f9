"""The documentation cannot go stale: every console example of README.md and docs/*.md is
what its commands print now (scripts/docs_examples.py runs them for real), a changed example
fails, the numbers the prose quotes are the code's, and the README stays a short page whose
links all lead somewhere."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
SCRIPT = REPOSITORY / "scripts" / "docs_examples.py"
README = REPOSITORY / "README.md"


def load_script():
    spec = importlib.util.spec_from_file_location("docs_examples", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


docs = load_script()


@pytest.fixture(scope="module")
def blocks() -> dict[str, str]:
    """Every example, run now: a minute or so of CPU (two sweeps of tiny runs, one run,
    check-norm, reports)."""
    return docs.all_blocks()


# The tests that run the examples share one worker, so that they run once (--dist loadgroup).
one_worker = pytest.mark.xdist_group("docs_examples")


@pytest.mark.slow
@one_worker
def test_every_example_is_what_the_code_prints_now(blocks):
    found = docs.check(blocks)
    assert not found, (
        "\n\n".join(found)
        + "\n\nregenerate with: python scripts/docs_examples.py (then review and commit)"
    )


@pytest.mark.slow
@one_worker
def test_a_changed_example_fails(blocks):
    """A number edited by hand in a copy of the README fails the check; a duration does not
    (it is masked)."""
    text = README.read_text()
    match = re.search(
        r"(<!-- example: first-run -->.*?complete  val acc )(\d\.\d+)", text, re.DOTALL
    )
    assert match, "README.md's first run shows no val acc"
    edited = text[: match.end(1)] + "0.1234" + text[match.end(2) :]
    found = docs.differences(edited, blocks, "README.md (edited)")
    assert len(found) == 1 and "0.1234" in found[0] and "first-run" in found[0], found
    timing = re.sub(r"train \d+(\.\d+)? s", "train 999.9 s", text, count=1)
    assert timing != text
    assert docs.differences(timing, blocks, "README.md (slower)") == []


def test_differences_name_the_example_and_the_line():
    block = "```console\n$ normbench run x\nval acc 0.9606  train 8.9 s\n```\n"
    page = f"intro\n<!-- example: first-run -->\n{block}<!-- /example -->\n"
    assert docs.differences(page, {"first-run": block}, "p.md") == []
    slower = page.replace("8.9 s", "12.0 s").replace("0.9606  train", "0.9606 train")
    assert docs.differences(slower, {"first-run": block}, "p.md") == []
    live = "…b32-s0-228e94e2 ━━━━ 300/300 loss 0.409 val acc 0.961 34 steps/s 0:00:10\n"
    faster = "…-s0-228e94e2 ━━━━ 300/300 loss 0.409 val acc 0.961 134 steps/s 0:00:02\n"
    with_live = page.replace("val acc 0.9606", live + "val acc 0.9606")
    shown = {"first-run": block.replace("val acc 0.9606", faster + "val acc 0.9606")}
    assert docs.differences(with_live, shown, "p.md") == []
    worse = page.replace("0.9606", "0.9605")
    (found,) = docs.differences(worse, {"first-run": block}, "p.md")
    assert "p.md (first-run)" in found and "-val acc 0.9605" in found
    unknown = page.replace("first-run", "first-runs")
    assert docs.differences(unknown, {}, "p.md") == ["p.md: unknown example 'first-runs'"]


def test_output_typed_outside_an_example_is_found():
    page = "```console\n$ normbench run \\\n    model=cnn\n$ normbench report\n```\n"
    assert docs.unmarked_output(page) == []
    typed = "```console\n$ normbench runs list\nrun id  status\n```\n"
    assert docs.unmarked_output(typed) == ["run id  status"]
    marked = f"<!-- example: runs-list -->\n{typed}<!-- /example -->\n"
    assert docs.unmarked_output(marked) == []


def test_no_page_shows_output_typed_by_hand_and_every_example_is_known():
    for page in docs.pages():
        text = page.read_text()
        assert docs.unmarked_output(text) == [], page.name
        for name in docs.examples_in(text):
            assert name in docs.EXAMPLES or name in docs.GENERATED, (page.name, name)


def test_generated_pages_are_current():
    """docs/index.md is README.md's copy and the preset table is the preset files'."""
    assert (REPOSITORY / "docs" / "index.md").read_text() == docs.home_page()
    sweeps = (REPOSITORY / "docs" / "sweeps.md").read_text()
    assert docs.differences(sweeps, {"presets": docs.presets_table()}, "sweeps.md") == []
    assert "presets" in docs.examples_in(sweeps)


def test_the_readme_fits_a_screen_or_three():
    assert len(README.read_text().splitlines()) < 200


def test_every_link_in_the_readme_leads_to_a_page_that_exists():
    text = README.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert len(links) >= 10
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = REPOSITORY / path
        assert target.is_file(), link
        if anchor and target.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", target.read_text(), re.MULTILINE)
            slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
            assert anchor in slugs, link


def test_every_docs_page_is_in_the_site():
    """mkdocs.yml's nav names every page under docs/ (mkdocs build --strict then builds them
    all; .ci/run runs it)."""
    import yaml

    config = yaml.safe_load((REPOSITORY / "mkdocs.yml").read_text())

    def pages(entries) -> set[str]:
        found = set()
        for entry in entries:
            value = entry if isinstance(entry, str) else next(iter(entry.values()))
            found |= pages(value) if isinstance(value, list) else {value}
        return found

    on_disk = {path.name for path in (REPOSITORY / "docs").glob("*.md")}
    assert pages(config["nav"]) == on_disk
    assert config["theme"]["font"] is False  # Google Fonts would be fetched at view time


def test_the_numbers_the_prose_quotes_are_the_codes():
    """Numbers in prose that no example prints, checked where they come from."""
    from normbench.experiment.compose import compose

    lm = compose(["data=pysource"])
    running = (REPOSITORY / "docs" / "running.md").read_text()
    quoted = re.search(
        r"width (\d+), depth (\d+), context (\d+) bytes, batch (\d+), ([\d,]+) steps", running
    )
    assert quoted, "docs/running.md no longer states the language model's defaults"
    width, depth, context, batch, steps = quoted.groups()
    assert (lm["model"]["width"], lm["model"]["depth"], lm["data"]["context"]) == (
        int(width),
        int(depth),
        int(context),
    )
    assert (lm["batch_size"], lm["train"]["max_steps"]) == (int(batch), int(steps.replace(",", "")))
    smoke = (REPOSITORY / "conf" / "sweep" / "smoke.yaml").read_text()
    readme = README.read_text()
    steps_quoted = re.search(r"(\d+) steps and three seeds decide little", readme)
    assert steps_quoted and f"train.max_steps: {steps_quoted.group(1)}\n" in smoke
    assert "'seed=range(3)'" in readme
    grid = (REPOSITORY / "docs" / "your-own-norm.md").read_text()
    assert "Three seeds of 400 steps" in grid
    assert "  seed: range(3)\n  train.max_steps: 400\n" in grid


@pytest.mark.parametrize(
    ("quoted", "overrides", "key", "value"),
    [
        ("`val_acc` (default, 0.85)", [], "target.value", 0.85),
        ("(pysource: 2.5)", ["data=pysource"], "target.value", 2.5),
        ("α's initial value (default 0.5)", ["norm=dyt"], "norm.alpha_init", 0.5),
        ("s's (default 0)", ["norm=derf"], "norm.shift_init", 0.0),
        ("(default 0.25)", ["placement=mix"], "placement.post_fraction", 0.25),
        ("`muon_lr` (0.02;", ["train.optimizer=muon"], "train.muon_lr", 0.02),
        ("`muon_momentum` (0.95,", ["train.optimizer=muon"], "train.muon_momentum", 0.95),
    ],
)
def test_the_config_tables_defaults_are_the_configs(quoted, overrides, key, value):
    """docs/running.md's key table quotes these defaults: each is the composed config's."""
    from normbench.experiment.compose import compose

    assert quoted in (REPOSITORY / "docs" / "running.md").read_text()
    config = compose(["model=transformer", *overrides])
    group, name = key.split(".")
    assert config[group][name] == value

"""The trusted reader (normbench.core.files) and the text made safe for where it is shown
(normbench.core.text): no module opens an untrusted file any other way, YAML reads as PyYAML's
safe loader reads it except for what is refused, parquet is bounded, markdown is inert."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from normbench.core.errors import StoreError
from normbench.core.files import (
    check_parquet_ends,
    open_directory,
    parse_yaml,
    read_bytes,
    read_parquet,
)
from normbench.core.text import escape_markdown

PACKAGE = Path(__file__).resolve().parents[2] / "normbench"
# Every way of reading a file, and the few places that may use one, each with its reason.
READS = re.compile(
    r"\.read_text\(|\.read_bytes\(|(?<![\w.])open\(|(?<!Index)\.open\(|os\.open\(|read_parquet\(|"
    r"read_table\(|ParquetFile\(|read_metadata\(|json\.load\(|yaml\.(safe_)?load\(|"
    r"torch\.load\(|np\.load\(|OmegaConf\.load\(|sqlite3\.connect\(|pd\.read_"
)
ALLOWED = {
    ("core/files.py", "*"): "the trusted reader itself",
    ("store/rundir.py", "os.open("): "lock files: opened with O_NOFOLLOW, never read",
    ("store/provenance.py", ".read_bytes("): "normbench's and the plugins' source code",
    ("data/pysource.py", ".read_bytes("): "Python's own standard library, the corpus",
    ("experiment/compose.py", "OmegaConf.load("): "conf/, shipped inside the package",
    ("experiment/options.py", "OmegaConf.load("): "conf/, shipped inside the package",
    ("sweeps/launchers.py", "OmegaConf.load("): "conf/, shipped inside the package",
    ("training/checkpoint.py", "torch.load("): "a handle from open_regular, weights_only",
    ("layers/conformance.py", "torch.load("): "a buffer it saved itself a line before",
    ("store/index.py", "sqlite3.connect("): "the index: checked files, the opened path too",
    ("store/scan.py", "open("): "the two ends of a pipe to its own forked child, no file",
    ("store/scan.py", "os.open("): "/dev/null, for the forked child's standard streams",
    ("data/hubfetch.py", "read_parquet("): "core.files.read_parquet: a fetched, checked file",
    ("data/hubfetch.py", ".open("): "Pillow decoding bytes already read (a BytesIO)",
    ("report/diagnostics.py", "read_parquet("): "core.files.read_parquet, the bounded reader",
    ("store/rundir.py", "read_parquet("): "core.files.read_parquet: a run's metrics, diagnostics",
    ("api.py", "read_parquet("): "core.files.read_parquet, the bounded reader: diagnostics",
    ("studies/registry.py", "yaml.safe_load("): "bytes from core.files.read_bytes: a claim file",
}


def test_no_module_reads_an_untrusted_file_another_way():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            for match in READS.finditer(code):
                call = match.group(0)
                if (module, "*") in ALLOWED or (module, call) in ALLOWED:
                    continue
                if code.lstrip().startswith(("def ", "``", '"""')) or "``" in code:
                    continue  # a definition or a docstring naming the call
                found.append(f"{module}:{number}: {line.strip()}")
    assert not found, "read outside normbench.core.files:\n" + "\n".join(found)


# ------------------------------------------------------------------------------- YAML
def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=12)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), inner, max_size=4)
    ),
    max_leaves=15,
)
CONFIGS = st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True), VALUES)
LINES = [
    "a: 1",
    "b:",
    "  c: 2",
    "  - x",
    "d: [1,",
    "2]",
    "# comment",
    "e: |",
    "  text",
    "f: 'q",
    "  r'",
    "g: &x 1",
    "h: *x",
    "",
    "i: {a: b}",
    "j:b",
    "- 1",
    "---",
    "l: !!str 3",
    "<<: {z: 1}",
    "o: >",
    " folded",
    "s: |-",
    "t: 1\r",
]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.one_of(CONFIGS, VALUES), st.booleans())
def test_yaml_reads_what_pyyaml_dumps_as_pyyaml_reads_it(value, flow):
    text = yaml.safe_dump(value, default_flow_style=flow)
    expected = yaml.safe_load(text)
    try:
        first, second = parse_yaml(text, "f"), parse_yaml(text, "f")
    except StoreError as err:
        assert "nested deeper" in str(err)
        return
    assert same(first, expected) and same(second, expected)
    if isinstance(first, dict):  # a value read from the cache is a copy: changing it is safe
        first.clear()
        assert same(parse_yaml(text, "f"), expected)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(LINES), max_size=7), st.booleans())
def test_yaml_lines_read_as_pyyaml_reads_them_or_are_refused(lines, newline):
    text = "\n".join(lines) + "\n" * newline
    try:
        expected = yaml.safe_load(text)
    except yaml.YAMLError:
        with pytest.raises(StoreError):
            parse_yaml(text, "f")
        return
    try:
        assert same(parse_yaml(text, "f"), expected)
    except StoreError as err:  # what the reader refuses, and only that
        assert re.search("aliases|tags|merge keys|nested", str(err)), (text, err)
        assert re.search(r"[&*!]|<<", text)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: &a [x]\nb: *a\n", "YAML aliases are not allowed"),
        ("a: !!python/object:os.system x\n", "YAML tags"),
        ("<<: {b: 1}\n", "merge keys"),
        ("a: 1\n---\nb: 2\n", "more than one YAML document"),
        ("- " * 9 + "x\n", "nested deeper than 8 levels"),
    ],
)
def test_what_yaml_refuses(text, words):
    with pytest.raises(StoreError, match=words):
        parse_yaml(text, "f.yaml")


# ---------------------------------------------------------------------------- files
def test_regular_files_only_never_through_a_symlink(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "g").symlink_to(tmp_path / "real" / "f")
    os.mkfifo(tmp_path / "real" / "fifo")
    assert read_bytes(tmp_path / "real" / "f", 10, root=tmp_path) == b"x"
    for path, words in (
        (tmp_path / "link" / "f", "a symlink"),
        (tmp_path / "real" / "g", "a symlink"),
        (tmp_path / "real" / "fifo", "not a regular file"),
    ):
        with pytest.raises(StoreError, match=words):
            read_bytes(path, 10, root=tmp_path)
    with pytest.raises(StoreError, match="larger than 0 bytes"):
        read_bytes(tmp_path / "real" / "f", 0)
    with pytest.raises(StoreError, match="a symlink"), open_directory(tmp_path / "link", tmp_path):
        pass


def test_parquet_is_bounded_in_rows_bytes_and_kinds(tmp_path):
    path = tmp_path / "m.parquet"
    pq.write_table(pa.table({"step": np.zeros(2000), "loss": np.zeros(2000)}), path)
    assert len(read_parquet(path, 1 << 20, 2000, numeric=("loss",), required=("step",))) == 2000
    small = path.stat().st_size + 100  # the file fits; the 32 kB it expands to does not
    for limit, rows, words in (
        (1 << 20, 1999, "more than 1999"),
        (small, 2000, f"to more than {small}"),
    ):
        with pytest.raises(StoreError, match=words):
            read_parquet(path, limit, rows)
    with pytest.raises(StoreError, match="no unit column"):
        read_parquet(path, 1 << 20, 2000, required=("step", "unit"))
    pq.write_table(pa.table({"step": np.arange(3), "loss": ["a", "b", "c"]}), path)
    with pytest.raises(StoreError, match="column loss holds"):
        read_parquet(path, 1 << 20, 1000, numeric=("step", "loss"))
    check_parquet_ends(path, 1 << 20)
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(StoreError, match="not a complete parquet file"):
        check_parquet_ends(path, 1 << 20)


# ---------------------------------------------------------------------------- markdown
def test_markdown_escapes_every_inline_markup():
    hostile = "a`b*c_d[e](f)#g~h|i\\j<img src=x>&amp;\n## k\x1b[2J"
    escaped = escape_markdown(hostile)
    assert escaped == (
        "a\\`b\\*c\\_d\\[e\\](f)\\#g\\~h\\|i\\\\j&lt;img src=x>&amp;amp;\\\\n\\#\\# k\\\\x1b\\[2J"
    )
    assert "\n" not in escaped and "<" not in escaped and "\x1b" not in escaped
    assert escape_markdown("> p < alpha & q, <https://x>, &#60;, a >= b") == (
        "&gt; p < alpha & q, &lt;https://x>, &amp;\\#60;, a >= b"
    )  # text where it cannot be markup (issue 50, item 13: p &lt; alpha)

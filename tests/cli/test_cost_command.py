"""`normbench cost`: norms timed against a reference, interleaved in blocks, paired ratios
with 95% t intervals on their logs (normbench.layers.timing)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from normbench.cli import app
from normbench.layers.timing import Candidate, paired_ratio, timed_blocks

runner = CliRunner()


def test_the_ratio_is_the_geometric_mean_with_a_t_interval_on_the_logs():
    """By hand: mean ± t(0.975, n - 1) × sd / sqrt(n) of the log ratios, exponentiated."""
    a, b = Candidate("rmsnorm", "module", 64, "fp32"), Candidate("layernorm", "module", 64, "fp32")
    reference = [1.0, 2.0, 1.5, 1.2, 0.9]
    ratios = [0.9, 0.95, 0.92, 0.97, 0.9]
    seconds = {a: [r * t for r, t in zip(ratios, reference, strict=True)], b: reference}
    result = paired_ratio(seconds, a, b)
    logs = np.log(ratios)
    half = stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
    assert result.ratio == pytest.approx(math.exp(logs.mean()))
    assert (result.low, result.high) == pytest.approx(
        (math.exp(logs.mean() - half), math.exp(logs.mean() + half))
    )
    assert result.verdict == "faster" and result.blocks == 5
    assert paired_ratio(seconds, b, a).verdict == "slower"
    seconds[a] = [t * r for t, r in zip(reference, [0.8, 1.2, 0.9, 1.1, 1.0], strict=True)]
    assert paired_ratio(seconds, a, b).verdict == "inconclusive"


def test_every_candidate_is_timed_once_per_block():
    calls = {Candidate(str(i), "module", 8, "fp32"): (lambda: None) for i in range(3)}
    seconds = timed_blocks(calls, blocks=4)
    assert {c: len(s) for c, s in seconds.items()} == dict.fromkeys(calls, 4)
    assert all(t > 0 for s in seconds.values() for t in s)


def test_the_command_times_norms_and_implementations(tmp_path):
    out = tmp_path / "cost.json"
    args = ["cost", "norm=layernorm,rmsnorm,dyt", "model=cnn", "--widths", "8", "--blocks", "3"]
    args += ["--batch", "2", "--positions", "4", "--json", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "channels (batch, width, positions), contiguous N, C, L" in result.output
    assert "dyt: no fused implementation (it has module, compiled)" in result.output
    rows = json.loads(out.read_text())
    pairs = {(r["norm"], r["impl"], r["reference_norm"], r["reference_impl"]) for r in rows}
    assert pairs == {
        ("rmsnorm", "module", "layernorm", "module"),
        ("dyt", "module", "layernorm", "module"),
        ("rmsnorm", "fused", "layernorm", "fused"),
        ("layernorm", "fused", "layernorm", "module"),
        ("rmsnorm", "fused", "rmsnorm", "module"),
    }
    for row in rows:
        assert 0 < row["low"] <= row["ratio"] <= row["high"] and row["blocks"] == 3


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["norm=fancy"], "norm=fancy is not valid; valid: batchnorm, layernorm"),
        (["--dtype", "fp64"], "--dtype=fp64 is not valid; valid: fp32, bf16, fp16"),
        (["--impl", "fast"], "--impl=fast is not valid; valid: module, fused, compiled"),
        (["--widths", "0"], "--widths=0 is not valid; valid: positive integers"),
        (["lr=3"], "lr=3 is not valid here; valid: norm=NAME[,NAME...], model=NAME"),
        (["--blocks", "2"], "--blocks=2 is not valid; valid: an integer >= 3"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_without_importing_torch(args, line):
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom normbench.cli import app\n"
        f"result = CliRunner().invoke(app, {['cost', *args]!r})\n"
        "print(result.exit_code, 'torch' in sys.modules)\nprint(result.output)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    status, output = done.stdout.split("\n", 1)
    assert status == "2 False"
    assert line in output and len(output.strip().splitlines()) == 1

"""`normbench findings` end to end at the smoke scale: every study runs, every finding is
computed (a verdict, a table), and the figures are written beside the document."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from normbench.studies import registry
from normbench.studies.family import RULE


@pytest.mark.slow
def test_findings_script_at_smoke_scale(tmp_path):
    out = tmp_path / "docs" / "findings.md"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "normbench",
            "findings",
            "--smoke",
            "--runs-dir",
            str(tmp_path / "runs"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = out.read_text()
    for title in (
        "Wu & He 2018",
        "Luo et al. 2018",
        "BatchNorm across devices",
        "Xiong et al. 2020",
        "Greydanus 2020",
        "Zhu et al. 2025",
        "float32 statistics in fp16",
        "What LayerNorm does, measured",
        "LayerNorm Scaling and Mix-LN at depth",
        "QK-norm lowers learning-rate sensitivity",
        "Norms under Muon",
        "Single-scale RMSNorm under Muon and the kurtosis of activations",
        "Gated attention, the attention sink and the largest activation",
        "GPAS and the growth of activations over depth",
        "DyISRU tracks RMSNorm more closely than DyT?",
        "One answer across workloads",
        "DyT's gap to LayerNorm along a width ladder",
        "DyT against LayerNorm as the unique data grows",
        "LR sensitivity with and without QK-norm along a width ladder",
    ):
        assert title in text, title
    assert "Not computed" not in text
    labels = ("Reproduced.**", "Not reproduced.**", "Inconclusive.**", "Exploratory.**")
    labels += ("Pilot confirmed.**", "Pilot not confirmed.**")  # registered after a pilot
    claims = len(registry.claims())  # every registered claim, labelled by the rule (or not)
    assert sum(text.count(v) for v in labels) == claims
    assert text.count("registered at") + text.count("not registered (") == claims
    assert text.count("*Exploratory (not a registered claim)") >= 2  # batch's, placement's
    assert text.count("**What this does not show.**") >= 14
    # the scaling presets' trend claims, decided from their trend verdicts
    assert re.search(r"trend (shrinking|growing|constant|inconclusive), slope", text)
    # issue 58, item 6: the scaling sections under 0.6's method, each with its History, the
    # multipliers' kind (measured or a bound), the form beyond the ladder, every count
    ladder = text[text.index("## DyT's gap to LayerNorm along a width ladder") :]
    ladder = ladder[: ladder.index("\n## ")]
    for word in ("multiplier\\_top\\_kind", "lack\\_of\\_fit\\_p", "Kaplan N", "tok/total"):
        assert word in ladder, word
    assert text.count("History: first generated on 2026-12-06 under 0.5") == 3
    images = list((tmp_path / "docs" / "img").rglob("*.png"))
    assert len(images) >= 5
    for link in [line for line in text.splitlines() if line.startswith("![")]:
        assert (out.parent / link.split("(")[1].rstrip(")")).exists(), link
    for record in (tmp_path / "runs" / "sweeps").glob("findings-*.json"):  # the sweep it is
        command = json.loads(record.read_text())["command"]
        assert command[:2] == ["normbench", "sweep"] and command[-2] == "--name", command
    assert RULE in text  # the sections state the rule their labels come from

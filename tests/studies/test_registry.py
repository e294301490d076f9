"""The registered claims (normbench.studies.registry): each file reads, its seeds reach the
power it registered, the power formula agrees with a simulated paired t test, and a bad file is
refused in one line naming the key, the value and the valid choices."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from normbench.core.errors import UsageError
from normbench.studies import registry
from normbench.studies.findings import STUDIES

STUDIES_DIR = Path(registry.__file__).parent


def test_every_registered_claim_reads_and_its_seeds_reach_its_power():
    claims = registry.claims()
    assert len(claims) >= 22
    assert {  # issue 47: every claim the findings make is registered
        "notes-layernorm-stabilises",
        "notes-layernorm-converges",
        "notes-layernorm-generalises",
        "notes-layernorm-gradient-spread",
        "notes-layernorm-residual",
        "notes-layernorm-feature-scale",
        "wortsman-logit-growth",
        "micikevicius-fp32-statistics",
    } <= set(claims)
    names = {study.name for study in STUDIES}
    for claim in claims.values():
        assert claim.study in names, claim.id
        assert claim.seeds >= claim.seeds_needed(), (claim.id, claim.seeds_needed())
        assert claim.power() >= claim.target, claim.id


def test_the_power_formula_agrees_with_a_simulated_paired_t_test():
    # 10 seeds, 1 sd beyond the null, one-sided at 0.05 / 2: the noncentral t says 0.80
    n, effect, level = 10, 1.0, 0.025
    expected = registry.power(n, effect, 0.05, 2)
    rng = np.random.default_rng(0)
    diffs = rng.normal(effect, 1.0, size=(4000, n))
    t = diffs.mean(axis=1) / (diffs.std(axis=1, ddof=1) / np.sqrt(n))
    simulated = float((t > stats.t.ppf(1 - level, n - 1)).mean())
    assert abs(simulated - expected) < 0.025, (simulated, expected)  # 4 se of 4,000 draws
    assert registry.seeds_for(1.0, 0.05, 2, 0.8) == 10  # the 10-12 for 1 sd


@pytest.mark.parametrize(
    "edit, words",
    [
        (("predicted: better", "predicted: roughly"), ["predicted 'roughly'", "valid: better"]),
        (("seeds: 5", "seeds: 1"), ["seeds 1", "2 or more"]),
        (("margin: 0.01", "margin: -1"), ["margin -1", "positive number"]),
        (("study: toy", "studdy: toy"), ["studdy", "valid:"]),
    ],
)
def test_a_bad_claim_is_refused_naming_key_value_and_choices(tmp_path, edit, words):
    from tests.studies.test_order import CLAIM

    path = tmp_path / "bad.yaml"
    path.write_text(CLAIM.replace(*edit))
    with pytest.raises(UsageError) as err:
        registry.read_claim(path)
    assert all(w in str(err.value) for w in words), str(err.value)
    assert "\n" not in str(err.value)


VERDICT_WORDS = re.compile(r"Reproduced|Not reproduced|Inconclusive|\*\*(better|worse|equivalent)")
HAND_WRITTEN = re.compile(r"found no norm|>= 0\.9|step 0 it is about")


def test_no_study_writes_a_label_or_a_verdict_sentence_by_hand():
    """Labels come from family's rule only (its output): no other study module spells one,
    and the sentences the issue found written by hand are gone."""
    for path in sorted(STUDIES_DIR.glob("*.py")):
        if path.name in ("family.py", "__init__.py"):
            continue
        text = path.read_text()
        assert not VERDICT_WORDS.search(text), (path.name, VERDICT_WORDS.search(text))
        assert not HAND_WRITTEN.search(text), (path.name, HAND_WRITTEN.search(text))


def test_a_claim_file_that_is_not_yaml_is_refused_in_one_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text('source: Li et al., "Mix-LN: a title"\nsays: x\n')
    with pytest.raises(UsageError, match=r"^broken.yaml: not a YAML mapping \(") as err:
        registry.read_claim(path)
    assert "\n" not in str(err.value)

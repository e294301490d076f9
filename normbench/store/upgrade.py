"""History in one place: what earlier versions of normbench wrote, brought to the current
format as the store reads it, so that the report, the statistics and the methods know one
format only.

- A run (``upgrade_run``): a key added after the run was made takes the value that
  reproduces it (experiment.schema's LATER_KEYS and later option keys: the same values its
  run id was hashed with), the keys an optimizer ignores are nulled as they now are, and a
  summary without ``num_classes`` takes the config's (or 10).
- A sweep record (``upgrade_record``): a design that kept only its number of looks (alpha split
  evenly) becomes an ``until_decided`` part whose looks fall at even fractions, and one that
  names no spending (normbench 0.3) names O'Brien-Fleming type spending.
"""

from __future__ import annotations

from typing import Any

from normbench.experiment.schema import LATER_KEYS, ignored_by_optimizer, later_option_keys

MAX_LOOKS = 10_000  # a sequential design's looks: one per seed added, far fewer in practice
# How the alpha of a sweep's looks was spent, in the records of earlier versions (the current
# labels are normbench.report.sequential.SPENDING and BINDING_SPENDING): normbench 0.3 named
# none, and its levels were O'Brien-Fleming type; before it a record kept only its number of
# looks, and alpha was split evenly over them.
OBRIEN_FLEMING = "O'Brien-Fleming type (Lan-DeMets)"
EVEN_SPLIT = "alpha split evenly over the looks"


def upgrade_run(config: dict[str, Any], numbers: dict[str, Any]) -> None:
    """A run's flattened config (seed aside) and summary numbers, in place, as now written."""
    for key, old in LATER_KEYS.items():  # a built-in group's run made before the key existed
        if f"{key.partition('.')[0]}._target_" not in config:
            config.setdefault(key, old)
    for key, old in later_option_keys(config).items():
        config.setdefault(key, old)
    for key in ignored_by_optimizer(config):  # a run made before they were nulled: as now
        config[key] = None
    for classes in (numbers["num_classes"], config.get("data.num_classes"), 10):
        if isinstance(classes, (int, float)) and 2 <= classes < 2**63:  # chance is 1/classes
            numbers["num_classes"] = classes  # (the summary's; a run made before it had one)
            break


def upgrade_record(record: dict) -> dict:
    """An older version's record in the current format: a design that kept only its number of
    looks (``looks``, alpha split evenly) becomes an ``until_decided`` part whose looks fall
    at even fractions, and an ``until_decided`` part that names no spending (normbench 0.3)
    names O'Brien-Fleming type spending. A malformed field is left as it is, for the part's
    reader to refuse."""
    looks = record.get("looks")
    if (
        "until_decided" not in record
        and isinstance(looks, int)
        and not isinstance(looks, bool)
        and 2 <= looks <= MAX_LOOKS
    ):
        fractions = [k / looks for k in range(1, looks + 1)]
        record["until_decided"] = {
            "fractions": fractions,
            "looks_taken": looks,
            "spending": EVEN_SPLIT,
        }
    design = record.get("until_decided")
    if isinstance(design, dict) and design.get("spending") in (None, ""):
        design["spending"] = OBRIEN_FLEMING
    return record

"""Registration before runs, checked (``normbench findings --check``): every registered claim
whose study has runs must have been registered (committed, unchanged since) before the earliest
of those runs started, and must be what its study's sweep record says it was when the sweep
started (the claims' content hashes, ``registry.Claim.digest``, recorded then). A claim that
fails is shown *exploratory* in the findings, never labelled; the check says so without
training, one line per claim.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pandas as pd

from normbench.core.errors import UsageError
from normbench.store import catalog, records, sweep_record
from normbench.studies import family, registry


def problems(runs: Path, folder: Path = registry.REGISTERED) -> list[str]:
    """One line per registered claim that could not be labelled on the runs under ``runs``
    (a claim whose study has no runs yet labels nothing, and passes)."""
    found, studies, every = [], {}, None
    for claim in registry.claims(folder).values():
        if claim.study not in studies:  # each study's record and runs read once
            try:
                record = records.latest_record(runs, f"findings-{claim.study}")
            except UsageError:  # no sweep of its study: no runs, nothing labelled
                studies[claim.study] = None
            else:
                every = catalog.load_runs(runs).runs if every is None else every  # once
                ids, _, _ = records.sweep_run_ids(runs, f"findings-{claim.study}")
                confirmed = every[every["run_id"].isin(ids)]
                studies[claim.study] = (record, confirmed, tuning_start(every, record))
        if studies[claim.study] is None:
            continue
        record, runs_of, tuned = studies[claim.study]
        first, _ = family.span(runs_of)
        if first is None:
            continue
        registered = registry.registration(claim.path)
        if not family.labelled(registered, first):
            found.append(
                f"{claim.id}: {family.order_text(registered, runs_of)}: not registered before "
                "its earliest run, so exploratory"
            )
        elif tuned is not None and not family.labelled(registered, tuned):
            found.append(
                f"{claim.id}: {family.order_text(registered, runs_of)}, but its study's tuning "
                f"runs, which chose the values its runs use, began {tuned.isoformat()}: not "
                "registered before them"
            )
        hashes = record.get("claims")
        recorded = hashes.get(claim.id) if isinstance(hashes, dict) else None
        if isinstance(hashes, dict) and recorded is None:
            found.append(f"{claim.id}: not among the claims its sweep recorded when it started")
        elif isinstance(recorded, str) and recorded != claim.digest():
            found.append(
                f"{claim.id}: changed since its sweep started (the record has {recorded}, the "
                f"file now {claim.digest()})"
            )
    return found


def tuning_start(every: pd.DataFrame, record: dict) -> datetime | None:
    """When the tuning runs of a tuned study's sweep began (None for a sweep that tuned
    nothing): they chose the values its confirmation runs use, so a claim registered after
    them was registered knowing which values won on validation."""
    tuning = set(sweep_record.tuning_runs(record))
    if not tuning:
        return None
    first, _ = family.span(every[every["run_id"].isin(tuning)])
    return first


def checked(runs: Path, folder: Path = registry.REGISTERED) -> int:
    """How many registered claims ``problems`` checks: those whose study has a sweep record
    under ``runs`` (a claim without one labels nothing)."""
    claims = registry.claims(folder).values()
    present = {study for study in {c.study for c in claims} if _has_sweep(runs, study)}
    return sum(claim.study in present for claim in claims)


def _has_sweep(runs: Path, study: str) -> bool:
    try:
        records.latest_record(runs, f"findings-{study}")
    except UsageError:
        return False
    return True


def digests(study: str, folder: Path = registry.REGISTERED) -> dict[str, str]:
    """The content hash of each claim a study's runs test, for its sweep record."""
    return {claim.id: claim.digest() for claim in registry.of_study(study, folder)}

"""Registration before runs, checked (``normbench findings --check``): every registered claim
whose study has runs must have been registered (committed, unchanged since) before the earliest
of those runs started, and must be what its study's sweep record says it was when the sweep
started (the claims' content hashes, ``registry.Claim.digest``, recorded then). A claim that
fails is shown *exploratory* in the findings, never labelled; the check says so without
training, one line per claim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pandas as pd

from normbench.core.errors import UsageError
from normbench.core.text import plain
from normbench.store import catalog, records, sweep_record
from normbench.studies import family, registry


@dataclass
class Check:
    """What ``findings --check`` found: one line per claim that could not be labelled (or not
    checked: a study's record unreadable, its claims part malformed, its runs undated), how
    many claims were checked on runs, and how many runs they read."""

    problems: list[str] = field(default_factory=list)
    claims: int = 0
    runs: int = 0


def problems(runs: Path, folder: Path = registry.REGISTERED) -> list[str]:
    """One line per registered claim that could not be labelled on the runs under ``runs``
    (a claim whose study has no runs yet labels nothing, and passes)."""
    return check(runs, folder).problems


def check(runs: Path, folder: Path = registry.REGISTERED) -> Check:
    """Every registered claim whose study has runs under ``runs``, checked; a claim that
    cannot be checked is a problem too (its study's record cannot be read, or names its
    claims in no form normbench writes), never a pass."""
    result = Check()
    studies: dict[str, StudyRuns | str | None] = {}
    every = None
    for claim in registry.claims(folder).values():
        if claim.study not in studies:  # each study's record and runs read once
            studies[claim.study] = study = _study(runs, claim.study, every)
            if isinstance(study, StudyRuns):
                every = study.every
                result.runs += len(study.runs)
        study = studies[claim.study]
        if isinstance(study, str):  # its record is there, unreadable
            result.problems.append(f"{claim.id}: {study}")
            continue
        if study is None or study.runs.empty:
            continue
        result.claims += 1
        result.problems += _claim_problems(claim, study)
    return result


@dataclass
class StudyRuns:
    """A study's latest record, the runs it names that are in the store, when its tuning
    began (None: it tuned nothing), and every run of the store (read once for all)."""

    record: dict
    runs: pd.DataFrame
    tuned: datetime | None
    every: pd.DataFrame


def _study(runs: Path, study: str, every: pd.DataFrame | None) -> StudyRuns | str | None:
    """A study's record and runs; None when it has no record (no sweep, no runs to label);
    why not when it has one that cannot be read."""
    name = f"findings-{study}"
    paths = records.record_paths(runs, name)
    if not paths:
        return None
    try:
        record = records.latest_record(runs, name)
        ids, _, _ = records.sweep_run_ids(runs, name)
    except UsageError as err:  # unreadable, or a design normbench never writes
        return (
            f"its study's sweep record ({paths[-1]}) cannot be used, so its claims cannot be "
            f"checked ({err})"
        )
    every = catalog.load_runs(runs).runs if every is None else every
    confirmed = every[every["run_id"].isin(ids)] if not every.empty else every
    return StudyRuns(record, confirmed, tuning_start(every, record), every)


def _claim_problems(claim: registry.Claim, study: StudyRuns) -> list[str]:
    """Why one claim with runs cannot be labelled on them (none: it can)."""
    runs_of = study.runs
    first, _ = family.span(runs_of)
    if first is None:
        return [
            f"{claim.id}: none of its study's {len(runs_of)} runs has a start time with a zone "
            "(meta.json's started): its registration cannot be ordered against them"
        ]
    found = []
    registered = registry.registration(claim.path)
    if not family.labelled(registered, first):
        found.append(
            f"{claim.id}: {family.order_text(registered, runs_of)}: not registered before "
            "its earliest run, so exploratory"
        )
    elif study.tuned is not None and not family.labelled(registered, study.tuned):
        found.append(
            f"{claim.id}: {family.order_text(registered, runs_of)}, but its study's tuning "
            f"runs, which chose the values its runs use, began {study.tuned.isoformat()}: not "
            "registered before them"
        )
    hashes = study.record.get("claims", {})  # absent in records older than the hashes
    recorded = hashes.get(claim.id) if isinstance(hashes, dict) else None
    if not isinstance(hashes, dict) or not (recorded is None or isinstance(recorded, str)):
        found.append(
            f"{claim.id}: its sweep record's claims part is malformed (valid: claim id -> "
            "content hash): whether the claim changed since its sweep started cannot be checked"
        )
    elif "claims" in study.record and recorded is None:
        found.append(f"{claim.id}: not among the claims its sweep recorded when it started")
    elif isinstance(recorded, str) and recorded != claim.digest():
        found.append(
            f"{claim.id}: changed since its sweep started (the record has {plain(recorded)[:80]}, "
            f"the file now {claim.digest()})"
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


def digests(study: str, folder: Path = registry.REGISTERED) -> dict[str, str]:
    """The content hash of each claim a study's runs test, for its sweep record."""
    return {claim.id: claim.digest() for claim in registry.of_study(study, folder)}

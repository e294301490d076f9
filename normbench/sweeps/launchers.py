"""Where a sweep's runs execute: which launcher (local worker processes, or submitit: SLURM
or local), its settings checked, and the runs directory the submitit launchers need private.

Every launcher calls ``run_experiment`` for each job and reports to a view (sweeps/jobs.py)
with ``queued`` (waiting in a cluster's queue), ``started`` and ``done``; the run store does
the rest (locks, statuses, skipping what is complete). The launchers themselves live in
local (the worker pool) and cluster (submitit).
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from normbench.core.errors import UsageError
from normbench.core.keys import Key
from normbench.experiment.options import conf_dir
from normbench.store.rundir import Rerun
from normbench.sweeps.cluster import SubmititLauncher
from normbench.sweeps.local import LocalLauncher

LAUNCHERS = ("local", "slurm", "submitit_local")


# What each launcher setting accepts (additional and setup are checked by their own rules).
SETTINGS: dict[str, Key] = {
    "jobs": Key(int, minimum=1, nullable=True),
    "partition": Key(str, nullable=True),
    "time_min": Key(int, minimum=1),
    "gpus_per_node": Key(int, minimum=0),
    "cpus_per_task": Key(int, minimum=1),
    "mem_gb": Key(float, minimum=0.0),
    "array_parallelism": Key(int, minimum=1),
    "signal_delay_s": Key(int, minimum=0),
    "timeout_requeues": Key(int, minimum=0),
    "python": Key(str, nullable=True),
}


# sbatch options that would change a job's shape (nodes, tasks): normbench sets them itself.
JOB_SHAPE = frozenset(
    {"nodes", "ntasks", "ntasks_per_node", "ntasks-per-node", "tasks_per_node", "N", "n"}
)


def launcher_settings(name: str, overrides: list[str]) -> dict[str, Any]:
    """conf/launcher/NAME.yaml with ``launcher.KEY=VALUE`` overrides, checked key by key."""
    from omegaconf import OmegaConf

    from normbench.experiment.compose import parse_overrides

    if name not in LAUNCHERS:
        raise UsageError(f"--launcher {name}: unknown launcher; valid: {', '.join(LAUNCHERS)}")
    settings = OmegaConf.to_container(OmegaConf.load(conf_dir() / "launcher" / f"{name}.yaml"))
    for override in parse_overrides(overrides):
        key = override.key_or_group.removeprefix("launcher.")
        if key not in settings or key == "name":
            valid = ", ".join(f"launcher.{k}" for k in settings if k != "name")
            raise UsageError(
                f"launcher.{key} is not a setting of --launcher {name}; valid: {valid}"
            )
        settings[key] = override.value()
    check_settings(settings)
    return settings


def check_settings(settings: dict[str, Any]) -> None:
    """Every setting's type and range, and the signal delay against the time limit."""
    for key, value in settings.items():
        if key in SETTINGS:
            try:
                settings[key] = SETTINGS[key].check(value)
            except ValueError:
                raise UsageError(
                    f"launcher.{key}={value!r} is not valid; valid: {SETTINGS[key].describe()}"
                ) from None
    if not isinstance(settings.get("additional", {}), dict):
        raise UsageError(
            f"launcher.additional={settings['additional']!r} is not valid; valid: a mapping of "
            "sbatch options, e.g. {account: myproj, qos: high}"
        )
    placement = sorted(set(settings.get("additional", {})) & JOB_SHAPE)
    if placement:
        key = placement[0]
        raise UsageError(
            f"launcher.additional.{key}={settings['additional'][key]!r} is not allowed: each "
            "run is one job on one node, one task per rank (train.devices), and its ranks meet "
            "over 127.0.0.1 only, which cannot span nodes; valid: leave nodes and tasks to "
            "normbench"
        )
    setup = settings.get("setup", [])
    if not isinstance(setup, list) or not all(isinstance(line, str) for line in setup):
        raise UsageError(
            f"launcher.setup={setup!r} is not valid; valid: a list of shell lines, "
            "e.g. [module load cuda]"
        )
    if "signal_delay_s" in settings and settings["signal_delay_s"] >= settings["time_min"] * 60:
        raise UsageError(
            f"launcher.signal_delay_s={settings['signal_delay_s']} is not shorter than "
            f"launcher.time_min={settings['time_min']} ({settings['time_min'] * 60} s): the "
            "time-limit warning would come before the run starts; valid: "
            f"0..{settings['time_min'] * 60 - 1}"
        )


def check_private(runs_dir: Path) -> None:
    """The submitit launchers unpickle what they find under runs/sweeps/*.submitit: refuse a
    runs directory (or its sweeps folder) that other users can write to, where one of them
    could replace a pickle and run code as you (docs/security.md)."""
    for path in (runs_dir, runs_dir / "sweeps"):
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            continue
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            who = "others" if mode & stat.S_IWOTH else "its group"
            raise UsageError(
                f"{path} is writable by {who}: the slurm and submitit_local launchers unpickle "
                "files there, which anyone who can write to it could replace (docs/security.md); "
                f"chmod go-w {path}, or use --launcher local"
            )


def make_launcher(
    name: str,
    settings: dict[str, Any],
    jobs: int | None,
    runs_dir: Path,
    rerun: Rerun,
    folder: Path,
):
    if name == "local":
        return LocalLauncher(jobs or settings.get("jobs"), runs_dir, rerun)
    return SubmititLauncher(settings, runs_dir, rerun, folder)

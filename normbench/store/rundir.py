"""The run store: runs/<run_id>/{config.yaml, meta.json, metrics.parquet}.

A run id is readable and content-addressed: the same resolved experiment always maps to the
same id, so a repeated command (or a resumed sweep) finds what is already done. Every file is
written to a temporary name and renamed into place, so a killed process never leaves a
half-written file that looks complete.

A runs directory is untrusted input (shared on a cluster, copied from a colleague):
normbench never opens a file for writing through a symlink (run directories, ``.locks`` and
``sweeps`` that are symlinks are refused), and reads only regular files of bounded size, YAML
without aliases, JSON of the expected shape (docs/security.md). Whatever fails those checks is
a ``StoreError``: a warning naming the run and the file in ``report``, a run to train again
for ``run`` and ``sweep``.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normbench.core.errors import StoreError
from normbench.core.files import parquet_rows, read_json, read_parquet, read_yaml
from normbench.experiment.schema import GROUPS, experiment
from normbench.store.provenance import is_stale

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

STATUSES = ("running", "complete", "diverged", "failed", "interrupted")
# Upper bounds on what normbench reads from a runs directory, per file.
MAX_BYTES = {
    "meta.json": 4 << 20,
    "config.yaml": 1 << 20,
    "metrics.parquet": 256 << 20,
    "diagnostics.parquet": 256 << 20,
    "record": 64 << 20,  # a sweep record
    "checkpoint.pt": 64 << 30,  # a model's whole training state
}

FINISHED = ("complete", "diverged")  # results: not run again unless forced
METRIC_COLUMNS = (
    "step",
    "epoch",
    "samples",
    "elapsed_s",
    "lr",
    "train_loss",
    "train_acc",
    "val_loss",
    "val_acc",
    "val_bpb",  # next-byte tasks: val_loss / ln 2; NaN for the classification tasks
    "grad_norm",
)
MAX_METRIC_ROWS = 1_000_000  # a million logged steps: far beyond any run normbench makes
# Written since normbench 0.6 (normbench.training.activations, on a fixed evaluation batch):
# excess kurtosis and largest |x| of the stream a unit leaves and of its sublayer's output,
# and the attention sink.
ACTIVATION_DIAGNOSTICS = (
    "resid_kurtosis",
    "resid_max_abs",
    "sublayer_kurtosis",
    "sublayer_max_abs",
    "attn_sink",
)
# diagnostics.parquet (diagnostics=true): one row per residual unit and diagnosed step, written
# by normbench.training.diagnostics, read by normbench.report.diagnostics and the studies.
DIAGNOSTICS_COLUMNS = (
    "step",
    "unit",
    "depth",
    "sublayer",
    "grad_norm",
    "in_mean",
    "in_std",
    "out_mean",
    "out_std",
    "resid_rms",
    "max_logit",
    "log_z",
    *ACTIVATION_DIAGNOSTICS,
    *(f"sn_{kind}_{norm}" for kind in ("mean", "var") for norm in ("in", "ln", "bn")),
    "train_mode_val_acc",
    "eval_mode_val_acc",
)
# Written since normbench 0.3 (the residual stream, attention logits, log Z) and 0.6
# (ACTIVATION_DIAGNOSTICS): NaN for a run diagnosed before; every other column but ``depth``,
# ``in_mean``, ``out_mean`` every diagnosed run has.
LATER_DIAGNOSTICS = ("resid_rms", "max_logit", "log_z", *ACTIVATION_DIAGNOSTICS)


@dataclass(frozen=True)
class Rerun:
    """Which finished runs are trained again: every one (``--force``), or those made by other
    code than the installed one (``--rerun-stale``). By default a finished run is kept."""

    force: bool = False
    stale: bool = False


@dataclass(frozen=True)
class Labels:
    """What a person attaches to a run (``--tag``, ``--note``): stored in meta.json, never in
    the run id, filterable in ``report`` and ``runs list``."""

    tags: tuple[str, ...] = ()
    note: str | None = None

    def apply(self, meta: dict) -> dict:
        """meta with these tags added (kept in order, no repeats) and this note, if any."""
        tags = list(meta.get("tags") or [])
        tags += [tag for tag in self.tags if tag not in tags]
        return {**meta, "tags": tags, **({"note": self.note} if self.note else {})}


def run_id(cfg: dict) -> str:
    """``transformer-layernorm-pre-fp32-b32-s0-1a2b3c4d``: the headline choices, then a hash of
    the whole resolved config except execution settings (device, threads, checkpoints) and
    observations (diagnostics).

    A norm that names an import path (``_target_``) is named and hashed by it, whatever name
    chose it: ``norm=power3`` from a config directory, ``norm=powernorm`` from an entry point
    and ``norm=mynorms:PowerNorm norm.p=3`` are one computation and get one id (``norm.name``
    stays in config.yaml as the user chose it). Models and data sets keep the name chosen: a
    model's import path names a builder function (``mypkg.models:build``), no name to show. A
    norm that takes its statistics over ghost
    batches smaller than the batch names them: ``batchnorm.ghost2-...-b32`` (32 per step,
    statistics over 2); a data-parallel run its devices: ``...-b32.d2-...`` (32 per step over
    2 devices; train.devices=1 adds nothing, so earlier ids stand). Runs stored before this
    (normbench 0.4) keep their ids: ``earlier_run_id`` gives them, and ``stored_run_id``
    finds them."""
    hashed = experiment(cfg)
    target = cfg["norm"].get("_target_")
    if target:
        hashed["norm"]["name"] = target
    names = [cfg["model"]["name"], target or cfg["norm"]["name"], cfg["placement"]["name"]]
    ghost = cfg["norm"].get("ghost_batch")
    if ghost is not None and ghost < cfg["batch_size"]:
        names[1] = f"{headline(names[1])}.ghost{ghost}"
    return _spelled(cfg, hashed, names)


def earlier_run_id(cfg: dict) -> str:
    """The id normbench 0.4 gave this config: the choices' names as chosen, no ghost batch."""
    names = [cfg[group]["name"] for group in ("model", "norm", "placement")]
    return _spelled(cfg, experiment(cfg), names)


def _spelled(cfg: dict, hashed: dict, names: list[str]) -> str:
    """A run id: model, norm and placement ``names``, precision, batch, seed, and the hash of
    ``hashed``."""
    digest = hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:8]
    model, norm, placement, precision = (headline(n) for n in [*names, cfg["precision"]["name"]])
    batch = f"b{cfg['batch_size']}"
    devices = cfg["train"].get("devices", 1)
    if devices != 1:  # data-parallel: b32.d2, the global batch of 32 over 2 devices
        batch += f".d{devices}"
    return f"{model}-{norm}-{placement}-{precision}-{batch}-s{cfg['seed']}-{digest}"


def renamed(cfg: dict) -> bool:
    """Whether ``run_id`` names this config otherwise than normbench 0.4 may have: a norm by
    import path, or a ghost batch under the batch."""
    ghost = cfg["norm"].get("ghost_batch")
    return bool(cfg["norm"].get("_target_")) or (ghost is not None and ghost < cfg["batch_size"])


def stored_run_id(
    runs_dir: Path, cfg: dict, rerun: Rerun, present: set[str] | None = None, new: str = ""
) -> str:
    """The id of ``cfg``'s run in ``runs_dir``: ``run_id`` (``new``, when computed already),
    or the earlier id of a finished run stored under it that needs no training: that run is
    kept, named by what is on disk; a run to train again trains under the new id.
    ``present``: the directory's names, when already listed."""
    new = new or run_id(cfg)
    if not renamed(cfg) or (new in present if present is not None else (runs_dir / new).exists()):
        return new
    earlier = earlier_run_id(cfg)
    if earlier == new or (present is not None and earlier not in present):
        return new
    run = RunDir(runs_dir, earlier)
    try:
        run.check_safe()
        meta = run.read_meta()
    except (OSError, StoreError):
        return new
    return new if run.needs_training(meta, cfg, rerun) else earlier


def headline(name: str) -> str:
    """A choice's name as a run id shows it: an import path by its object's name
    (mypkg.norms:PowerNorm -> powernorm), lowercase, anything outside [a-z0-9_.] as _ (the hash
    after it tells apart what this merges)."""
    return re.sub(r"[^a-z0-9_.]", "_", name.rpartition(":")[2].lower())


# The run id grammar (``run_id``): model, norm, placement and precision as ``headline`` writes
# them, batch size, seed, 8 hex digits. Every path normbench builds from a run id that it did
# not just compute (a directory name, an index row, a command-line argument) must match it:
# no "/", no "..", nothing absolute, nothing hidden.
RUN_ID = re.compile(
    r"[a-z0-9_][a-z0-9_.]*-[a-z0-9_.]+-[a-z0-9_.]+-[a-z0-9_.]+-b[0-9]+(?:\.d[0-9]+)?-s[0-9]+"
    r"-[0-9a-f]{8}"
)


def is_run_id(name: object) -> bool:
    return isinstance(name, str) and RUN_ID.fullmatch(name) is not None


@functools.cache
def file_mode() -> int:
    """rw for whoever the umask allows: colleagues sharing a group runs directory read each
    other's runs (mkstemp alone makes every file 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path`` (a
    rename replaces a symlink at ``path``, never the file it points to)."""
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fchmod(handle.fileno(), file_mode())
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def real_directory(path: Path) -> Path:
    """``path`` as a directory normbench may write into: created if missing, refused when it
    is a symlink (or not a directory)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        pass
    except OSError as err:
        raise StoreError(f"{path}: cannot create it ({err.strerror})") from None
    if path.is_symlink():
        raise StoreError(f"{path} is a symlink; normbench never writes through one (remove it)")
    if not path.is_dir():
        raise StoreError(f"{path} is not a directory")
    return path


def check_meta(path: Path, meta: Any) -> dict:
    """meta.json of the shape normbench writes, else StoreError. (Its depth was bounded when
    it was read.)"""
    if not isinstance(meta, dict):
        raise StoreError(f"{path}: not a run's meta.json (expected an object)")
    if meta.get("status") not in STATUSES:
        raise StoreError(
            f"{path}: status {str(meta.get('status'))[:40]!r} is not one of {', '.join(STATUSES)}"
        )
    kinds = (("summary", dict), ("code", dict), ("versions", dict), ("data", dict), ("tags", list))
    for key, kind in kinds:
        if meta.get(key) is not None and not isinstance(meta[key], kind):
            raise StoreError(f"{path}: {key} should be {'an object' if kind is dict else 'a list'}")
    summary = meta.get("summary") or {}
    if any(
        isinstance(v, bool) or not isinstance(v, (int, float, type(None))) for v in summary.values()
    ):
        raise StoreError(f"{path}: summary values should be numbers")
    if any(not isinstance(tag, str) for tag in meta.get("tags") or []):
        raise StoreError(f"{path}: tags should be strings")
    return meta


SCALARS = (str, int, float, bool, type(None))  # what a config value is (or a list of them)


def check_config(path: Path | str, cfg: Any) -> dict[str, Any]:
    """config.yaml of the shape normbench writes (every group chosen by name, a seed and a
    batch size, values that are strings, finite numbers, booleans, nulls or lists of them),
    flattened (``{'train.lr': 0.003}``); else StoreError: a truncated file is refused rather
    than reported as a run without a norm. (Its depth was bounded when it was read.)"""
    if not isinstance(cfg, dict):
        raise StoreError(f"{path}: not a run's config (expected a mapping)")
    for group in GROUPS:
        section = cfg.get(group)
        if not isinstance(section, dict) or not isinstance(section.get("name"), str):
            raise StoreError(f"{path}: no {group}.name (a truncated or foreign config?)")
    for key, low in (("seed", 0), ("batch_size", 1)):
        value = cfg.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value < 2**32:
            raise StoreError(f"{path}: {key} should be an integer from {low} to {2**32 - 1}")
    if not isinstance(cfg.get("train"), dict):
        raise StoreError(f"{path}: no train section")
    flat: dict[str, Any] = {}
    _flatten_checked(path, cfg, "", flat)
    return flat


def _is_plain(value: Any) -> bool:
    kind = type(value)
    return kind in (str, int, bool, type(None)) or (kind is float and math.isfinite(value))


def _flatten_checked(path: Path | str, section: dict, prefix: str, flat: dict) -> None:
    for key, value in section.items():
        if type(key) is not str:
            raise StoreError(f"{path}: key {str(key)[:40]!r} in {prefix or 'the top'} is no name")
        if type(value) is dict:
            _flatten_checked(path, value, f"{prefix}{key}.", flat)
            continue
        if not (_is_plain(value) or (type(value) is list and all(map(_is_plain, value)))):
            raise StoreError(
                f"{path}: {prefix}{key} holds {str(value)[:40]!r}; valid: a string, a finite "
                "number, true/false, null, or a list of them"
            )
        flat[prefix + key] = value


def read_metric_columns(runs_dir: Path, rid: str, columns: list[str]) -> pd.DataFrame:
    """The ``columns`` of run ``rid``'s metrics.parquet, each one required and numbers only,
    through the trusted reader (bounded in bytes and rows, never through a symlink below
    ``runs_dir``): what the report's learning curves and its time to target read. Raises
    OSError or StoreError when they cannot be read."""
    return read_parquet(
        runs_dir / rid / "metrics.parquet",
        MAX_BYTES["metrics.parquet"],
        MAX_METRIC_ROWS,
        numeric=tuple(columns),
        required=tuple(columns),
        columns=columns,
        root=runs_dir,
    )


class RunDir:
    """One run's directory and the three files in it."""

    def __init__(self, runs_dir: Path | str, run_id: str):
        self.run_id = run_id
        self.path = Path(runs_dir) / run_id

    @property
    def meta_path(self) -> Path:
        return self.path / "meta.json"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.parquet"

    @property
    def config_path(self) -> Path:
        return self.path / "config.yaml"

    @property
    def lock_path(self) -> Path:
        return self.path.parent / ".locks" / f"{self.run_id}.lock"

    @contextlib.contextmanager
    def lock(self, wait: bool = True) -> Iterator[bool]:
        """Hold the run's lock while training it, so two processes never train the same run at
        once. An flock: the kernel drops it when its holder dies, even by kill -9, so a crashed
        process never blocks the run forever. Yields False when ``wait`` is off and the lock is
        held elsewhere. The lock file is opened without truncating and never through a
        symlink (run ids are predictable: a planted link must not make normbench clobber the
        file it points to)."""
        self.check_safe()
        real_directory(self.lock_path.parent)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(self.lock_path, flags, file_mode())
        except OSError as err:
            raise StoreError(f"{self.lock_path}: cannot open the lock ({err.strerror})") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StoreError(f"{self.lock_path} is not a regular file")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def check_safe(self) -> None:
        """Refuse (StoreError) a run directory that is a symlink: what normbench writes for
        this run must land inside the runs directory."""
        if self.path.is_symlink():
            raise StoreError(
                f"{self.path} is a symlink; normbench never writes through one (remove it)"
            )
        if self.path.exists() and not self.path.is_dir():
            raise StoreError(f"{self.path} is not a directory")

    def lock_is_free(self) -> bool:
        """Whether no process holds this run's lock (read-only: a shared runs directory may not
        be writable): a ``running`` run whose lock is free was abandoned (its process died)."""
        try:
            fd = os.open(self.lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return True  # no lock file: nobody ever locked it, or it was cleaned
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True

    def read_meta(self) -> dict[str, Any] | None:
        """The run's meta.json, or None when there is none or it is not a valid one."""
        try:
            return check_meta(self.meta_path, self.read_json("meta.json"))
        except (OSError, StoreError):
            return None

    def read_json(self, name: str) -> Any:
        """One of the run's JSON files, through the trusted reader: never through a symlinked
        run directory or file (StoreError), bounded."""
        return read_json(self.path / name, MAX_BYTES[name], root=self.path.parent)

    def read_config(self) -> dict[str, Any]:
        """config.yaml, checked and flattened (StoreError when it is not a run's config)."""
        raw = read_yaml(self.config_path, MAX_BYTES["config.yaml"], root=self.path.parent)
        return check_config(self.config_path, raw)

    def intact(self) -> bool:
        """Whether a finished run's three files are readable and consistent: a config of the
        right shape and a metrics file whose footer parquet can read, with rows. Anything else
        is not a result, and is trained again."""
        try:
            self.read_config()
            return metrics_rows(self.metrics_path, self.path.parent) > 0
        except (OSError, StoreError):
            return False

    def status(self) -> str | None:
        meta = self.read_meta()
        return meta.get("status") if meta else None

    def needs_training(self, meta: dict | None, cfg: dict, rerun: Rerun) -> bool:
        """Whether this run, whose meta.json reads ``meta``, must be trained for ``cfg``: it is
        not finished, or ``rerun`` says so, or diagnostics are asked for and it has none."""
        if meta is None or meta.get("status") not in FINISHED or rerun.force:
            return True
        if not self.intact():
            return True
        if rerun.stale and is_stale(meta, cfg):
            return True
        return bool(cfg.get("diagnostics")) and not (self.path / "diagnostics.parquet").is_file()

    def write_config(self, cfg: dict) -> None:
        from omegaconf import OmegaConf

        real_directory(self.path)
        atomic_write(self.config_path, OmegaConf.to_yaml(OmegaConf.create(cfg)))

    def write_meta(self, meta: dict[str, Any]) -> None:
        atomic_write(self.meta_path, json.dumps(meta, indent=2, default=str) + "\n")

    def read_metrics(self) -> pd.DataFrame:
        """metrics.parquet as a DataFrame of normbench's columns (those the file has), read
        through the trusted reader: bounded, never through a symlink below the runs
        directory, every column numbers. FileNotFoundError when the run logged nothing yet."""
        return read_parquet(
            self.metrics_path,
            MAX_BYTES["metrics.parquet"],
            MAX_METRIC_ROWS,
            numeric=METRIC_COLUMNS,
            columns=list(METRIC_COLUMNS),
            root=self.path.parent,
        )

    def read_diagnostics(self) -> pd.DataFrame:
        """diagnostics.parquet (``diagnostics=true``) as a DataFrame, through the trusted
        reader as metrics are. FileNotFoundError when the run recorded none."""
        return read_parquet(
            self.path / "diagnostics.parquet",
            MAX_BYTES["diagnostics.parquet"],
            MAX_METRIC_ROWS * 100,  # a row per unit and diagnosed step
            root=self.path.parent,
        )

    def write_metrics(self, rows: list[dict[str, float]]) -> None:
        """All rows so far, as one parquet file (rewritten whole: runs log hundreds of rows)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = {name: [row.get(name) for row in rows] for name in METRIC_COLUMNS}
        types = {"step": pa.int64(), "samples": pa.int64()}
        table = pa.table(
            {
                name: pa.array(values, type=types.get(name, pa.float64()))
                for name, values in columns.items()
            }
        )
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        atomic_write(self.metrics_path, sink.getvalue().to_pybytes())


def metrics_rows(path: Path, root: Path) -> int:
    """Rows of a metrics.parquet inside ``root``, read from its footer (bounded; StoreError
    when it is not a parquet file with normbench's step column)."""
    rows, columns = parquet_rows(path, MAX_BYTES["metrics.parquet"], root)
    if "step" not in columns:
        raise StoreError(f"{path}: no step column")
    return rows

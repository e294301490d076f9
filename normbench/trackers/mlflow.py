"""MLflow runs kept in step with the run store: ``normbench runs export --to mlflow URI``.

Each normbench run is one MLflow run of an experiment (``normbench`` unless named), found
again by its tag ``normbench.run_id``, so exporting again updates rather than duplicates:

- params: the config, flattened (``norm.name``), without the execution settings (device,
  threads, ...), which may differ between attempts while MLflow params never change;
- metrics: every metric column per step, each at the run's start time plus its elapsed
  seconds; a second export adds only the steps logged since the first (tag
  ``normbench.last_step``);
- tags: ``normbench.run_id``, ``normbench.status``, ``normbench.tags``, ``normbench.code_hash``,
  ``normbench.started`` and ``normbench.run_dir`` (a file:// link back to the run directory,
  also in the run's description); the status as MLflow's (a diverged run finished).

A run trained afresh since its export (``--force``: a new start time) has new numbers at the
old steps: its MLflow run is deleted and made again. Uses mlflow's client (the ``tracking``
extra); what MLflow refuses in a run is a StoreError naming the run.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from normbench.core.errors import StoreError, UsageError
from normbench.core.text import plain
from normbench.experiment.schema import EXECUTION_KEYS
from normbench.trackers.runs import TrackedRun, parameters, rows

RUN_ID_TAG = "normbench.run_id"
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")  # URI schemes of SQL tracking stores
# normbench's status -> MLflow's: a result is FINISHED, an abandoned run KILLED.
STATUSES = {
    "complete": "FINISHED",
    "diverged": "FINISHED",
    "failed": "FAILED",
    "interrupted": "KILLED",
    "abandoned": "KILLED",
    "running": "RUNNING",
}
MAX_VALUE = 5000  # characters of a param or tag value (MLflow refuses more than 6000)
BATCH = 100  # params per log_batch call, and metrics per call over 10 (MLflow's limits)


def requires(uri: str) -> tuple[str, ...]:
    """The modules an export to ``uri`` needs (normbench.core.extras): mlflow's client, and
    for a database (``sqlite:///mlflow.db``) SQLAlchemy and Alembic, which mlflow-skinny
    leaves out."""
    scheme = uri.partition(":")[0].partition("+")[0]
    return ("mlflow", "sqlalchemy", "alembic") if scheme in DATABASES else ("mlflow",)


# The first request to a tracking server, with few retries: mlflow's own (7, backoff 2) keep
# a URI nobody answers silent for minutes. Later requests keep mlflow's (or the user's) own,
# which ride out a server's rate limit.
FIRST_CONTACT = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
}


@contextlib.contextmanager
def first_contact() -> Iterator[None]:
    """FIRST_CONTACT's settings for the block, where the environment does not set them."""
    unset = [key for key in FIRST_CONTACT if key not in os.environ]
    os.environ.update({key: FIRST_CONTACT[key] for key in unset})
    try:
        yield
    finally:
        for key in unset:
            os.environ.pop(key, None)


class MlflowExport:
    """An MLflow tracking store (``sqlite:///runs.db``, ``http://host:5000``, ...) and the
    experiment normbench's runs go to."""

    def __init__(self, uri: str, experiment: str):
        from mlflow.tracking import MlflowClient

        try:
            self.client = MlflowClient(tracking_uri=uri)
            with first_contact():
                found = self.client.get_experiment_by_name(experiment)
            self.experiment_id = (
                found.experiment_id if found else self.client.create_experiment(experiment)
            )
            self.exported = self._exported_runs()
        except Exception as err:  # mlflow's, SQLAlchemy's or the network's: the URI is bad
            message = " ".join(str(err).split())[:200]
            raise UsageError(
                f"--to mlflow {uri}: cannot use this tracking store ({type(err).__name__}: "
                f"{message})"
            ) from None

    def _exported_runs(self) -> dict[str, Any]:
        """The experiment's active MLflow runs by their normbench run id (one search, read
        page by page; run ids are never put into a filter string)."""
        found, token = {}, None
        while True:
            page = self.client.search_runs([self.experiment_id], max_results=1000, page_token=token)
            for run in page:
                found.setdefault(run.data.tags.get(RUN_ID_TAG), run)
            token = page.token
            if not token:
                return found

    def export(self, run: TrackedRun) -> str:
        """Log one run; returns what was done: ``created``, ``updated`` or ``replaced``."""
        from mlflow.exceptions import MlflowException

        try:
            return self._export(run)
        except MlflowException as err:
            message = " ".join(str(err).split())[:200]
            raise StoreError(f"{run.run_id}: MLflow refused it ({message})") from None

    def _export(self, run: TrackedRun) -> str:
        previous = self.exported.get(run.run_id)
        replaced = previous is not None and (
            previous.data.tags.get("normbench.started") != str(run.started)
        )
        if replaced:  # trained afresh since: new numbers at the old steps
            self.client.delete_run(previous.info.run_id)
        if previous is None or replaced:
            # tagged with the run id at once, so that even a process killed before it is
            # deleted below leaves a run the next export finds (and replaces: it has no start)
            created = self.client.create_run(
                self.experiment_id,
                start_time=milliseconds(run.started),
                tags={RUN_ID_TAG: run.run_id},
                run_name=run.run_id,
            )
            try:
                self._log(created.info.run_id, run, known={}, last_step=-1)
                self._set_status(created.info.run_id, run)
            except BaseException:  # refused or interrupted: no half-made run is left
                with contextlib.suppress(Exception):
                    self.client.delete_run(created.info.run_id)
                raise
            return "replaced" if replaced else "created"
        last_step = int(previous.data.tags.get("normbench.last_step", -1))
        self._log(previous.info.run_id, run, previous.data.params, last_step)
        self._set_status(previous.info.run_id, run)
        return "updated"

    def _log(self, mlflow_id: str, run: TrackedRun, known: dict, last_step: int) -> None:
        """Params not logged yet, metrics of the steps after ``last_step``, and every tag."""
        from mlflow.entities import Metric, Param, RunTag

        params = [
            Param(key, value[:MAX_VALUE])
            for key, value in run_parameters(run).items()
            if key not in known
        ]
        for batch in _chunks(params, BATCH):
            self.client.log_batch(mlflow_id, params=batch)
        started = run.started if run.started is not None else time.time()
        points = [
            Metric(column, value, milliseconds(started + values.get("elapsed_s", 0.0)), step)
            for step, values in rows(run.metrics)
            if step > last_step
            for column, value in values.items()
        ]
        for batch in _chunks(points, BATCH * 10):
            self.client.log_batch(mlflow_id, metrics=batch)
        newest = int(run.metrics["step"].max()) if len(run.metrics) else last_step
        tags = {**run_tags(run), "normbench.last_step": str(max(newest, last_step))}
        self.client.log_batch(mlflow_id, tags=[RunTag(key, value) for key, value in tags.items()])

    def _set_status(self, mlflow_id: str, run: TrackedRun) -> None:
        status = STATUSES[run.status]
        if status == "RUNNING":
            self.client.update_run(mlflow_id, status=status)
        else:
            self.client.set_terminated(mlflow_id, status, end_time=milliseconds(run.finished))


def run_parameters(run: TrackedRun) -> dict[str, str]:
    """The config as MLflow params, every key but the execution settings, each value as an
    override writes it (``true``, ``null``, ``0.003``)."""
    return {
        key: str(value).lower() if isinstance(value, bool) else str(value)
        for key, value in parameters(run.config).items()
        if key not in EXECUTION_KEYS
    }


def run_tags(run: TrackedRun) -> dict[str, str]:
    """normbench's record of a run as MLflow tags, text from the runs directory made plain."""
    link = run.path.resolve().as_uri()
    note = f"\n\n{plain(run.note)}" if run.note else ""
    tags = {
        RUN_ID_TAG: run.run_id,
        "normbench.status": run.status,
        "normbench.tags": ", ".join(plain(tag) for tag in run.tags),
        "normbench.code_hash": plain(run.code_hash),
        "normbench.started": str(run.started),
        "normbench.run_dir": link,
        "mlflow.note.content": f"normbench run `{run.run_id}` ({run.status}): {link}{note}",
    }
    return {key: value[:MAX_VALUE] for key, value in tags.items()}


def milliseconds(seconds: float | None) -> int | None:
    return None if seconds is None else int(round(seconds * 1000))


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]

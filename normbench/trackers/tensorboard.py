"""TensorBoard event files: one directory per run (DIR/<run_id>/), with every metric column
as a scalar series over steps, the config as the run's hparams (its trial id the run id),
and the tags as text.

Written the same way from a run directory (``normbench runs export --to tensorboard DIR``) and
live while training (``log.tensorboard=DIR``, normbench.training.trainer). A run's directory
holds one event file: writing it again (an export repeated, a run resumed or forced) replaces
the previous file, so TensorBoard never shows a step twice. Uses TensorBoard's own event-file
writer and protocol buffers (the ``tracking`` extra), not TensorFlow and not torch.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from normbench.core.errors import UsageError
from normbench.store.rundir import real_directory
from normbench.trackers.runs import TrackedRun, logged, parameters, rows

EVENT_FILES = "events.out.tfevents.*"  # the names TensorBoard's writer gives its files
REQUIRES = ("tensorboard",)  # the modules an export needs (normbench.core.extras)


def check_destination(path: Path, option: str) -> None:
    """A directory TensorBoard's files can be written in, checked before any run trains: an
    existing directory or one that can be made, writable (a file, /dev/null, a read-only
    place or a symlink to one of those is refused in one line, not found by the run)."""
    existing = next((p for p in (path, *path.parents) if os.path.lexists(p)), Path("/"))
    if not existing.is_dir():
        raise UsageError(f"{option}{path}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK) or _read_only(existing):
        raise UsageError(f"{option}{path}: {existing} is not writable")


def _read_only(path: Path) -> bool:
    """A read-only file system (root's os.access says writable there too)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


class RunEvents:
    """The event file of one run, open for writing: scalars per logged step."""

    def __init__(self, log_dir: Path, run_id: str, config: dict, tags: tuple[str, ...] = ()):
        from tensorboard.plugins.hparams.summary_v2 import hparams_pb
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.path = real_directory(log_dir / run_id)
        for previous in self.path.glob(EVENT_FILES):
            previous.unlink()
        self.writer = EventFileWriter(str(self.path))
        self.write(hparams_pb(parameters(config), trial_id=run_id), step=0)
        if tags:
            self.write(text_summary("tags", ", ".join(tags)), step=0)

    def add(self, row: Mapping, wall_time: float | None = None) -> None:
        """One metrics row: each logged column (NaN: not logged at this step) a scalar at the
        row's step. ``wall_time``: when it was logged (default: now)."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        values = [
            Summary.Value(tag=column, simple_value=value) for column, value in logged(row).items()
        ]
        if values:
            self.write(Summary(value=values), int(row["step"]), wall_time)

    def write(self, summary, step: int, wall_time: float | None = None) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        when = time.time() if wall_time is None else wall_time
        self.writer.add_event(Event(wall_time=when, step=step, summary=summary))

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def text_summary(tag: str, text: str):
    """A text summary (TensorBoard's Text tab) built from its protocol buffers."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.compat.proto.types_pb2 import DT_STRING
    from tensorboard.plugins.text.metadata import create_summary_metadata

    tensor = TensorProto(
        dtype=DT_STRING,
        string_val=[text.encode()],
        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
    )
    metadata = create_summary_metadata(display_name=tag, description="")
    return Summary(value=[Summary.Value(tag=tag, metadata=metadata, tensor=tensor)])


def export(run: TrackedRun, log_dir: Path) -> Path:
    """Write one run's event file under ``log_dir`` (replacing an earlier export of it);
    each step at the run's start time plus its elapsed seconds, so TensorBoard's relative
    time axis is the run's own."""
    with writer_errors_raised():
        events = RunEvents(log_dir, run.run_id, run.config, run.tags)
        start = run.started if run.started is not None else time.time()
        try:
            for step, values in rows(run.metrics):
                events.add({"step": step, **values}, start + values.get("elapsed_s", 0.0))
        finally:
            events.close()
    return events.path


@contextlib.contextmanager
def writer_errors_raised() -> Iterator[None]:
    """TensorBoard's writer thread prints its error (a full disk) as a traceback, then the
    writer raises it again at the next write or close, where the caller reports it in one
    line: the printing is left out for the block."""
    from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread

    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if not isinstance(args.thread, _AsyncWriterThread):
            previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


def board_note(log_dir: str, count: int, selection: str) -> str:
    """``log.tensorboard`` given for runs that were already finished: they were not trained
    again, so nothing reached the board; the export that puts them there."""
    runs = "the run was" if count == 1 else f"{count} runs were"
    them = "it" if count == 1 else "them"
    return (
        f"log.tensorboard: {runs} already finished, not trained again, so nothing was logged "
        f"to {log_dir} for {them}; to add {them}: normbench runs export --to tensorboard "
        f"{log_dir} {selection}"
    )

"""The training loop of one run: set-up, steps, evaluation, logging, checkpoints.

``Trainer`` owns the loop; ``normbench.training.run`` owns the run's life cycle around it. The
loop keeps host synchronisation to logging steps: losses and accuracies accumulate on the
device and are read every ``train.log_every`` steps.

``fit`` reads as the loop: before each step a checkpoint when one is due, then train; at a
logging step log a row, at an evaluation evaluate it, keep it, and check it for divergence.
The order of the batches is ``normbench.training.batches``; saving and resuming the loop's
state ``normbench.training.checkpoint``; the optimizers and their schedule
``normbench.training.optimizers``; the live line on the terminal
``normbench.training.progress``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from normbench.data.base import Split, Stream
from normbench.data.datasets import input_shape, load
from normbench.data.pysource import unigram_bits
from normbench.layers.keys import norm_reads
from normbench.layers.models import count_non_embedding, count_parameters, seeded_model
from normbench.store.rundir import RunDir
from normbench.trackers.tensorboard import RunEvents
from normbench.training import checkpoint, cost
from normbench.training.activations import probe_batch
from normbench.training.batches import Batch, DataOrder, batches
from normbench.training.diagnostics import Diagnostics, frozen_buffers
from normbench.training.distributed import (
    AllReduceClock,
    Ranks,
    data_parallel_model,
    evaluation_statistics,
    from_leader,
    reduce_window,
)
from normbench.training.optimizers import build_optimizers, lr_factor, lr_scaling
from normbench.training.progress import LiveLine, generating_note

AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
EVAL_BATCH = 1024


def now(timespec: str = "seconds") -> str:
    """The UTC time as ISO 8601, as meta.json stores it."""
    return datetime.now(timezone.utc).isoformat(timespec=timespec)


class Trainer(checkpoint.Checkpointing):
    """The training loop of one run, with its evaluation, logging and progress display (its
    checkpoints: ``checkpoint.Checkpointing``)."""

    def __init__(
        self,
        cfg: dict,
        device: torch.device,
        run: RunDir,
        progress: bool,
        ranks: Ranks | None = None,
    ):
        self.cfg, self.device, self.run, self.show_progress = cfg, device, run, progress
        # One rank of a data-parallel run (normbench.training.distributed); None: one process.
        # Only rank 0 evaluates and writes the run directory.
        self.ranks = ranks
        self.writes = ranks is None or ranks.leader
        self.rows: list[dict[str, float]] = []
        self.summary: dict = {}
        self.train_s = 0.0  # training time, evaluation excluded
        self.first_step: str | None = None  # wall-clock end of the first step, to the ms
        self.wall_s = 0.0  # wall time of earlier attempts, up to the checkpoint resumed from
        self.attempt_start = time.perf_counter()  # this attempt's share of wall_s starts here
        self.resumed_from: int | None = None  # the checkpoint's step, when this run resumed
        self.events: RunEvents | None = None  # log.tensorboard: the live event file

    # ---------------------------------------------------------------------------- set-up
    def setup(self) -> None:
        cfg, train = self.cfg, self.cfg["train"]
        torch.manual_seed(cfg["seed"])
        np.random.seed(cfg["seed"])
        with generating_note(cfg["data"], self.show_progress):
            self.data = load(cfg["data"])
        self.tensors = {
            name: self.to_device(getattr(self.data, name)) for name in ("train", "val", "test")
        }
        self.model = seeded_model(
            cfg, input_shape(cfg["data"]), self.data.num_classes, self.data.vocab_size
        ).to(self.device)
        fused = self.device.type in ("cpu", "cuda")  # one kernel instead of one per tensor
        self.optimizer, self.muon = build_optimizers(self.model, train, lr_scaling(cfg), fused)
        # train.compile: the training step's forward (and so its backward) through
        # torch.compile, sharing the model's parameters. Evaluation stays eager (it would
        # compile two graphs more, eval mode and its batch sizes, for a few percent of the
        # time), and so do the steps the diagnostics watch.
        # a CPU rank's gradient all-reduce timed (distributed.AllReduceClock; read by cost)
        ranked_cpu = self.ranks is not None and self.device.type == "cpu"
        self.allreduce_clock = AllReduceClock() if ranked_cpu else None
        forward = (
            self.model
            if self.ranks is None
            else data_parallel_model(self.model, self.device, self.allreduce_clock)
        )
        self.train_forward = torch.compile(forward) if train["compile"] else forward
        self.steps_per_epoch = len(self.data.train) // cfg["batch_size"]
        self.data_order = DataOrder(
            len(self.data.train), cfg["batch_size"], cfg["seed"], self.device, self.data.augment
        )
        budgets = [train["max_steps"]]
        if train["epochs"]:
            budgets.append(train["epochs"] * self.steps_per_epoch)
        self.total_steps = min(b for b in budgets if b)
        factor = partial(lr_factor, train, self.total_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, factor)
        # Muon's rate follows the same warm-up and decay (its own base rate, train.muon_lr)
        self.muon_scheduler = None
        if self.muon is not None:
            self.muon_scheduler = torch.optim.lr_scheduler.LambdaLR(self.muon, factor)
        precision = cfg["precision"]["name"]
        self.autocast_dtype = AUTOCAST_DTYPES[precision]
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=precision == "fp16")
        self.loss_scale = self.scaler.get_scale()  # fp16: a drop means a skipped step
        self.params = list(self.model.parameters())
        self.diagnostics = None
        if cfg["diagnostics"]:  # activation statistics on the first validation samples
            probe = probe_batch(self.tensors["val"])
            self.diagnostics = Diagnostics(self.model, self.run, probe, self.autocast)

    def to_device(self, split: Split | Stream) -> dict[str, torch.Tensor | None]:
        if isinstance(split, Stream):
            return {"bytes": torch.from_numpy(split.bytes).to(self.device)}
        mask = None if split.mask is None else torch.from_numpy(split.mask).to(self.device)
        return {
            "x": torch.from_numpy(split.x).to(self.device),
            "y": torch.from_numpy(split.y).to(self.device),
            "mask": mask,
        }

    # ------------------------------------------------------------------------------ loop
    def batches(self) -> Iterator[Batch]:
        """Endless training batches in the run's data order (normbench.training.batches)."""
        context = self.data.train.context if isinstance(self.data.train, Stream) else None
        share = None if self.ranks is None else self.ranks.share(self.cfg["batch_size"])
        return batches(self.tensors["train"], context, self.data_order, share)

    def fit(self) -> str:
        """Train to the budget: every step trains; every ``train.log_every`` steps logs a row;
        every ``train.eval_every`` steps (and at the last) evaluates it; every row is checked
        for divergence. Returns the status: ``complete`` or ``diverged``."""
        first = self.begin()
        try:
            with self.live_line(first):
                for step in range(first + 1, self.total_steps + 1):
                    self.checkpoint_before(step, first)
                    grad_norm = self.train_step(step)
                    if not self.logs_at(step):
                        continue
                    row = self.log(step, grad_norm)
                    if self.evaluates_at(step):
                        self.evaluate_at(step, row)
                    self.keep(step, row)
                    if self.diverged(step, row):
                        return "diverged"
                    self.end_of_log(step)
        finally:
            self.finish()
        self.evaluate_test()
        return "complete"

    def begin(self) -> int:
        """Set up, resume from the run's checkpoint if it has one, open the live event file,
        and at step 0 record the initial loss. Returns the step to continue after."""
        self.setup()
        self.window = Window(self.device)
        self.summary = {
            "steps": 0,
            "steps_to_target": None,
            "time_to_target_s": None,
            "num_classes": self.data.num_classes,  # a diverged run counts at 1 / num_classes
        }
        first = self.resume()
        self.training_batches = self.batches()  # after resume: it may set up afresh
        # What a step costs (normbench.training.cost): one step counted without changing the
        # training, then self.step timed; its numbers join the summary (finish_summary).
        self.cost = cost.StepCost.attach(self)
        self.events = self.live_events()
        if first == 0:
            self.record_initial_loss()
        self.model.train()
        return first

    def evaluates_at(self, step: int) -> bool:
        """Every ``train.eval_every`` steps, and at the last."""
        train = self.cfg["train"]
        return step % train["eval_every"] == 0 or step == self.total_steps

    def logs_at(self, step: int) -> bool:
        """Every ``train.log_every`` steps, and at every evaluation."""
        return self.evaluates_at(step) or step % self.cfg["train"]["log_every"] == 0

    @contextlib.contextmanager
    def live_line(self, first: int) -> Iterator[LiveLine]:
        """The live line while the block trains; the training clock starts inside it."""
        line = LiveLine(self.run.run_id, self.total_steps, first, self.data.next_byte)
        with line.shown(self.show_progress) as self.line:
            self.tick = time.perf_counter()  # training time runs from here to the next log
            yield self.line

    def train_step(self, step: int) -> torch.Tensor | None:
        """One update on the next batch, its loss and accuracy added to the window. The
        diagnostics watch it at every evaluation and at step 0: the first batch's gradients
        and activations, taken before the first update. Returns the gradient norm, when the
        step computed one (clipping or logging)."""
        x, y, mask = next(self.training_batches)
        diagnose = self.diagnostics is not None and (self.evaluates_at(step) or step == 1)
        if diagnose and step == 1:  # step 0's activation statistics: before the first update
            self.diagnostics.measure_activations()
        with self.diagnostics.watch() if diagnose else contextlib.nullcontext():
            loss, logits, grad_norm = self.step(x, y, mask, self.logs_at(step), diagnose)
        if diagnose and step == 1:
            self.diagnostics.record(0, None, math.nan)
        self.window.add(loss, logits, y)
        if step == 1:
            self.first_step = now("milliseconds")
        return grad_norm

    def log(self, step: int, grad_norm: torch.Tensor | None) -> dict:
        """The row of a logging step, its training loss and accuracy read from the window.
        Reading it waits for the device, so the clock counts the steps a GPU still had queued
        (they would otherwise fall into evaluation)."""
        train_loss, train_acc = self.window.read(self.ranks is not None)
        self.train_s += time.perf_counter() - self.tick
        return self.train_row(step, train_loss, train_acc, grad_norm)

    def evaluate_at(self, step: int, row: dict) -> None:
        """The validation loss and accuracy (and bits per byte) into ``row``; the target
        checked; the diagnostics recorded."""
        row["val_loss"], row["val_acc"] = self.evaluate_on_leader("val")
        if self.data.next_byte:
            row["val_bpb"] = row["val_loss"] / math.log(2)
        self.check_target(step, row)
        if self.diagnostics is not None:
            self.diagnose(step, row["val_acc"])

    def keep(self, step: int, row: dict) -> None:
        """The row into the run's rows, the live event file and the live line."""
        self.rows.append(row)
        if self.events is not None:
            self.events.add(row)
        self.summary["steps"] = step
        self.line.update(step, row, self.train_s, self.evaluates_at(step))

    def diverged(self, step: int, row: dict) -> bool:
        """A training loss, or at an evaluation a validation loss, that is not finite."""
        return not math.isfinite(row["train_loss"]) or (
            self.evaluates_at(step) and not math.isfinite(row["val_loss"])
        )

    def end_of_log(self, step: int) -> None:
        """After a logging step: the logs written at an evaluation; the clock restarted."""
        if self.evaluates_at(step):
            self.write_logs()
        self.tick = time.perf_counter()

    def finish(self) -> None:
        """What the loop leaves however it ended (complete, diverged, interrupted, failed):
        its logs written, the live event file closed, the summary of the steps taken."""
        self.write_logs()
        if self.events is not None:
            self.events.close()
        self.finish_summary()

    def evaluate_test(self) -> None:
        """The test split's loss and accuracy (and bits per byte) into the summary."""
        self.summary["test_loss"], self.summary["test_acc"] = self.evaluate_on_leader("test")
        self.summary["test_bpb"] = self.bits_per_byte(self.summary["test_loss"])

    def bits_per_byte(self, loss: float | None) -> float | None:
        """Next-byte tasks: a mean cross-entropy in nats, in bits per byte; else None."""
        return loss / math.log(2) if self.data.next_byte and loss is not None else None

    def record_initial_loss(self) -> None:
        """The validation loss (and bits per byte) at initialisation, before any update: the
        loss_init of Wortsman et al.'s LR sensitivity (normbench.report.stats.lr_sensitivity).
        An evaluation draws no random number and moves no buffer, so the run trains as it
        would without it; metrics.parquet's first row stays the first logged step."""
        loss, _ = self.evaluate_on_leader("val")
        self.summary.update(initial_val_loss=loss, initial_val_bpb=self.bits_per_byte(loss))

    def unigram_bpb(self) -> float | None:
        """Next-byte tasks: the validation windows' bits per byte under the training bytes'
        frequencies, the chance level a model must beat (about 4.5 bits)."""
        if not self.data.next_byte:
            return None
        return unigram_bits(self.data.train.bytes, self.data.val.y.ravel())

    def step(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor | None,
        want_grad_norm: bool,
        diagnose: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One optimiser step; the gradient norm is computed when clipping or logging, and per
        unit (before clipping) when diagnosing (eagerly: the diagnostics' hooks are not
        compiled). Returns the cross-entropy (without z-loss)."""
        forward = self.model if diagnose else self.train_forward
        with self.autocast():
            logits = forward(x, mask=mask)
        flat = logits.float().flatten(0, -2)  # (N[ * T], classes)
        loss = F.cross_entropy(flat, y.flatten())
        coefficient = self.cfg["train"]["z_loss"]
        objective = loss + coefficient * z_loss(flat) if coefficient else loss
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(objective).backward()
        clip, grad_norm = self.cfg["train"]["grad_clip"], None
        if clip or want_grad_norm or diagnose:
            for optimizer in self.optimizers:
                self.scaler.unscale_(optimizer)
            if diagnose:
                self.diagnostics.grad_norms()
            if clip:
                grad_norm = torch.nn.utils.clip_grad_norm_(self.params, clip)
            else:
                grad_norm = torch.nn.utils.get_total_norm(
                    [p.grad for p in self.params if p.grad is not None]
                )
        self.step_lr = self.optimizer.param_groups[0]["lr"]
        for optimizer in self.optimizers:
            try:
                self.scaler.step(optimizer)
            except RuntimeError as err:
                if optimizer is not self.muon or "without overflow" not in str(err):
                    raise
                overflowed(optimizer)
        self.scaler.update()
        if self.step_taken():
            for scheduler in (self.scheduler, self.muon_scheduler):
                if scheduler is not None:
                    scheduler.step()
        return loss, logits, grad_norm

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizer, and Muon beside it (train.optimizer=muon)."""
        return [self.optimizer] if self.muon is None else [self.optimizer, self.muon]

    def step_taken(self) -> bool:
        """False when fp16's GradScaler skipped the optimizer step (inf or NaN gradients; it
        then lowers the scale), so that the schedule counts only the steps taken. In fp16 this
        reads the scale once per step, which waits for the device."""
        if not self.scaler.is_enabled():
            return True
        previous, self.loss_scale = self.loss_scale, self.scaler.get_scale()
        return self.loss_scale >= previous

    def autocast(self):
        """bf16/fp16 autocast, or no context at all for fp32 (it costs a little every step)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def train_row(
        self, step: int, train_loss: float, train_acc: float, grad_norm: torch.Tensor | None
    ) -> dict:
        samples = step * self.cfg["batch_size"]
        return {
            "step": step,
            "epoch": samples / len(self.data.train),
            "samples": samples,
            "elapsed_s": self.train_s,
            "lr": self.step_lr,  # the rate of this step, as the scheduler set it
            "train_loss": train_loss,
            "train_acc": train_acc,
            "val_loss": math.nan,
            "val_acc": math.nan,
            "val_bpb": math.nan,
            "grad_norm": math.nan if grad_norm is None else float(grad_norm),
        }

    def check_target(self, step: int, row: dict) -> None:
        """Record the first evaluation that reaches target.value."""
        target = self.cfg["target"]
        value = row[target["metric"]]
        reached = (
            value >= target["value"] if target["metric"] == "val_acc" else value <= target["value"]
        )
        if reached and self.summary["steps_to_target"] is None:
            self.summary.update(steps_to_target=step, time_to_target_s=self.train_s)

    def write_logs(self) -> None:
        if not self.writes:
            return
        self.run.write_metrics(self.rows)
        if self.diagnostics is not None:
            self.diagnostics.write()
        if self.events is not None:
            self.events.flush()

    def live_events(self) -> RunEvents | None:
        """``log.tensorboard=DIR``: the run's TensorBoard event file, written at every logging
        step as metrics.parquet is (a resumed run's earlier rows first); None when unset."""
        if self.cfg["log"]["tensorboard"] is None or not self.writes:
            return None
        tags = tuple((self.run.read_meta() or {}).get("tags") or ())
        events = RunEvents(Path(self.cfg["log"]["tensorboard"]), self.run.run_id, self.cfg, tags)
        for row in self.rows:
            events.add(row)
        return events

    def diagnose(self, step: int, eval_mode_acc: float) -> None:
        """Record this evaluation's diagnostics, the activation statistics measured now;
        batch-dependent norms also get a validation pass with batch statistics (train mode),
        running statistics left untouched."""
        self.diagnostics.measure_activations()
        train_mode_acc = None
        if "ghost_batch" in norm_reads(self.cfg["norm"]):
            with frozen_buffers(self.model):
                train_mode_acc = self.evaluate("val", train_mode=True)[1]
        self.diagnostics.record(step, train_mode_acc, eval_mode_acc)

    def evaluate_on_leader(self, split: str) -> tuple[float, float]:
        """``evaluate``; in a data-parallel run rank 0 evaluates, with the running statistics
        norm.eval_stats chooses, and every rank gets its numbers."""
        if self.ranks is None:
            return self.evaluate(split)
        with evaluation_statistics(self.model):
            result = self.evaluate(split) if self.ranks.leader else (math.nan, math.nan)
        return from_leader(result, self.device)

    @torch.no_grad()
    def evaluate(self, split: str, train_mode: bool = False) -> tuple[float, float]:
        """Mean loss and accuracy on a split (per sample, or per byte for next-byte tasks), in
        eval mode (running statistics) unless ``train_mode`` (batch statistics)."""
        data = self.tensors[split]
        self.model.train(train_mode)
        loss_sum, correct = 0.0, 0
        for start in range(0, len(data["y"]), EVAL_BATCH):
            rows = slice(start, start + EVAL_BATCH)
            mask = None if data["mask"] is None else data["mask"][rows]
            with self.autocast():
                logits = self.model(data["x"][rows], mask=mask).float()
            y = data["y"][rows]
            loss_sum += F.cross_entropy(logits.flatten(0, -2), y.flatten(), reduction="sum").item()
            correct += (logits.argmax(-1) == y).sum().item()
        self.model.train()
        return loss_sum / data["y"].numel(), correct / data["y"].numel()

    def finish_summary(self) -> None:
        evaluated = [row for row in self.rows if not math.isnan(row["val_acc"])]
        self.summary.update(
            train_s=round(self.train_s, 3),
            steps_per_s=round(self.summary["steps"] / self.train_s, 1) if self.train_s else None,
            epochs=self.rows[-1]["epoch"] if self.rows else 0.0,
            final_val_loss=evaluated[-1]["val_loss"] if evaluated else None,
            final_val_acc=evaluated[-1]["val_acc"] if evaluated else None,
            final_val_bpb=self.bits_per_byte(evaluated[-1]["val_loss"] if evaluated else None),
            unigram_bpb=self.unigram_bpb(),
            best_val_acc=max(row["val_acc"] for row in evaluated) if evaluated else None,
            train_loss_auc=self.train_loss_auc(),
            **self.cost.summary(),
            parameters=count_parameters(self.model),
            parameters_non_embedding=count_non_embedding(self.model),
            # what an accuracy is counted over: its resolution is 1 / size
            # (normbench.report.results.resolution)
            val_size=self.tensors["val"]["y"].numel(),
            test_size=self.tensors["test"]["y"].numel(),
        )

    def train_loss_auc(self) -> float | None:
        """Mean training loss over the whole run (each logged window weighted by its steps):
        the area under the loss curve per step. Lower means faster convergence."""
        if not self.rows:
            return None
        steps = [self.rows[0]["step"]] + [
            b["step"] - a["step"] for a, b in zip(self.rows, self.rows[1:], strict=False)
        ]
        total = sum(w * row["train_loss"] for w, row in zip(steps, self.rows, strict=True))
        return total / self.rows[-1]["step"]


def z_loss(logits: torch.Tensor) -> torch.Tensor:
    """PaLM's auxiliary z-loss before its coefficient (Chowdhery et al. 2022, its training set-up):
    (log Z)^2 with log Z = logsumexp of one prediction's output logits, averaged over the
    predictions of the batch (a language model's: every position). It pulls log Z towards 0,
    so that the logits cannot drift up together, the output-logit divergence Wortsman et al.
    (2023) see at high learning rates; PaLM's coefficient is 1e-4. ``logits``: (M, classes)."""
    return torch.logsumexp(logits, dim=-1).square().mean()


class Window:
    """Training loss and accuracy summed on the device between two logging steps."""

    def __init__(self, device: torch.device):
        self.loss = torch.zeros((), device=device)
        self.correct = torch.zeros((), device=device, dtype=torch.long)
        self.samples = 0
        self.steps = 0

    def add(self, loss: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> None:
        self.loss += loss.detach()
        self.correct += (logits.detach().argmax(-1) == y).sum()
        self.samples += y.numel()  # samples, or bytes of next-byte prediction
        self.steps += 1

    def state_dict(self) -> dict:
        return {
            "loss": self.loss,
            "correct": self.correct,
            "samples": self.samples,
            "steps": self.steps,
        }

    def load_state_dict(self, state: dict) -> None:
        self.loss.copy_(state["loss"])
        self.correct.copy_(state["correct"])
        self.samples, self.steps = state["samples"], state["steps"]

    def read(self, across_ranks: bool = False) -> tuple[float, float]:
        """(mean loss, accuracy) since the last read, then start a new window; with
        ``across_ranks`` those of the global batches, over every rank's share."""
        if across_ranks:
            loss, accuracy = reduce_window(self.loss, self.correct, self.samples)
            result = (loss / self.steps, accuracy)
        else:
            result = (self.loss.item() / self.steps, self.correct.item() / self.samples)
        self.clear()
        return result

    def clear(self) -> None:
        self.loss.zero_()
        self.correct.zero_()
        self.samples = self.steps = 0


@torch.no_grad()
def overflowed(muon: torch.optim.Optimizer) -> None:
    """Muon's step at a rate past float's range (train.muon_lr=1e308): torch refuses to make
    the rate a float scalar, where AdamW's arithmetic gives an infinite update. The update is
    not finite either way: its parameters are set to NaN, as AdamW's become, so that the next
    loss is NaN and the run is ``diverged`` (a result, kept), not ``failed`` (trained again by
    every later sweep)."""
    for group in muon.param_groups:
        for param in group["params"]:
            param.fill_(math.nan)

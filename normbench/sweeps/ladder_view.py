"""What a ladder shows: its ``--dry-run`` plan (every rung's parameters, tokens, steps, tokens
per parameter, epochs over its unique data, 6·N·D and an estimated time; then its parameters
under each count's convention, tokens per parameter under each) and, once trained, what each
group chose at each rung."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from normbench.store.rundir import Rerun
from normbench.sweeps import plan as planning
from normbench.sweeps.ladder_plan import (
    FLOPS_PER_S,
    SECONDS_PER_RUN,
    SECONDS_PER_STEP,
    LadderPlan,
    estimate_text,
)

ESTIMATE_NOTE = (
    "estimated, not measured: 6·N·D at {cpu:.2g} FLOP/s per CPU worker (from the qk_norm "
    "preset's 28 s a run), {cuda:.2g} FLOP/s on a GPU (assumed), plus {step:g} ms a step and "
    "{run:g} s a run (assumed); attention's own FLOPs are left out"
)


def rung_table(
    plan: LadderPlan,
    runs_dir: Path | None = None,
    rerun: Rerun | None = None,
    console: Console | None = None,
):
    """One row per rung, smallest first. Columns two spaces apart, a rule under the header and
    no vertical lines (a box of twelve columns without padding ran its cells into its lines,
    ``│  16│   14k│``); one space apart where two would not fit ``console``'s width (80
    columns: twelve columns of up to eight characters)."""
    table = Table(
        title=f"ladder {plan.name}: {plan.spec.key}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )
    columns = ("rung", "params", "non-emb", "steps", "tokens", "tok/N", "epochs", "6ND")
    for column in (*columns, "runs", "to do", "est.", "tuned"):
        table.add_column(column, justify="right")
    for rung in plan.rungs:
        todo = "-"  # a tuned rung's confirmation is known once its tuning has chosen
        if rung.tuned is None and runs_dir is not None and rerun is not None:
            todo = str(len(planning.plan(rung.grid, runs_dir, rerun).todo))
        tuned = "-" if rung.tuned is None else ("yes" if rung.tunes else "transfer")
        table.add_row(
            rung.value,
            short(rung.size.parameters),
            short(rung.size.non_embedding),
            short(rung.steps),
            short(rung.tokens),
            f"{rung.tokens_per_param:.3g}",
            f"{rung.epochs:.2g}" + ("*" if rung.epochs > 1 else ""),
            f"{rung.size.flops(rung.steps):.1e}".replace("e+", "e"),
            str(rung.runs),
            todo,
            estimate_text(rung.seconds()),
            tuned,
        )
    if console is not None:  # measured unclamped: rich caps a measurement at the width
        natural = Measurement.get(console, console.options.update_width(10_000), table)
        if natural.maximum > console.width:
            table.padding = (0, 0)  # the box's blank separator alone: one space
    return table


def counts_table(plan: LadderPlan) -> Table:
    """One row per rung: the parameters under each convention (normbench.experiment.budget)
    and the training tokens per parameter under each, so that a ratio is never read against
    another count's (20 tokens per parameter by one is not 20 by another)."""
    table = Table(
        title="parameters by count, and training tokens per parameter under each",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    columns = ("rung", "total", "tok/total", "non-emb", "tok/non-emb", "Kaplan N", "tok/Kaplan")
    for column in columns:
        table.add_column(column, justify="right")
    for rung in plan.rungs:
        size = rung.size
        ratios = size.tokens_per_param(rung.tokens)
        counts = (size.parameters, size.non_embedding, size.non_embedding_no_head)
        cells = []
        for count, ratio in zip(counts, ratios.values(), strict=True):
            cells += ["-", "-"] if count is None else [short(count), f"{ratio:.3g}"]
        table.add_row(rung.value, *cells)
    return table


COUNTS_NOTE = (
    "total: every trainable parameter; non-emb: less the embedding and positions, the output "
    "head kept (the budget rule's N, and 6ND's); Kaplan N: less the output head too, as Kaplan "
    "et al. 2020 count N (Table 1: no embedding, positions or de-embedding; their formula also "
    "leaves out biases and norms, counted here); -: a model without a head module"
)


def short(count: int) -> str:
    """1234 -> 1.2k, 8707328 -> 8.7M: a count in a column of ten."""
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if count >= size:
            return f"{count / size:.3g}{unit}"
    return str(count)


def print_plan(console: Console, plan: LadderPlan, runs_dir: Path, rerun: Rerun, workers: int):
    """``--dry-run`` of a ladder."""
    spec = plan.spec
    if spec.tokens_per_param is not None:
        rule = (
            f"train.tokens_per_param={spec.tokens_per_param:g} sets each rung's steps from its "
            "non-embedding parameters, output head included (counted on the grid's first job)"
        )
    elif spec.key == "data.train_samples":
        rule = "the model and its steps fixed at every rung, the unique training data varying"
    else:
        rule = "every rung at the grid's train.max_steps (no budget rule: the data regime moves)"
    if spec.head_dim:
        rule += f"; heads = width / {spec.head_dim}"
    if plan.rungs[0].tuned is None:
        how = "each rung a plain grid (nothing tuned)"
    elif spec.transfer:
        tuned = ", ".join(r.value for r in plan.rungs[: spec.transfer])
        how = f"tuned at {spec.key}={tuned} only; larger rungs train at that choice (transfer)"
    else:
        how = "each group tuned at every rung, then confirmed on fresh seeds"
    console.print(
        Text(f"ladder {plan.name}: {rule}; {how}", style="bold"), soft_wrap=not console.is_terminal
    )
    console.print(rung_table(plan, runs_dir, rerun, console))
    console.print(
        "params: all trainable; non-emb: less the embedding and positions, the output head "
        "kept (the rule's N, not Kaplan's); tok/N: training tokens per non-emb parameter; "
        "epochs over the unique training data (*: it repeats); 6ND: training FLOPs; runs: at "
        "most, tuning included; to do: of a plain rung's grid, not yet complete (-: a tuned "
        "rung, known once its tuning has chosen)",
        soft_wrap=not console.is_terminal,
        highlight=False,
    )
    console.print(counts_table(plan))
    console.print(COUNTS_NOTE, soft_wrap=not console.is_terminal, highlight=False)
    total = sum(rung.seconds() for rung in plan.rungs)
    console.print(
        f"estimated time: {estimate_text(total)} on one worker, {estimate_text(total / workers)}"
        f" on {workers}; "
        + ESTIMATE_NOTE.format(
            cpu=FLOPS_PER_S["cpu"],
            step=SECONDS_PER_STEP["cpu"] * 1000,
            run=SECONDS_PER_RUN,
            cuda=FLOPS_PER_S["cuda"],
        ),
        soft_wrap=not console.is_terminal,
        highlight=False,
    )
    for note in plan.notes:
        console.print(Text(note, style="yellow"), soft_wrap=not console.is_terminal)


def choices_table(plan: LadderPlan, record: dict) -> Table | None:
    """What each group chose at each rung (a transferred rung shows the choice it took), or
    None when nothing was tuned."""
    rungs = record["rungs"]
    if plan.rungs[0].tuned is None:
        return None
    table = Table(title="chosen per rung (tuning on validation)", title_justify="left")
    table.add_column("group")
    for entry in rungs:
        mark = "" if entry["tuned"] else " (transfer)"
        table.add_column(f"{plan.spec.key}={entry['value']}{mark}")
    labels = [g.label for g in plan.rungs[0].tuned.groups]
    for label in labels:
        cells = []
        for entry in rungs:
            chosen = (entry.get("chosen") or {}).get(label)
            cells.append(" ".join(f"{k}={v}" for k, v in chosen.items()) if chosen else "-")
        table.add_row(label, *cells)
    return table

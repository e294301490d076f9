"""The tuned section of a report: what a tuned comparison (normbench.sweeps.tuned) chose for
each group, at which budget, and how firmly, read from the sweep's record.

A report of a tuned sweep (`report --sweep NAME`) reads the confirmation runs only (the
record lists no other) and computes its verdicts on test (Method.test): the values were
chosen on validation from the tuning seeds, so neither the confirmation seeds nor any test
number took part in the choice. A tuned comparison whose groups had unequal budgets says so
in every output (``notes``). The record lies in an untrusted runs directory: every field is
checked as it is read, and a malformed group is left out with a note.

The regret bound is stated where it informs and said in words where it cannot (``regret``):
"not estimable" below three tuning seeds (one degree of freedom: bounds as large as the
effects decided), "vacuous" where it reaches the chosen's own loss (no loss is below 0), and
0 as "≤0 at 90%", not as proof that the chosen is best. Below three tuning seeds (the
default, two: docs/sweeps.md says why) no group has a bound, so the tables a reader sees
leave the column out and the caption says once why, and how to get one; CSV and JSON keep
the columns. The choice is made on the loss and a
classifier's verdicts on accuracy: where another candidate had the best validation accuracy
(``acc_best``), every output says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from normbench.core.errors import UsageError
from normbench.core.text import escape_markdown, plain
from normbench.store import records, sweep_record

COLUMNS = (
    "group",
    "tuned",
    "space",
    "trials",
    "steps",
    "full_grid_steps",
    "chosen",
    "metric",
    "val_chosen",
    "runner_up",
    "val_gap",
    "regret_bound",
    "tried",
    "edge",
    "regret",  # the bound as the outputs state it: a number, or why there is none
    "acc_best",  # the candidate with the best validation accuracy, where not the chosen
    "equal_budget",  # False in every row when the groups' budgets differed: said in every output
)
LOSSES = ("val_loss", "val_bpb")  # selection metrics bounded below by 0
# How normbench.sweeps.tuned.edge_text ends an edge no step beyond bounded (the step limit
# reached, the extension rounds spent, or not extended): the record holds the sentence
OPEN_EDGE = "widen the grid"
MIN_REGRET_SEEDS = 3  # below: one degree of freedom (normbench.sweeps.halving's, for records)
# The columns a reader sees (the terminal, a tuned sweep's closing table, HTML) and their
# headers there, short so that the table fits 80 columns (the caption names CSV's and JSON's
# columns for them); the rest are said in the caption or are in CSV and JSON.
SHOWN = {
    "group": "group",
    "trials": "trials",
    "steps": "steps",
    "chosen": "chosen",
    "val_chosen": "val",
    "val_gap": "gap",
    "regret": "regret",
}


@dataclass
class Tuning:
    """Per group the budget, the value chosen and how firm; the phase the sweep reached."""

    sweep: str
    table: pd.DataFrame
    phase: str
    equal: bool
    tuning_seeds: list[int]
    rungs: list[dict]
    notes: list[str] = field(default_factory=list)
    per_rung: list[str] = field(default_factory=list)  # a ladder's choice at every rung

    @property
    def regret_withheld(self) -> bool:
        """True where no group can have a regret bound: too few tuning seeds."""
        return len(self.tuning_seeds) < MIN_REGRET_SEEDS

    def shown_columns(self, columns: Sequence[str]) -> list[str]:
        """``columns`` less the regret's where no group has one (said once in the caption)."""
        withheld = ("regret", "regret_bound") if self.regret_withheld else ()
        return [c for c in columns if c not in withheld]

    def regret_caption(self) -> str:
        """The caption's words on the regret bound: what it is, or why there is none."""
        if self.regret_withheld:
            count = len(self.tuning_seeds)
            why = (
                f"at {count} tuning seeds the paired t has {count - 1} degree of freedom, and "
                "the bound is as large as the differences tuning decides (its median 0.29 "
                "nats at 2 seeds in docs/statistics.md's simulation, 0.07 at 3)"
                if count >= 2
                else f"{count} tuning seed gives no paired t"
            )
            return (
                f"no regret bound: {why}; --tune-seeds 3 or more gives one, on the "
                "candidates' typical runs (a spike no tuning seed showed is not bounded); "
                "the verdicts below, from the confirmation seeds, do not depend on it"
            )
        return (
            "regret_bound: a 90% upper bound on how much "
            "better another candidate trained at the full budget could be in its typical run "
            "(paired t over the tuning seeds, Bonferroni over the candidates: Hsu's "
            "comparison with the best; a run that diverged on fewer than half the seeds is "
            "left out of its comparison, so a rate near divergence, which spikes in some "
            "runs, is compared on its typical runs and its spikes are not bounded: the "
            "confirmation counts its divergences); regret: the bound in words, 'vacuous' "
            "where it reaches the chosen's own loss (no loss is below 0), '≤0 at 90%' where "
            "no other candidate was found better, which is not proof that none is, 'not "
            "estimable' where a run of the chosen has no value"
        )

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys tuned in any group, which the report then groups by no default."""
        named = (k.strip() for cell in self.table["tuned"] for k in str(cell).split(","))
        return tuple(dict.fromkeys(k for k in named if k and k != "-"))

    def chosen_on(self) -> str:
        """What the choices were made on: the validation loss (normbench 0.5 on), or the
        metric an older record names."""
        named = {m for m in self.table["metric"] if m and m != "-"}
        metric = named.pop() if len(named) == 1 else "val_loss"
        return {"val_loss": "validation loss", "val_bpb": "validation bits per byte"}.get(
            metric, "validation accuracy" if metric == "val_acc" else "validation metric"
        )

    def method(self) -> str:
        """How the candidates were compared: every one at the full budget, or by halving."""
        rungs = ", ".join(f"{r['keep']} x {r['steps']} steps" for r in self.rungs)
        if len(self.rungs) == 1:
            return "every candidate at the full budget (no halving)"
        return f"successive halving (rungs: {rungs})"

    def caption(self) -> str:
        seeds = ", ".join(map(str, self.tuning_seeds))
        budget = "equal budgets" if self.equal else "UNEQUAL BUDGETS"
        done = "" if self.phase == "done" else f" (the sweep stopped in its {self.phase} phase)"
        return (
            f"Tuned sweep {self.sweep}{done}: each group's value chosen on the final "
            f"{self.chosen_on()} (mean over tuning seeds {seeds}) by {self.method()}; "
            f"{budget}; steps: the group's tuning steps (full_grid_steps: every candidate at "
            "the full budget); val_gap: the "
            "chosen candidate's lead over the runner-up at the last rung, in the metric's "
            f"units; {self.regret_caption()}; tried: the values each group trained; edge: a "
            "choice at or "
            "beyond the largest or smallest value listed, and what bounds it; acc_best: "
            "the candidate with the best validation accuracy where it is not the chosen "
            "(chosen on the loss; the verdicts are on accuracy). The verdicts below are "
            "on test, from the confirmation seeds only."
            + "".join(f" {line}." for line in self.per_rung)
        )

    def json(self) -> dict:
        import json

        return {
            "groups": json.loads(self.table.to_json(orient="records")),  # NaN: null
            "phase": self.phase,
            "equal_budget": self.equal,
            "tuning_seeds": self.tuning_seeds,
            "rungs": self.rungs,
            "notes": self.notes,
            "per_rung": self.per_rung,
            "selection": "validation (tuning seeds)",
            "verdict_split": "test (confirmation seeds)",
        }

    def markdown(self) -> str:
        columns = self.shown_columns(COLUMNS)
        header = "| " + " | ".join(columns) + " |"
        rule = "| " + " | ".join("---" for _ in columns) + " |"
        body = [
            "| " + " | ".join(escape_markdown(_cell(row[c])) for c in columns) + " |"
            for _, row in self.table.iterrows()
        ]
        notes = [f"Note: {escape_markdown(note)}" for note in self.notes]
        return "\n\n".join(
            ["## Tuned", "\n".join([header, rule, *body]), escape_markdown(self.caption()), *notes]
        )

    def html(self) -> str:
        """The section as an HTML block: the terminal's table (same columns, same names, its
        caption under it), every stored value escaped."""
        from html import escape

        from normbench.report.html import table_html

        notes = "".join(f'<p class="warning">{escape(note)}</p>' for note in self.notes)
        return f"<h2>Tuned: {escape(self.sweep)}</h2>{notes}{table_html(self.table_view())}"

    def rich(self):
        """The terminal's rendering (the report's, and the sweep's once tuning has ended):
        the table, then its caption wrapped at the terminal's width."""
        from rich.console import Group
        from rich.text import Text

        if self.table.empty:  # stopped before any group chose: no table of nothing
            said = [
                f"tuned: {self.sweep}: no table: the sweep stopped in its {self.phase} phase, "
                "before its groups chose",
                *self.per_rung,
            ]
            return Group(*(Text(line, style="dim") for line in said))
        table = self.table_view()
        caption, table.caption = table.caption, None
        return Group(table, Text(caption, style="dim"))

    def table_view(self):
        """The table a reader sees, in the terminal, after a sweep and in HTML: the columns
        of ``SHOWN`` under its headers; a chosen value or a group's item on a line of its
        own, never folded or cropped (the key heads the column when one key was tuned); what
        the groups tried, and the marks, in the caption."""
        from rich import box
        from rich.table import Table

        table = Table(
            title=f"tuned: {self.sweep}",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            padding=(0, 0),
            pad_edge=False,
        )
        keys = set(self.table["tuned"])
        one_key = len(keys) == 1 and "," not in next(iter(keys)) and "-" not in keys
        shown = self.shown_columns(list(SHOWN))
        rows = []
        for _, row in self.table.iterrows():
            cells = {c: plain(_cell(row[c])) for c in shown}
            chosen = cells["chosen"].split(" ")
            if one_key:  # the key is the header: the cell is its value
                chosen = [item.partition("=")[2] for item in chosen]
            cells["chosen"] = "\n".join(chosen) + (" *" if isinstance(row["edge"], str) else "")
            cells["group"] = "\n".join(cells["group"].split(" "))
            rows.append(cells)
        for column in shown:
            header = next(iter(keys)) if column == "chosen" and one_key else SHOWN[column]
            if column == "regret":  # words where it is no number: wrapped, never cropped
                table.add_column(
                    header, justify="right", min_width=6, max_width=14, overflow="fold"
                )
            elif column in ("group", "chosen"):
                longest = max(
                    (len(line) for r in rows for line in r[column].split("\n")), default=0
                )
                table.add_column(header, min_width=max(longest, len(header)), overflow="fold")
            else:
                table.add_column(header, justify="right", no_wrap=True)
        for cells in rows:
            table.add_row(*(cells[c] for c in shown))
        tried = tried_summary(list(zip(self.table["group"], self.table["tried"], strict=True)))
        edge = "; * at an edge of the grid" if self.table["edge"].map(bool).any() else ""
        table.caption = (
            "; ".join(tried)
            + edge
            + "".join(f". {line}" for line in acc_best_lines(self.table))
            + (
                ". val, gap: the columns val_chosen, val_gap. "
                if self.regret_withheld
                else ". val, gap, regret: the columns val_chosen, val_gap, regret_bound (regret "
                "in words where it is no number). "
            )
            + self.caption()
        )
        return table


def acc_best_lines(table: pd.DataFrame) -> list[str]:
    """One sentence per group whose best validation accuracy is another candidate's than its
    chosen (loss-best) one's."""
    return [
        f"loss-best and accuracy-best differ: {row['group']}: chosen {row['chosen']} on the "
        f"loss; best validation accuracy {row['acc_best']}"
        for _, row in table.iterrows()
        if isinstance(row["acc_best"], str)
    ]


def tried_summary(tried: list[tuple[str, str]]) -> list[str]:
    """What the groups tried, for a terminal (a column of value lists is too wide at 80
    columns): one line when every group tried the same values, else one per group."""
    values = {text for _, text in tried}
    if len(values) == 1:
        return [f"tried by every group: {values.pop()}"]
    return [f"tried by {group}: {text}" for group, text in tried]


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def group_values(group: str) -> dict[str, str]:
    """A group's or a candidate's text as the record writes it (``norm=dyt data=pysource``,
    ``train.lr=0.01 norm.alpha_init=1.0``), as {key: value text}."""
    return dict(item.split("=", 1) for item in group.split() if "=" in item)


def tuning_of(runs_dir: Path, sweeps: str | None) -> Tuning | None:
    """The tuned section of the named sweeps (``a,b``: the first that is tuned; a report of
    two tuned sweeps at once is refused), or None when none is tuned."""
    if not sweeps:
        return None
    found = []
    for name in records.sweep_names(sweeps):
        record = records.latest_record(runs_dir, name)
        if isinstance(record.get("tuning"), dict):
            found.append((name, record["tuning"]))
    if len(found) > 1:
        raise UsageError(
            f"--sweep {sweeps}: {found[0][0]} and {found[1][0]} are both tuned comparisons; "
            "report one at a time"
        )
    if found and len(records.sweep_names(sweeps)) > 1:  # its rules would hold for the others too
        raise UsageError(
            f"--sweep {sweeps}: {found[0][0]} is a tuned comparison (verdicts on test, no "
            f"grouping by its tuned keys); valid: report it alone, --sweep {found[0][0]}"
        )
    if not found:
        return None
    tuning = parse(*found[0])
    ladder = records.latest_record(runs_dir, found[0][0]).get("ladder")
    current = {  # the table's choices: the rung it stopped in, where that rung has chosen
        row["group"]: " ".join(item.partition("=")[2] for item in row["chosen"].split())
        for _, row in tuning.table.iterrows()
        if row["chosen"] != "-"
    }
    tuning.per_rung = ladder_choices(ladder, current) if isinstance(ladder, dict) else []
    return tuning


def ladder_chosen(ladder: dict) -> tuple[list[dict], dict[str, list[str]]]:
    """A tuned ladder record's rungs and, per group, its chosen value at each rung ('-' where
    a rung has no readable choice: the record is untrusted)."""
    rungs = [r for r in ladder.get("rungs") or [] if isinstance(r, dict)]
    chosen = [r.get("chosen") if isinstance(r.get("chosen"), dict) else {} for r in rungs]
    groups = list(dict.fromkeys(g for c in chosen for g in c))
    per_group = {}
    for group in groups:
        picks = [c.get(group) for c in chosen]
        per_group[group] = [
            " ".join(map(str, p.values())) if isinstance(p, dict) and p else "-" for p in picks
        ]
    return rungs, per_group


def ladder_choices(ladder: dict, current: dict[str, str] | None = None) -> list[str]:
    """A tuned ladder's choice at every rung, one sentence (the table is the last rung's, or
    the one it stopped in, whose choices ``current`` gives where it has made them: the record
    writes a rung's choice once the rung is done): whether the best value moves with the size
    is what muP transfer is for (a rung that took a smaller rung's choice is marked
    'transferred'; one it never reached, 'not reached')."""
    rungs, per_group = ladder_chosen(ladder)
    stopped = next((i for i, r in enumerate(rungs) if not r.get("done")), None)
    if not any("done" in r for r in rungs):  # a record that does not say: none stopped
        stopped = None
    for group, chosen in (current or {}).items() if stopped is not None else ():
        values = per_group.setdefault(group, ["-"] * len(rungs))
        values[stopped] = chosen if values[stopped] == "-" else values[stopped]
    if not rungs or not per_group:
        return []
    sizes = ", ".join(str(r.get("value", "?")) for r in rungs)
    said = [
        f"{group} "
        + ", ".join(
            _rung_choice(v, rung, None if stopped is None else i - stopped)
            for i, (rung, v) in enumerate(zip(rungs, values, strict=True))
        )
        for group, values in per_group.items()
    ]
    key = ladder.get("key", "size")
    table = "the table is the last rung's"
    if stopped is not None:
        table = f"the ladder stopped at {key}={rungs[stopped].get('value', '?')}, the table's rung"
    return [f"Chosen per rung ({key} {sizes}; {table}): {'; '.join(said)}"]


def _rung_choice(chosen: str, rung: dict, after_stop: int | None) -> str:
    """One rung's choice in the per-rung sentence; ``after_stop``: the rung's place after the
    one the ladder stopped in (0: that one; None: it did not stop)."""
    if after_stop is not None and after_stop > 0:
        return "not reached"
    if after_stop == 0 and chosen == "-":
        return "not chosen yet"
    return chosen if rung.get("tuned", True) else f"{chosen} (transferred)"


def parse(name: str, state: dict) -> Tuning:
    """A record's ``tuning`` part as a section (its fields checked by the store: a malformed
    group or list is left out with a note); each group at an edge of the grid gets a note."""
    part = sweep_record.tuning_part(state)
    notes = list(part.notes)
    notes += [
        f"at an edge of the grid{', unbracketed' if unbracketed(row['edge']) else ''}: "
        f"{row['group']}: {row['edge']}"
        for row in part.rows
        if row["edge"]
    ]
    for row in part.rows:
        row["equal_budget"] = part.equal
        row["regret_bound"], row["regret"] = regret_stated(row, len(part.tuning_seeds))
    table = pd.DataFrame(part.rows, columns=list(COLUMNS))
    notes += acc_best_lines(table)  # every format's notes (JSON's too); a table's caption
    if not part.equal and not any("UNEQUAL" in note for note in notes):
        notes.append("UNEQUAL BUDGETS: the groups were tuned with different numbers of trials")
    return Tuning(name, table, part.phase, part.equal, part.tuning_seeds, part.rungs, notes)


def unbracketed(edge: object) -> bool:
    """Whether a group's choice sits at an edge of the grid with no step beyond it tried and
    found worse or diverging: its optimum may lie further out, and every verdict on it (or
    against it, as the reference) is at a value that may not be its best."""
    return isinstance(edge, str) and OPEN_EDGE in edge


def regret_stated(row: dict, seeds: int) -> tuple[float | None, str]:
    """A group's regret bound as the outputs give it: the number where it informs (None
    where not), and in words. Not estimable below ``MIN_REGRET_SEEDS`` tuning seeds (the
    paired t over 2 seeds has 1 degree of freedom: a candidate with one seed near divergence
    sent the suite's bound to 1.8e10, and a bound printed from an older record at 2 seeds is
    no better) or where the record has none; vacuous where a loss's bound reaches the
    chosen's own loss (no candidate's loss is below 0, so it says nothing); 0 as "≤0 at 90%",
    none found better, not proof that none is."""
    bound, value = row["regret_bound"], row["val_chosen"]
    if not row["runner_up"] and bound is None:
        return None, "-"  # nothing to choose, or no other candidate at the full budget
    if seeds < MIN_REGRET_SEEDS:
        return None, f"not estimable ({seeds} tuning seed{'s' if seeds != 1 else ''})"
    if bound is None:
        return None, "not estimable (a run of the chosen has no value)"
    loss = row["metric"] in LOSSES and value is not None and value >= 0
    if loss and bound >= value:
        return None, f"vacuous (≥ the chosen's loss, {value:.4g})"
    if bound <= 0:
        return 0.0, "≤0 at 90%"
    return bound, f"{bound:.4g}"


def attach(text: str | dict, fmt: str, tuning: Tuning, out: Path | None) -> str | dict:
    """The report's text with the tuned section in it: JSON gains ``tuning``, markdown opens
    with it, CSV written to files gains FILE-tuning.csv (on stdout CSV holds one table:
    ``--table tuning`` picks this one)."""
    import json

    def one(content: str) -> str:
        if fmt == "json":
            payload = json.loads(content)
            payload["tuning"] = tuning.json()
            return json.dumps(payload, indent=2) + "\n"
        if fmt == "markdown":
            return tuning.markdown() + "\n\n" + content
        return content

    if isinstance(text, str):
        return one(text)
    files = {path: one(content) for path, content in text.items()}
    if fmt == "csv" and out is not None:
        files[out.with_name(f"{out.stem}-tuning{out.suffix or '.csv'}")] = csv(tuning)
    return files


def alone(fmt: str, tuning: Tuning) -> str:
    """``--table tuning``: the tuned section alone, in the chosen format."""
    import json

    if fmt == "json":
        return json.dumps({"tuning": tuning.json()}, indent=2) + "\n"
    if fmt == "markdown":
        return tuning.markdown() + "\n"
    return csv(tuning)


def csv(tuning: Tuning) -> str:
    """CSV of the groups, formula injection defused as in every CSV the report writes (a cell
    missing, ``-`` in the other formats, is empty: a quoted ``'-`` would read as data)."""
    from normbench.report.tidy import to_csv

    return to_csv(tuning.table.map(lambda v: None if isinstance(v, str) and v == "-" else v))

"""The cost claims of normbench/studies/registered/cost/, measured and labelled (issue 60 item 5).

Each claim was registered (committed) before this script measured it; a claim whose file was
committed after the measurement began, or has uncommitted changes, is shown *exploratory*,
never labelled. The claims are about time and bytes, not about trained runs, so they are
measured here in one process rather than by a findings study's sweep:

- **Time** (RMSNorm faster than LayerNorm; DyT faster than RMSNorm): every candidate (a norm
  in one implementation, at one width) that a claim's comparisons name is timed as `normbench
  cost` times it (normbench.layers.timing: forward and backward, tokens layout (32, 128,
  width), fp32), interleaved in blocks in a fresh random order each block, the blocks the
  replicates: per block, each comparison's result is minus the log seconds of the group and of
  the reference, paired by block. Load that slows both sides of a block cancels in its
  difference. With one torch thread the clock is the thread's CPU time.
- **Bytes** (BatchNorm stores more for backward than LayerNorm): the bytes one forward in train
  mode saves for its backward (normbench.training.cost.saved_bytes), counted twice.

The label rule is the registered one (normbench.studies.family): each comparison tested
one-sided for and against its prediction on the paired differences, Holm within the claim;
for the exact byte counts the rule the claim registered (no noise: decided by the difference
against the margin). The section is written between this page's markers in docs/cost.md with
--write, else printed.

    python benchmarks/cost_claims.py [--blocks 20] [--device cpu|cuda] [--write docs/cost.md]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

from normbench.layers.norms import make_norm
from normbench.layers.timing import Candidate, forward_backward, timed_blocks
from normbench.report import stats
from normbench.studies import family, registry
from normbench.studies.registry import Claim
from normbench.training.cost import saved_bytes

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = ROOT / "normbench" / "studies" / "registered" / "cost"
BATCH, POSITIONS, WIDTH = 32, 128, 64  # the registered input: (32, 128, width), tokens
BEGIN, END = "<!-- cost-findings -->", "<!-- /cost-findings -->"


def candidate_of(filters: tuple[str, ...]) -> Candidate:
    """The candidate a comparison's filters name (norm.name, norm.impl, width)."""
    named = dict(item.split("=", 1) for item in filters)
    return Candidate(
        named["norm.name"], named.get("norm.impl", "module"), int(named.get("width", WIDTH)), "fp32"
    )


def timed(claims: list[Claim], blocks: int, device: torch.device) -> dict[Candidate, list[float]]:
    """Seconds per forward and backward of every candidate the claims name, per block,
    interleaved within each width."""
    wanted = {
        candidate_of(filters)
        for claim in claims
        for c in claim.comparisons
        for filters in (c.group, c.reference)
    }
    seconds: dict[Candidate, list[float]] = {}
    for width in sorted({c.width for c in wanted}):
        members = sorted((c for c in wanted if c.width == width), key=str)
        print(f"width {width}: {len(members)} candidates, compiling where asked", file=sys.stderr)
        calls = {c: forward_backward(c, "tokens", BATCH, POSITIONS, device) for c in members}
        seconds.update(timed_blocks(calls, blocks, device))
    return seconds


def time_tested(claim: Claim, seconds: dict[Candidate, list[float]]) -> list[family.Tested]:
    """The claim's comparisons on -log seconds, paired by block, by the registered rule."""

    def results(filters: tuple[str, ...]) -> stats.Results:
        return {block: -math.log(s) for block, s in enumerate(seconds[candidate_of(filters)])}

    return family.decide_claim(
        claim, [(results(c.group), results(c.reference)) for c in claim.comparisons]
    )


def bytes_saved(candidate: Candidate, device: torch.device) -> int:
    """The bytes one train-mode forward of the candidate's norm saves for its backward."""
    torch.manual_seed(0)
    layer = make_norm(candidate.norm, candidate.width, "tokens", impl=candidate.impl).to(device)
    x = torch.randn(BATCH, POSITIONS, candidate.width, device=device, requires_grad=True)
    total, hooks = saved_bytes(layer)
    with hooks:
        layer(x).sum()
    return total()


def bytes_tested(claim: Claim, device: torch.device) -> list[family.Tested]:
    """The registered rule for an exact count: decided for when the log difference lies
    beyond the margin in the predicted direction, against otherwise (known exactly)."""
    tested = []
    for c in claim.comparisons:
        group, reference = (
            [bytes_saved(candidate_of(f), device) for _ in range(claim.seeds)]
            for f in (c.group, c.reference)
        )
        why = f"exact: {group[0]:,} B against {reference[0]:,} B"
        if len(set(group)) > 1 or len(set(reference)) > 1:
            tested.append(family.Tested(c.name, c.predicted, None, why=f"{why}; counts vary"))
            continue
        diff = -math.log(group[0]) + math.log(reference[0])  # higher is better: fewer bytes
        decided = diff < -claim.margin if c.predicted == "worse" else diff > claim.margin
        why += f", -log ratio {diff:+.3f}, margin {claim.margin:g}"
        tested.append(family.Tested(c.name, c.predicted, None, decided=decided, why=why))
    return tested


def section(
    claims: list[Claim], tested: dict[str, list[family.Tested]], context: str, began: datetime
) -> str:
    """The findings section: each claim's label (or exploratory) and its comparisons."""
    lines = [
        "Generated by `python benchmarks/cost_claims.py --write docs/cost.md`: " + context,
        "",
        family.RULE + " Here a comparison's 'seeds' are timing blocks (the replicates).",
        "",
    ]
    for claim in claims:
        found = registry.registration(claim.path)
        labelled = found.when is not None and found.when < began
        word = family.LABELS[family.label_of(tested[claim.id])] if labelled else family.EXPLORATORY
        comparisons = "; ".join(t.text(claim.alpha) for t in tested[claim.id])
        lines += [
            f"- **{word}.** {claim.source} (claim `{claim.id}`): {claim.says} {comparisons}. "
            f"Family: {len(tested[claim.id])} comparison(s), alpha {claim.alpha:g}, margin "
            f"{claim.margin:g} (log scale: a {math.exp(claim.margin):.2f}x ratio); "
            f"{found.text()}, measured from {began.isoformat(timespec='minutes')}; "
            f"{claim.seeds} blocks (repetitions) registered.",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=None, help="default: each claim's seeds")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--write", type=Path, default=None, help="replace the marked section")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    claims = list(registry.claims(CLAIMS).values())
    began = datetime.now(UTC)
    load_before, start = os.getloadavg()[0], time.perf_counter()
    timing = [c for c in claims if c.metric == "-log seconds"]
    blocks = args.blocks or max(c.seeds for c in timing)
    seconds = timed(timing, blocks, device)
    tested = {c.id: time_tested(c, seconds) for c in timing}
    tested |= {c.id: bytes_tested(c, device) for c in claims if c.metric == "-log saved bytes"}
    took, load_after = time.perf_counter() - start, os.getloadavg()[0]
    name = torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "CPU"
    context = (
        f"{began.date()}, torch {torch.__version__}, {device.type} ({name}), "
        f"{args.threads} torch thread(s), {os.cpu_count()} CPUs, 1-minute load average "
        f"{load_before:.1f} before and {load_after:.1f} after (a shared machine), {blocks} blocks, "
        f"{took:.0f} s in all."
    )
    text = section(claims, tested, context, began)
    if args.write is None:
        print(text)
        return 0
    page = args.write.read_text()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(page):
        print(f"--write {args.write}: no {BEGIN} ... {END} markers", file=sys.stderr)
        return 2
    args.write.write_text(pattern.sub(lambda _: f"{BEGIN}\n{text}{END}", page))
    print(f"wrote {args.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`normbench cost`: time norms against a reference on this machine, interleaved in blocks,
and print paired ratios with intervals (normbench.layers.timing)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from normbench.cli.app import app, fail

# torch-free copies of what the timing module takes (validation runs before torch loads)
LAYOUTS = {"transformer": "tokens", "cnn": "channels", "resnet": "channels"}
DTYPE_NAMES = ("fp32", "bf16", "fp16")
IMPLEMENTATIONS = ("module", "fused", "compiled")


def names(value: str, key: str, valid: tuple[str, ...]) -> list[str]:
    """A comma-separated list, each name one of ``valid`` (else one line naming them)."""
    from normbench.core.errors import UsageError

    chosen = [name.strip() for name in value.split(",") if name.strip()]
    bad = [name for name in chosen if name not in valid]
    if bad or not chosen:
        shown = bad[0] if bad else repr(value)
        raise UsageError(f"{key}={shown} is not valid; valid: {', '.join(valid)}")
    return list(dict.fromkeys(chosen))


def positive_ints(value: str, key: str) -> list[int]:
    from normbench.core.errors import UsageError

    try:
        numbers = [int(part) for part in value.split(",")]
    except ValueError:
        numbers = []
    if not numbers or any(n < 1 for n in numbers):
        raise UsageError(f"{key}={value} is not valid; valid: positive integers, comma-separated")
    return list(dict.fromkeys(numbers))


def parse_overrides(overrides: list[str]) -> tuple[list[str], str]:
    """``norm=a,b,c`` (default layernorm,rmsnorm,dyt) and ``model=NAME`` (its layout)."""
    from normbench.core.errors import UsageError
    from normbench.layers.keys import NORM_TABLE

    given: dict[str, str] = {}
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or key not in ("norm", "model"):
            raise UsageError(
                f"{override} is not valid here; valid: norm=NAME[,NAME...], model=NAME"
            )
        if key in given:
            raise UsageError(f"{key} given twice ({key}={given[key]}, {override}); give it once")
        given[key] = value
    norms = names(given.get("norm", "layernorm,rmsnorm,dyt"), "norm", tuple(NORM_TABLE))
    model = names(given.get("model", "transformer"), "model", tuple(LAYOUTS))
    if len(model) > 1:
        raise UsageError(
            f"model={given['model']}: one model at a time; valid: one of {', '.join(LAYOUTS)}"
        )
    return norms, LAYOUTS[model[0]]


def with_reference(norms: list[str], reference: str | None) -> str:
    """The reference (the first norm named, unless --reference names one), put first among
    ``norms`` when they lack it; an unknown one is refused in one line."""
    from normbench.core.errors import UsageError
    from normbench.layers.keys import NORM_TABLE

    reference = reference or norms[0]
    if reference not in NORM_TABLE:
        raise UsageError(f"--reference={reference} is not valid; valid: {', '.join(NORM_TABLE)}")
    if reference not in norms:
        norms.insert(0, reference)
    return reference


LEAST = {"--blocks": 3, "--batch": 1, "--positions": 1, "--threads": 1}


def check_least(given: dict[str, int]) -> None:
    """Each count at least its ``LEAST``; one below is refused in one line."""
    from normbench.core.errors import UsageError

    for key, value in given.items():
        if value < LEAST[key]:
            raise UsageError(f"{key}={value} is not valid; valid: an integer >= {LEAST[key]}")


@app.command(short_help="Time norms against a reference: paired ratios with intervals.")
def cost(
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            help="norm=NAME[,NAME...] (default layernorm,rmsnorm,dyt) and model=transformer|"
            "cnn|resnet (the layout: tokens, or channels)",
            show_default=False,
        ),
    ] = None,
    widths: Annotated[
        str, typer.Option("--widths", help="Feature widths, comma-separated.")
    ] = "64,256,1024",
    dtype: Annotated[
        str, typer.Option("--dtype", help="fp32, bf16, fp16 (under autocast), comma-separated.")
    ] = "fp32",
    impl: Annotated[
        str,
        typer.Option("--impl", help="module, fused, compiled (norm.impl), comma-separated."),
    ] = "module,fused",
    reference: Annotated[
        str | None,
        typer.Option(
            "--reference", help="The norm the others are timed against \\[default: the first norm]."
        ),
    ] = None,
    blocks: Annotated[int, typer.Option("--blocks", help="Interleaved blocks (replicates).")] = 20,
    batch: Annotated[int, typer.Option("--batch", help="Samples per activation.")] = 32,
    positions: Annotated[
        int, typer.Option("--positions", help="Tokens, or positions of a channel, per sample.")
    ] = 128,
    threads: Annotated[int, typer.Option("--threads", help="torch threads.")] = 1,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda.")] = "cpu",
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write every ratio as JSON rows here.")
    ] = None,
) -> None:
    """Time each norm's forward and backward, in each implementation, width and dtype,
    interleaved in blocks in this process (torch.utils.benchmark), and print each against the
    reference norm and each implementation against the module: the geometric mean of the
    per-block ratios with a 95% t interval on their logs (docs/cost.md)."""
    from normbench.core.errors import UsageError

    try:
        norms, layout = parse_overrides(overrides or [])
        reference = with_reference(norms, reference)
        chosen_widths = positive_ints(widths, "--widths")
        dtypes = names(dtype, "--dtype", DTYPE_NAMES)
        impls = names(impl, "--impl", IMPLEMENTATIONS)
        names(device, "--device", ("cpu", "cuda"))
        check_least(
            {"--blocks": blocks, "--batch": batch, "--positions": positions, "--threads": threads}
        )
    except UsageError as err:
        raise fail(str(err)) from None

    import torch

    from normbench.layers.timing import measure

    if device == "cuda" and not torch.cuda.is_available():
        raise fail("--device=cuda is not available on this machine; valid: cpu")
    torch.set_num_threads(threads)
    load_start = os.getloadavg()[0]
    seconds, ratios, notes = measure(
        norms, impls, chosen_widths, dtypes, layout, reference, blocks, batch, positions,
        torch.device(device),
    )  # fmt: skip
    load_end = os.getloadavg()[0]
    setting = (
        f"{blocks} blocks, {threads} thread(s), load {load_start:.1f} -> {load_end:.1f} on "
        f"{os.cpu_count()} CPUs, device {device}"
    )
    print_timings(seconds, ratios, notes, layout, batch, positions, setting)
    if json_out is not None:
        write_rows(json_out, ratios, layout, load_start, load_end)


def print_timings(seconds, ratios, notes, layout: str, batch: int, positions: int, setting: str):
    """The measurement as a table: per candidate its median time and its ratios."""
    shape = (
        "(batch, positions, width)"
        if layout == "tokens"
        else "(batch, width, positions), contiguous N, C, L"
    )
    print(
        f"forward + backward of one norm, {layout} {shape} = batch {batch}, positions "
        f"{positions}; {setting}"
    )
    for note in notes:
        print(f"note: {note}")
    header = (
        f"{'width':>6} {'dtype':5} {'norm':12} {'impl':9} {'median us':>10}  ratio [95% interval]"
    )
    print(header)
    by_candidate = {}
    for r in ratios:
        by_candidate.setdefault(r.candidate, []).append(r)
    for candidate, times in seconds.items():
        median = sorted(times)[len(times) // 2] * 1e6
        against = [
            f"{r.ratio:.2f} [{r.low:.2f}, {r.high:.2f}] vs "
            + (f"{r.reference.norm}" if r.reference.norm != candidate.norm else r.reference.impl)
            + f" {r.verdict}"
            for r in by_candidate.get(candidate, [])
        ]
        print(
            f"{candidate.width:>6} {candidate.dtype:5} {candidate.norm:12} {candidate.impl:9} "
            f"{median:>10.1f}  " + "; ".join(against)
        )
    print(
        "ratio: geometric mean over blocks of each block's time ratio; interval: 95% t "
        "interval on the mean log ratio (scipy.stats.t, blocks - 1 df); faster/slower where "
        "it excludes 1, else inconclusive. A machine shared with other work widens it."
    )


def write_rows(path: Path, ratios, layout: str, load_start: float, load_end: float) -> None:
    """``--json``: one row per ratio, with the load around the measurement."""
    rows = [
        {
            "width": r.candidate.width,
            "dtype": r.candidate.dtype,
            "layout": layout,
            "norm": r.candidate.norm,
            "impl": r.candidate.impl,
            "reference_norm": r.reference.norm,
            "reference_impl": r.reference.impl,
            "ratio": r.ratio,
            "low": r.low,
            "high": r.high,
            "blocks": r.blocks,
            "verdict": r.verdict,
            "load_start": load_start,
            "load_end": load_end,
        }
        for r in ratios
    ]
    path.write_text(json.dumps(rows, indent=1) + "\n")

"""The report's output on one designed store, kept byte for byte: every table (convergence
against a named reference, batch sensitivity, precision, learning-rate and depth stability,
diagnostics), the notes and the captions, in every format (the terminal at 80 and 100
columns). A change to a number, a word or a layout fails here; a change made on purpose
regenerates the files:
``PYTHONPATH=. python tests/report/test_golden.py`` (then read the diff before committing)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/helpers.py, as a script

from helpers import make_run  # noqa: E402

from normbench.cli import app  # noqa: E402

GOLDEN = Path(__file__).parent / "golden"
OPTIONS = ["--reference", "norm=layernorm", "--diagnostics"]
runner = CliRunner()


def designed_store(runs: Path) -> Path:
    """Four sections (train.max_steps tells them apart), each with LayerNorm (the named
    reference) and one question: batch size, precision, learning rate, depth. Numbers are
    chosen so that every verdict appears somewhere; a diverged and a failed run give notes;
    two runs carry diagnostics."""
    # section 1: batch sensitivity (BatchNorm loses at batch 8, LayerNorm does not)
    for seed in range(3):
        for batch, bn, ln in ((8, 0.70, 0.900), (32, 0.90, 0.901)):
            bn_run = make_run(
                runs,
                ["train.max_steps=30", f"batch_size={batch}", f"seed={seed}", "norm=batchnorm"],
                acc=bn + seed / 100,
                steps_to_target=100 + 10 * seed,
                code="golden",
            )
            ln_run = make_run(
                runs,
                ["train.max_steps=30", f"batch_size={batch}", f"seed={seed}", "norm=layernorm"],
                acc=ln + seed / 200,
                code="golden",
            )
            if seed == 0 and batch == 32:
                _diagnostics(runs / bn_run, scale=2.0)
                _diagnostics(runs / ln_run, scale=1.0)
    make_run(
        runs,
        ["train.max_steps=30", "batch_size=8", "seed=3", "norm=batchnorm"],
        status="failed",
        acc=None,
        error="boom",
        code="golden",
    )
    # section 2: precision (fp16 worse for RMSNorm, bf16 equivalent), a diverged fp16 run
    for seed in range(3):
        for precision, ln, rms in (
            ("fp32", 0.90, 0.91),
            ("bf16", 0.899, 0.905),
            ("fp16", 0.89, 0.8),
        ):
            for norm, acc in (("layernorm", ln), ("rmsnorm", rms)):
                make_run(
                    runs,
                    [
                        "train.max_steps=40",
                        f"precision={precision}",
                        f"norm={norm}",
                        f"seed={seed}",
                    ],
                    acc=acc + seed / 500,
                    code="golden",
                )
    make_run(
        runs,
        ["train.max_steps=40", "precision=fp16", "norm=rmsnorm", "seed=3"],
        status="diverged",
        acc=0.1,
        code="golden",
    )
    # section 3: learning rate (no norm diverges at 0.1), with losses for the LR sensitivity
    for seed in range(2):
        for lr, ln, none in ((0.01, 0.90, 0.88), (0.1, 0.86, None)):
            for norm, acc in (("layernorm", ln), ("none", none)):
                overrides = ["train.max_steps=50", f"train.lr={lr}", f"norm={norm}", f"seed={seed}"]
                loss = 2.3 if acc is None else 2.3 * (1 - acc)
                make_run(
                    runs,
                    overrides,
                    status="diverged" if acc is None else "complete",
                    acc=0.1 if acc is None else acc + seed / 300,
                    summary_extra={"final_val_loss": loss + seed / 50, "initial_val_loss": 2.3},
                    code="golden",
                )
    # section 4: depth (GroupNorm stops training at depth 2)
    for seed in range(2):
        for depth, ln, gn in ((1, 0.80, 0.82), (2, 0.85, 0.11)):
            for norm, acc in (("layernorm", ln), ("groupnorm", gn)):
                make_run(
                    runs,
                    ["train.max_steps=60", f"model.depth={depth}", f"norm={norm}", f"seed={seed}"],
                    acc=acc + seed / 100,
                    code="golden",
                )
    return runs


def _diagnostics(run: Path, scale: float) -> None:
    """A diagnostics file as training writes one: two units, at step 0 and at step 30."""
    rows = [
        {
            "step": step,
            "unit": unit,
            "sublayer": "conv",
            "grad_norm": scale * (unit + 1) / (1 + step),
            "in_std": 1.0 + unit / 4,
            "out_std": 1.0,
            "resid_rms": 1.5 + unit,
            "max_logit": float("nan"),
            "log_z": 2.25,
            "resid_kurtosis": scale * unit - 0.5 + step / 10,
            "resid_max_abs": 4.0 + scale * unit + step / 10,
            "sublayer_kurtosis": 0.25 * scale + step / 20,
            "sublayer_max_abs": 1.5 * scale,
            "attn_sink": float("nan"),  # conv units have no attention
            "train_mode_val_acc": 0.5 + step / 100,
            "eval_mode_val_acc": 0.5 + step / 110,
            **{f"sn_{k}_{n}": float("nan") for k in ("mean", "var") for n in ("in", "ln", "bn")},
        }
        for step in (0, 30)
        for unit in (0, 1)
    ]
    pd.DataFrame(rows).to_parquet(run / "diagnostics.parquet", index=False)


def outputs(runs: Path, out: Path) -> dict[str, str]:
    """The report of the designed store in each format: {golden file name: text}."""
    texts = {}
    for fmt, suffix in (("json", "json"), ("markdown", "md")):
        result = runner.invoke(app, ["report", str(runs), *OPTIONS, "--format", fmt])
        assert result.exit_code == 0, result.output
        texts[f"report.{suffix}"] = result.stdout
    result = runner.invoke(
        app, ["report", str(runs), *OPTIONS, "--format", "csv", "--out", str(out / "r.csv")]
    )
    assert result.exit_code == 0, result.output
    texts["report.csv"] = "".join(
        f"# {path.name}\n{path.read_text()}" for path in sorted(out.glob("r-*.csv"))
    )
    for columns in (80, 100):
        result = runner.invoke(app, ["report", str(runs), *OPTIONS], env={"COLUMNS": str(columns)})
        assert result.exit_code == 0, result.output
        texts[f"report-{columns}.txt"] = result.stdout
    return texts


@pytest.fixture(scope="module")
def produced(tmp_path_factory) -> dict[str, str]:
    where = tmp_path_factory.mktemp("golden")
    return outputs(designed_store(where / "runs"), where)


def to_9_digits(text: str) -> str:
    """Every long float at 9 significant digits: the last of a float's 17 follow the numpy
    and scipy release (CI runs the declared lower bounds too), not the report's method."""
    return re.sub(r"-?\d+\.\d{12,}(?:e[-+]\d+)?", lambda m: f"{float(m.group()):.9g}", text)


@pytest.mark.parametrize(
    "name", ["report.json", "report.md", "report.csv", "report-80.txt", "report-100.txt"]
)
def test_the_report_of_the_designed_store_is_unchanged(produced, name):
    kept = (GOLDEN / name).read_text()
    assert to_9_digits(produced[name]) == to_9_digits(kept), (
        f"{name} differs from tests/report/golden/{name}; if the change is meant, regenerate "
        "with `PYTHONPATH=. python tests/report/test_golden.py` and read the diff"
    )


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        GOLDEN.mkdir(exist_ok=True)
        for name, text in outputs(designed_store(Path(tmp) / "runs"), Path(tmp)).items():
            (GOLDEN / name).write_text(text)
            print(f"wrote {GOLDEN / name}")

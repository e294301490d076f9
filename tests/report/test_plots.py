"""Figures read without the command: selectable x axis, bands over the seeds present, plain
tick labels, legend outside the data, the fixed settings in a footer, progress lines."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from helpers import make_run
from typer.testing import CliRunner

from normbench.cli import app
from normbench.report import plots
from normbench.report.base import Method
from normbench.report.sections import build
from normbench.store.catalog import load_runs

runner = CliRunner()


def section_of(runs):
    (section,) = build(load_runs(runs)).sections
    return section


@pytest.fixture
def batches(tmp_path):
    """LayerNorm at batch 8 and 32, two seeds each; the second seed of batch 8 ended early."""
    runs = tmp_path / "runs"
    for batch in (8, 32):
        for seed in range(2):
            short = batch == 8 and seed == 1
            make_run(
                runs,
                ["norm=layernorm", f"batch_size={batch}", f"seed={seed}"],
                acc=0.8 + seed / 100,
                losses=(2.4, 0.05) if short else (2.4, 0.05, 0.0004),
            )
    return runs


def test_default_x_is_samples_when_batch_sizes_differ_else_steps(batches, tmp_path):
    assert plots.default_x(section_of(batches)) == "samples"
    single = tmp_path / "single"
    for seed in range(2):
        make_run(single, ["norm=layernorm", f"seed={seed}"])
    assert plots.default_x(section_of(single)) == "steps"


@pytest.mark.parametrize(
    ("x", "label", "column"),
    [
        ("steps", "step", "step"),
        ("samples", "training samples seen", "samples"),
        ("time", "training time", "elapsed_s"),
    ],
)
def test_the_x_axis_is_selectable(batches, x, label, column):
    section = section_of(batches)
    fig = plots.learning_curves(section, batches, x)
    ax_loss, ax_val = fig.axes[:2]
    assert ax_val.get_xlabel().startswith(label)
    batch32 = next(line for line in ax_val.get_lines() if "batch_size=32" in line.get_label())
    expected = {"step": [10, 20, 30], "samples": [320, 640, 960], "elapsed_s": [0.5, 1.0, 1.5]}
    assert list(batch32.get_xdata()) == pytest.approx(expected[column])


def test_bad_x_is_a_one_line_error(batches, tmp_path):
    result = runner.invoke(app, ["report", str(batches), "--x", "furlongs", "--html", "r.html"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "normbench: error: --x furlongs: valid: steps, samples, epochs, time"
    ]
    result = runner.invoke(app, ["report", str(batches), "--x", "steps"])
    assert result.exit_code == 2 and "add --plots DIR or --html FILE" in result.output


def test_bands_use_every_seed_present_at_each_step():
    long = pd.DataFrame({"step": [10, 20, 30], "samples": [80, 160, 240], "loss": [3.0, 2.0, 1.0]})
    short = pd.DataFrame({"step": [10, 20], "samples": [80, 160], "loss": [5.0, 4.0]})
    band = plots.seed_band([long, short], "loss", "samples")
    assert band.index.tolist() == [10, 20, 30]  # not cut at the short seed's last step
    assert band["seeds"].tolist() == [2, 2, 1]
    assert band["mean"].tolist() == [4.0, 3.0, 1.0]
    assert band["low"].tolist() == [3.0, 2.0, 1.0] and band["high"].tolist() == [5.0, 4.0, 1.0]
    assert band["x"].tolist() == [80, 160, 240]


def test_learning_curves_reach_the_longest_seed_and_mark_the_seed_count(batches):
    fig = plots.learning_curves(section_of(batches), batches, "steps")
    ax_loss = fig.axes[0]
    batch8 = next(line for line in ax_loss.get_lines() if "batch_size=8" in line.get_label())
    assert list(batch8.get_xdata()) == [10, 20, 30]
    assert "(2 seeds)" in batch8.get_label()
    assert "1 seed" in [text.get_text() for text in ax_loss.texts]


def tick_labels(fig) -> list[str]:
    fig.draw_without_rendering()
    labels = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels += [t.get_text() for t in axis.get_ticklabels(which="both")]
            labels.append(axis.get_offset_text().get_text())
    return [label for label in labels if label]


def test_tick_labels_are_plain_numbers(batches):
    section = section_of(batches)
    figures = [
        plots.learning_curves(section, batches, "samples"),  # loss spans 4 decades (log axis)
        plots.seed_results(section, Method()),
        plots.batch_curve(section),
    ]
    for fig in figures:
        labels = tick_labels(fig)
        assert labels, "no tick labels at all"
        scientific = [t for t in labels if re.search(r"[×$^]|\de[+-]?\d|10\^", t)]
        assert not scientific, scientific
    loss_labels = [t.get_text() for t in figures[0].axes[0].yaxis.get_ticklabels(which="both")]
    assert "0.001" in loss_labels and "1" in loss_labels
    assert {"8", "32"} <= {t.get_text() for t in figures[2].axes[0].get_xticklabels()}


def test_legend_sits_outside_the_data_and_the_footer_names_the_fixed_settings(batches):
    section = section_of(batches)
    for fig in (plots.learning_curves(section, batches), plots.batch_curve(section)):
        fig.draw_without_rendering()
        legend = fig.axes[-1].get_legend()
        for ax in fig.axes:
            assert legend.get_window_extent().x0 >= ax.get_window_extent().x1
        footer = fig.get_supxlabel()
        assert footer.startswith("fixed: model=cnn") and "data=mnist1d" in footer


def test_batch_figure_title_says_what_it_draws(batches):
    title = plots.batch_curve(section_of(batches)).axes[0].get_title()
    assert "per-device batch size" in title and "95% CI" in title and "dashed" not in title


def test_seed_results_show_every_seed_beside_mean_and_ci(batches):
    section = section_of(batches)
    fig = plots.seed_results(section, Method())
    ax = fig.axes[0]
    from matplotlib.collections import PathCollection

    dots = np.concatenate(
        [c.get_offsets()[:, 0] for c in ax.collections if type(c) is PathCollection]
    )
    expected = np.concatenate(list(section.tables["convergence"]["values"]))
    assert sorted(dots) == pytest.approx(sorted(expected))


def test_plots_cli_writes_files_with_progress_lines(batches, tmp_path):
    result = runner.invoke(app, ["report", str(batches), "--plots", str(tmp_path / "img")])
    assert result.exit_code == 0, result.output
    assert "drawing figure 1/3: learning_curves" in result.stderr
    written = sorted(p.name for p in (tmp_path / "img").iterdir())
    assert written == ["batch_sensitivity.png", "learning_curves.png", "seed_results.png"]


def test_figures_and_html_when_every_run_diverged_at_its_first_step(tmp_path):
    """`sweep norm=none,layernorm train.lr=1e30` as the store keeps it: each run diverged
    with one logged step whose loss is not a number; the figures are drawn (a linear loss
    axis: nothing a log axis could show) and the page written."""
    runs = tmp_path / "runs"
    for norm, loss in (("none", float("nan")), ("layernorm", float("inf"))):
        make_run(
            runs, [f"norm={norm}", "train.lr=1e30"], status="diverged", acc=None, losses=(loss,)
        )
    page, figures = tmp_path / "r.html", tmp_path / "img"
    result = runner.invoke(app, ["report", str(runs), "--plots", str(figures), "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert (figures / "learning_curves.png").is_file() and page.is_file()

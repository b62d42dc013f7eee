"""Tests for grpo_lib.plots and grpo_lib.widgets: real values, headless, no display."""
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from grpo_lib import plots, widgets  # noqa: E402

SEED_REWARDS = [0.1, 1.1, 1.0, 0.1]  # seed 001's o1..o4
SEED_POP = [-0.9970, 1.1020, 0.8921, -0.9970]  # (r - 0.575) / (0.47631 + 1e-4)
SEED_SAMPLE = [-0.8635, 0.9544, 0.7726, -0.8635]  # (r - 0.575) / (0.55000 + 1e-4)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _write_metrics(run_dir, columns, steps=5):
    frame = pd.DataFrame({"step": np.arange(1, steps + 1)})
    for column in columns:
        frame[column] = np.linspace(0.0, 1.0, steps)
    frame.to_csv(run_dir / "metrics.csv", index=False)
    return frame


# --- plots.plot_run ---------------------------------------------------------------

def test_plot_run_writes_png_with_all_trainer_columns(tmp_path):
    columns = ["reward", "reward/accuracy_reward", "reward/format_reward", "accuracy",
               "format_rate", "completion_length", "completion_length_max",
               "truncated_frac", "entropy", "kl", "clip_frac_low", "clip_frac_high",
               "zero_std_frac", "grad_norm", "lr"]
    _write_metrics(tmp_path, columns)
    path = plots.plot_run(tmp_path)
    assert path == tmp_path / "curves.png"
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert plt.get_fignums() == []  # the figure is closed after saving


def test_plot_run_tolerates_missing_columns_and_saves_where_asked(tmp_path):
    _write_metrics(tmp_path, ["reward"], steps=3)  # only one metric logged
    target = tmp_path / "sub" / "run.png"
    path = plots.plot_run(tmp_path, save=target, smooth=2, title="tiny")
    assert path == target and target.read_bytes()[:8] == PNG_MAGIC


def test_plot_run_without_step_column_uses_row_index(tmp_path, monkeypatch):
    pd.DataFrame({"reward": [0.1, 0.5, 0.3], "kl": [0.0, 0.01, 0.02]}).to_csv(
        tmp_path / "metrics.csv", index=False)
    drawn = _drawn_figure(monkeypatch)
    assert plots.plot_run(tmp_path).is_file()
    lines = [line for ax in drawn["fig"].axes for line in ax.get_lines()]
    assert lines and all(list(line.get_xdata()) == [0, 1, 2] for line in lines)


def test_plot_run_reward_panel_lists_each_reward_function(tmp_path, monkeypatch):
    _write_metrics(tmp_path,
                   ["reward", "reward/accuracy_reward", "reward/format_reward"])
    drawn = {}
    real_close = plt.close

    def keep(fig):
        drawn["fig"] = fig
        real_close(fig)

    monkeypatch.setattr(plt, "close", keep)
    plots.plot_run(tmp_path)
    reward_ax, = drawn["fig"].axes  # the other panels have nothing to draw: left out
    labels = [t.get_text() for t in reward_ax.get_legend().get_texts()]
    assert labels == ["total", "accuracy_reward", "format_reward"]


def _drawn_figure(monkeypatch):
    drawn = {}
    real_close = plt.close

    def keep(fig):
        drawn["fig"] = fig
        real_close(fig)

    monkeypatch.setattr(plt, "close", keep)
    return drawn


def test_plot_run_leaves_out_absent_metrics_and_fits_the_column(tmp_path, monkeypatch):
    # an R1-Zero run with beta = 0: kl is all NaN, clipping never happens (mu = 1), and
    # each reward function's share repeats the accuracy / format columns
    steps = 6
    ramp = np.linspace(0.2, 0.9, steps)
    frame = pd.DataFrame({
        "step": np.arange(1, steps + 1), "reward": ramp + 0.1,
        "accuracy": ramp, "format_rate": np.ones(steps),
        "reward/accuracy_reward": ramp, "reward/format_reward": np.ones(steps),
        "completion_length": np.full(steps, 50.0), "entropy": 0.1 / ramp,
        "kl": np.full(steps, np.nan), "clip_frac_low": np.zeros(steps),
        "clip_frac_high": np.zeros(steps), "zero_std_frac": ramp / 2,
    })
    frame.to_csv(tmp_path / "metrics.csv", index=False)
    drawn = _drawn_figure(monkeypatch)
    path = plots.plot_run(tmp_path)
    fig = drawn["fig"]
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["Reward", "Accuracy and format", "Completion length", "Entropy",
                      "Clipping and dead groups"]  # no KL panel
    assert not any("not logged" in t.get_text() for ax in fig.axes for t in ax.texts)
    assert fig.axes[0].get_legend() is None  # total only: reward/* repeat panel 2
    groups = fig.axes[-1]
    assert [t.get_text() for t in groups.get_legend().get_texts()] == [
        "zero-std groups", "0 at every step: clipped low, clipped high"]
    assert len(groups.lines[0].get_xdata()) == steps  # zero-std groups
    assert len(groups.lines[1].get_xdata()) == 0  # the legend's note draws nothing
    width, _ = fig.get_size_inches()
    assert width <= plots.FIGURE_WIDTH
    # two panels side by side at most; the fifth spans the last row
    lefts = sorted({round(ax.get_position().x0, 2) for ax in fig.axes})
    assert len(lefts) == 2
    for ax in fig.axes:
        legend = ax.get_legend()
        for text in [ax.title, ax.xaxis.label, ax.yaxis.label,
                     *ax.get_xticklabels(), *ax.get_yticklabels(),
                     *(legend.get_texts() if legend else [])]:
            assert text.get_fontsize() >= 9, text.get_text()
    from PIL import Image

    with Image.open(path) as image:
        assert image.size[0] <= 100 * plots.FIGURE_WIDTH


def test_plot_run_draws_the_chosen_panels_in_order(tmp_path, monkeypatch):
    _write_metrics(tmp_path, ["reward", "accuracy", "entropy", "kl"])
    drawn = _drawn_figure(monkeypatch)
    plots.plot_run(tmp_path, panels=["entropy", "reward"])
    assert [ax.get_title() for ax in drawn["fig"].axes] == ["Entropy", "Reward"]
    with pytest.raises(ValueError, match="unknown panel"):
        plots.plot_run(tmp_path, panels=["loss"])
    with pytest.raises(ValueError, match="none of the plotted metrics"):
        plots.plot_run(tmp_path, panels=["length"])


def test_plot_run_errors_say_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="No metrics.csv"):
        plots.plot_run(tmp_path)
    (tmp_path / "metrics.csv").write_text("step,reward\n")
    with pytest.raises(ValueError, match="no rows"):
        plots.plot_run(tmp_path)
    _write_metrics(tmp_path, ["reward"])
    with pytest.raises(ValueError, match="smooth must be a positive int"):
        plots.plot_run(tmp_path, smooth=0)


def test_read_metrics_returns_the_rows(tmp_path):
    frame = _write_metrics(tmp_path, ["reward", "kl"], steps=4)
    read = plots.read_metrics(tmp_path)
    pd.testing.assert_frame_equal(read, frame)


# --- plots helpers ----------------------------------------------------------------

def test_plot_advantages_draws_bars_with_the_values():
    fig = plots.plot_advantages(SEED_REWARDS, {"population std": SEED_POP,
                                               "sample std": SEED_SAMPLE})
    ax_r, ax_a = fig.axes
    heights = [round(p.get_height(), 4) for p in ax_r.patches]
    assert heights == SEED_REWARDS
    # the dashed line is the group mean 0.575
    assert ax_r.lines[0].get_ydata()[0] == pytest.approx(0.575)
    adv_heights = [round(p.get_height(), 4) for p in ax_a.patches]
    assert adv_heights == SEED_POP + SEED_SAMPLE
    assert [t.get_text() for t in ax_a.get_xticklabels()] == ["o1", "o2", "o3", "o4"]
    plt.close(fig)


def test_plot_advantages_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="3 values but there are 4 rewards"):
        plots.plot_advantages(SEED_REWARDS, [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="2 labels for 4 rewards"):
        plots.plot_advantages(SEED_REWARDS, SEED_POP, labels=["a", "b"])


def test_bar_table_from_dict_and_dataframe():
    ax = plots.bar_table({"before": [0.25, 0.5], "after": [0.75, 1.0]},
                         labels=["strict", "lenient"], title="accuracy")
    assert [round(p.get_height(), 2) for p in ax.patches] == [0.25, 0.5, 0.75, 1.0]
    assert [t.get_text() for t in ax.texts] == ["0.250", "0.500", "0.750", "1.000"]
    plt.close(ax.figure)
    frame = pd.DataFrame({"acc": [0.5, 0.125]}, index=["greedy", "sampled"])
    ax = plots.bar_table(frame, fmt="{:.1%}")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["greedy", "sampled"]
    assert [t.get_text() for t in ax.texts] == ["50.0%", "12.5%"]
    plt.close(ax.figure)


def test_bar_table_errors():
    with pytest.raises(ValueError, match="same number of values"):
        plots.bar_table({"a": [1, 2], "b": [1]})
    with pytest.raises(TypeError, match="non-empty mapping"):
        plots.bar_table([1, 2, 3])


def test_plot_surrogate_matches_the_clipped_formula():
    ax = plots.plot_surrogate(epsilon=0.2, advantage=1.0, epsilon_high=0.28)
    ratio, value = ax.lines[1].get_data()
    ratio, value = np.asarray(ratio), np.asarray(value)
    expected = np.minimum(ratio * 1.0, np.clip(ratio, 0.8, 1.28) * 1.0)
    np.testing.assert_allclose(value, expected, atol=1e-12)
    assert value.max() == pytest.approx(1.28)  # A > 0: the gain stops at 1 + eps_high
    plt.close(ax.figure)
    ax = plots.plot_surrogate(epsilon=0.2, advantage=-2.0)
    ratio, value = map(np.asarray, ax.lines[1].get_data())
    # A < 0: flat at (1 - eps) * A below the clip, unclipped (rho * A) above it
    assert value[ratio < 0.8] == pytest.approx(-1.6)
    np.testing.assert_allclose(value[ratio > 1.2], -2.0 * ratio[ratio > 1.2])
    plt.close(ax.figure)


def test_png_helpers_roundtrip():
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    png = plots.figure_to_png(fig)
    plt.close(fig)
    assert png[:8] == PNG_MAGIC
    tag = plots.png_to_html(png, alt="x")
    assert tag.startswith('<img src="data:image/png;base64,iVBORw0KGgo')
    assert 'alt="x"' in tag


# --- widgets ----------------------------------------------------------------------

def test_advantage_table_shows_both_conventions_for_the_seed_group():
    table = widgets.advantage_table(SEED_REWARDS)
    rewards, advantages = table.current()
    np.testing.assert_allclose(rewards, SEED_REWARDS)
    np.testing.assert_allclose(advantages["population std"], SEED_POP, atol=1e-4)
    np.testing.assert_allclose(advantages["sample std"], SEED_SAMPLE, atol=1e-4)
    html = table.children[3].value
    assert "+1.1020" in html and "+0.9544" in html and "-0.9970" in html
    assert "mean 0.5750, population std 0.4763, sample std 0.5500" in html
    assert table.children[4].value[:8] == PNG_MAGIC


def test_advantage_table_recomputes_when_a_reward_is_edited():
    table = widgets.advantage_table(SEED_REWARDS)
    table.reward_boxes[0].value = 1.1  # o1 now also right: rewards 1.1, 1.1, 1.0, 0.1
    _, advantages = table.current()
    r = np.array([1.1, 1.1, 1.0, 0.1])
    expected = (r - r.mean()) / (r.std() + 1e-4)
    np.testing.assert_allclose(advantages["population std"], expected, atol=1e-5)
    assert f"{expected[3]:+.4f}" in table.children[3].value
    for box in table.reward_boxes:  # all equal -> exactly zero advantages
        box.value = 0.5
    _, advantages = table.current()
    assert np.all(advantages["sample std"] == 0.0)


def test_advantage_table_reports_bad_input_instead_of_raising():
    table = widgets.advantage_table(SEED_REWARDS)
    table.reward_boxes[2].value = math.nan
    assert "NaN" in table.children[2].value  # the message line
    table.reward_boxes[2].value = 1.0
    assert table.children[2].value == ""


def test_advantage_table_groups_and_label_errors():
    table = widgets.advantage_table([0.0, 1.0, 1.0, 1.0], group_size=2,
                                    labels=["a1", "a2", "b1", "b2"])
    _, advantages = table.current()
    np.testing.assert_allclose(advantages["sample std"][:2], [-0.7070, 0.7070],
                               atol=1e-3)
    np.testing.assert_allclose(advantages["sample std"][2:], [0.0, 0.0])
    with pytest.raises(ValueError, match="3 labels for 4 rewards"):
        widgets.advantage_table(SEED_REWARDS, labels=["a", "b", "c"])
    with pytest.raises(ValueError, match="group of size 1|G >= 2"):
        widgets.advantage_table(SEED_REWARDS, group_size=1)


def test_widgets_carry_a_static_html_fallback():
    bundle = widgets.advantage_table(SEED_REWARDS)._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "<table>" in bundle["text/html"]
    assert "data:image/png;base64," in bundle["text/html"]
    bundle = widgets.surrogate_explorer()._repr_mimebundle_()
    expected = "epsilon = 0.20, epsilon_high = 0.20, advantage = 1.00"
    assert expected in bundle["text/html"]


def test_surrogate_explorer_redraws_on_slider_change():
    explorer = widgets.surrogate_explorer(epsilon=0.2, advantage=1.0, epsilon_high=0.28)
    assert explorer.sliders["epsilon_high"].value == pytest.approx(0.28)
    before = explorer.children[2].value
    assert before[:8] == PNG_MAGIC
    explorer.sliders["advantage"].value = -1.0
    assert explorer.children[2].value != before
    assert "advantage = -1.00" in explorer._repr_mimebundle_()["text/html"]
    assert plt.get_fignums() == []  # every redraw closes its figure

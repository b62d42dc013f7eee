"""Plots shared by the chapters and the CLI (``python -m grpo_lib plot RUN_DIR``).

* :func:`plot_run` — the training curves of a run from its ``metrics.csv``;
* :func:`plot_advantages` — a group's rewards next to its advantages;
* :func:`bar_table` — a small table of numbers drawn as labelled, grouped bars;
* :func:`plot_surrogate` — PPO/GRPO's clipped surrogate as a function of the ratio.

All functions draw with matplotlib and return the figure (or the saved path for
:func:`plot_run`); they never call ``plt.show()`` unless asked, so they work the same
in a notebook, a script and a headless test. Figures are at most
:data:`FIGURE_WIDTH` inches wide, two panels side by side at most, with fonts of 9
points or more, so that they read at the book's column width.
"""
from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

# (key, panel title, y label, [(column, legend label), ...]) — columns of the
# trainer's metrics.csv (ARCHITECTURE.md); a panel draws the columns that are present,
# and a panel with none of them is left out.
RUN_PANELS: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    ("reward", "Reward", "mean reward per completion", [("reward", "total")]),
    ("accuracy", "Accuracy and format", "fraction of completions",
     [("accuracy", "accuracy"), ("format_rate", "well formatted")]),
    ("length", "Completion length", "tokens",
     [("completion_length", "mean"), ("completion_length_max", "max"),
      ("length_wrong", "mean, wrong answers")]),
    ("kl", "KL to the reference", "KL estimate per token", [("kl", "kl")]),
    ("entropy", "Entropy", "nats per token", [("entropy", "entropy")]),
    ("groups", "Clipping and dead groups", "fraction",
     [("clip_frac_low", "clipped low"), ("clip_frac_high", "clipped high"),
      ("truncated_frac", "truncated"), ("zero_std_frac", "zero-std groups")]),
]

#: the figure's width in inches: it is read at the book's column width (about 700 px)
FIGURE_WIDTH = 7.5
#: font sizes (points) that stay legible at that width
_FONTS = {"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10,
          "xtick.labelsize": 9, "ytick.labelsize": 9, "legend.fontsize": 9,
          "figure.titlesize": 12}


def _pyplot():
    """matplotlib.pyplot, imported on first use (matplotlib picks Agg when headless)."""
    import matplotlib.pyplot as plt

    return plt


def read_metrics(run_dir: str | Path):
    """Read ``run_dir/metrics.csv`` into a pandas DataFrame (one row per training step).

    Raises ``FileNotFoundError`` (saying where it looked) when the file is missing and
    ``ValueError`` when it has no rows.
    """
    import pandas as pd

    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        raise FileNotFoundError(
            f"No metrics.csv in {Path(run_dir)!s} (looked for {path}). Pass the "
            f"output_dir of a training run (the trainer writes metrics.csv there, one "
            f"row per step)."
        )
    frame = pd.read_csv(path)
    if frame.empty:
        raise ValueError(f"{path} has a header but no rows: the run logged no step "
                         f"yet. Run at least one training step before plotting.")
    return frame


def run_panels(frame, panels: Sequence[str] | None = None):
    """The panels of :func:`plot_run` that ``frame`` (a ``metrics.csv``) can fill.

    Returns ``[(title, y label, [(column, label), ...], [always-zero labels])]``: only
    columns holding a number are kept (KL is all NaN when ``beta = 0``, so its panel is
    left out); the reward panel adds one line per ``reward/<name>`` column unless that
    column repeats one drawn in another panel (R1-Zero's ``reward/accuracy_reward`` is
    the ``accuracy`` column); in a panel whose other lines move, a column that is 0 at
    every step is named in a note instead of drawn as a flat line.
    """
    known = [key for key, *_ in RUN_PANELS]
    chosen = known if panels is None else list(panels)
    unknown = [key for key in chosen if key not in known]
    if unknown:
        raise ValueError(f"unknown panel(s) {unknown}; choose from {known}.")

    def logged(column):
        return column in frame and frame[column].notna().any()

    drawn = {key: [(c, label) for c, label in columns if logged(c)]
             for key, _, _, columns in RUN_PANELS if key in chosen}
    elsewhere = [frame[c].to_numpy(dtype=float) for key, cols in drawn.items()
                 if key != "reward" for c, _ in cols]
    if "reward" in drawn:
        for c in frame.columns:
            if not c.startswith("reward/") or not logged(c):
                continue
            values = frame[c].to_numpy(dtype=float)
            if not any(np.allclose(values, other, equal_nan=True)
                       for other in elsewhere):
                drawn["reward"].append((c, c.split("/", 1)[1]))
    result = {}
    for key, title, ylabel, _ in RUN_PANELS:
        columns = drawn.get(key)
        if not columns:
            continue
        zero = [(c, label) for c, label in columns if (frame[c].fillna(0) == 0).all()]
        if len(zero) == len(columns):  # nothing moves: draw the zeros themselves
            zero = []
        moving = [item for item in columns if item not in zero]
        result[key] = (title, ylabel, moving, [label for _, label in zero])
    return [result[key] for key in chosen if key in result]


def plot_run(
    run_dir: str | Path,
    save: str | Path | None = None,
    *,
    panels: Sequence[str] | None = None,
    smooth: int = 1,
    title: str | None = None,
    show: bool = False,
    dpi: int = 100,
) -> Path:
    """Draw a run's training curves and save them as a PNG; return the saved path.

    Panels, two side by side at most, :data:`FIGURE_WIDTH` inches wide: the mean reward
    (and each reward function's share); accuracy and format rate; mean and max
    completion length; the KL estimate to the reference model; the policy's entropy;
    the clipped-token fractions, truncated fraction and zero-std groups. A metric the
    run did not log is left out (see :func:`run_panels`), so is a panel with none.

    Args:
        run_dir: the run's output directory, containing ``metrics.csv``.
        save: where to write the PNG (default ``run_dir/curves.png``).
        panels: keys of the panels to draw, in order (default all of
            ``[key for key, *_ in RUN_PANELS]``).
        smooth: rolling-mean window in steps; with ``smooth > 1`` the raw curve is drawn
            faintly behind the smoothed one.
        title: figure title (default: the run directory's name).
        show: also ``plt.show()`` the figure (in a notebook) before closing it.
        dpi: pixels per inch of the PNG.

    Returns:
        The path of the PNG.
    """
    if not isinstance(smooth, int) or smooth < 1:
        raise ValueError(
            f"smooth must be a positive int (a window in steps), got {smooth!r}.")
    plt = _pyplot()
    frame = read_metrics(run_dir)
    x = frame["step"] if "step" in frame else np.arange(len(frame))
    chosen = run_panels(frame, panels)
    if not chosen:
        metrics = [c for *_, cols in RUN_PANELS for c, _ in cols]
        raise ValueError(f"{Path(run_dir) / 'metrics.csv'} holds none of the plotted "
                         f"metrics {metrics} (for the panels {panels or 'all'}).")
    rows = (len(chosen) + 1) // 2
    with plt.rc_context(_FONTS):
        fig = plt.figure(figsize=(FIGURE_WIDTH, 0.6 + 2.5 * rows),
                         constrained_layout=True)
        grid = fig.add_gridspec(rows, 2)
        for k, (panel_title, ylabel, columns, zero) in enumerate(chosen):
            last_alone = k == len(chosen) - 1 and len(chosen) % 2 == 1
            ax = fig.add_subplot(grid[k // 2, :] if last_alone else grid[k // 2, k % 2])
            ax.set_title(panel_title)
            ax.set_xlabel("step")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            for column, label in columns:
                values = frame[column].astype(float)
                if smooth > 1:
                    line, = ax.plot(x, values, alpha=0.25, linewidth=1)
                    values = values.rolling(smooth, min_periods=1).mean()
                    ax.plot(x, values, color=line.get_color(), label=label)
                else:
                    ax.plot(x, values, label=label,
                            marker="." if len(frame) < 30 else None)
            if zero:  # named in the legend, not drawn over the other lines
                ax.plot([], [], " ", label="0 at every step: " + ", ".join(zero))
            entries = len(columns) + bool(zero)
            if entries > 1:  # room above the curves, so the legend hides none
                cols = 2 if last_alone else 1
                low, high = ax.get_ylim()
                rows_needed = -(-entries // cols)
                ax.set_ylim(low, high + (0.12 + 0.16 * rows_needed) * (high - low))
                ax.legend(loc="upper left", ncol=cols)
        fig.suptitle(title or Path(run_dir).resolve().name)
        path = Path(save) if save is not None else Path(run_dir) / "curves.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi)
        if show:
            plt.show()
        plt.close(fig)
    return path


def _as_array(values, name: str) -> np.ndarray:
    try:
        array = np.asarray(
            values.detach().cpu().numpy() if hasattr(values, "detach") else values,
            dtype=float,
        ).reshape(-1)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a sequence of numbers, got "
                        f"{type(values).__name__}: {err}") from None
    return array


def plot_advantages(
    rewards: Sequence[float],
    advantages: Sequence[float] | Mapping[str, Sequence[float]],
    labels: Sequence[str] | None = None,
    *,
    title: str | None = None,
):
    """Two bar charts side by side: each output's reward, and its advantage(s).

    ``advantages`` is one sequence, or a mapping ``{convention: values}`` drawn as
    grouped bars (e.g. ``{"population std": ..., "sample std": ...}``). The reward panel
    marks the group mean, the baseline every advantage is measured from:
    :math:`A_i = (r_i - \\bar r) / (\\sigma + \\varepsilon)`.

    Returns:
        The matplotlib Figure (call ``plt.show()`` to display it).
    """
    plt = _pyplot()
    r = _as_array(rewards, "rewards")  # [G]
    series = dict(advantages) if isinstance(advantages, Mapping) else \
        {"advantage": advantages}
    series = {k: _as_array(v, f"advantages[{k!r}]") for k, v in series.items()}
    for key, values in series.items():
        if values.shape != r.shape:
            raise ValueError(f"advantages[{key!r}] has {values.size} values but there "
                             f"are {r.size} rewards; pass one advantage per reward.")
    if labels is None:
        labels = [f"o{i + 1}" for i in range(r.size)]
    labels = list(labels)
    if len(labels) != r.size:
        raise ValueError(f"{len(labels)} labels for {r.size} rewards; pass one per "
                         f"output.")
    fig, (ax_r, ax_a) = plt.subplots(1, 2, figsize=(FIGURE_WIDTH, 3.2),
                                   constrained_layout=True)
    idx = np.arange(r.size)
    ax_r.bar(idx, r, color="tab:blue")
    ax_r.axhline(r.mean(), color="black", linestyle="--", linewidth=1,
                 label=f"group mean {r.mean():.3f}")
    ax_r.set_title("reward $r_i$")
    ax_r.legend(fontsize=9)
    width = 0.8 / len(series)
    for k, (name, values) in enumerate(series.items()):
        offset = (k - (len(series) - 1) / 2) * width
        bars = ax_a.bar(idx + offset, values, width=width, label=name)
        ax_a.bar_label(bars, fmt="%.3f", fontsize=9, padding=2)
    ax_a.axhline(0, color="black", linewidth=0.8)
    ax_a.margins(y=0.15)
    ax_a.set_title("advantage $A_i$")
    if len(series) > 1:
        ax_a.legend(fontsize=9)
    for ax in (ax_r, ax_a):
        ax.set_xticks(idx, labels)
        ax.grid(axis="y", alpha=0.3)
    if title:
        fig.suptitle(title)
    return fig


def bar_table(
    table,
    labels: Sequence[str] | None = None,
    *,
    fmt: str = "{:.3f}",
    title: str | None = None,
    ylabel: str | None = None,
    ax=None,
):
    """Draw a small table of numbers as grouped bars with each value written on its bar.

    ``table`` is a mapping ``{series name: values}`` (all of the same length), or a
    pandas DataFrame (its columns are the series, its index the labels). Useful when a
    chapter's point is a comparison of a few numbers (e.g. accuracy before/after
    training).

    Returns:
        The matplotlib Axes drawn on (a new figure's when ``ax`` is None).
    """
    plt = _pyplot()
    if hasattr(table, "columns") and hasattr(table, "index"):
        labels = [str(i) for i in table.index] if labels is None else list(labels)
        table = {str(c): table[c].to_numpy() for c in table.columns}
    if not isinstance(table, Mapping) or not table:
        raise TypeError(f"table must be a non-empty mapping {{name: values}} or a "
                        f"DataFrame, got {type(table).__name__}.")
    series = {k: _as_array(v, f"table[{k!r}]") for k, v in table.items()}
    sizes = {k: v.size for k, v in series.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"every series needs the same number of values, got {sizes}.")
    n = next(iter(sizes.values()))
    labels = list(labels) if labels is not None else [str(i) for i in range(n)]
    if len(labels) != n:
        raise ValueError(f"{len(labels)} labels for {n} values per series.")
    if ax is None:
        width_in = min(FIGURE_WIDTH, max(4.0, 0.55 * n * len(series) + 1.5))
        _, ax = plt.subplots(figsize=(width_in, 3.2),
                             constrained_layout=True)
    width = 0.8 / len(series)
    idx = np.arange(n)
    for k, (name, values) in enumerate(series.items()):
        bars = ax.bar(idx + (k - (len(series) - 1) / 2) * width, values, width=width,
                      label=name)
        ax.bar_label(bars, labels=[fmt.format(v) for v in values], fontsize=9,
                     padding=2)
    ax.set_xticks(idx, labels)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.margins(y=0.15)
    ax.grid(axis="y", alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=9)
    if title:
        ax.set_title(title)
    if ylabel:
        ax.set_ylabel(ylabel)
    return ax


def plot_surrogate(
    epsilon: float = 0.2,
    advantage: float = 1.0,
    epsilon_high: float | None = None,
    *,
    ratio_max: float = 2.0,
    ax=None,
):
    """Plot the clipped surrogate :math:`\\min(\\rho A, \\operatorname{clip}(\\rho,
    1-\\varepsilon, 1+\\varepsilon_{high}) A)` against the ratio :math:`\\rho`.

    The values come from :func:`grpo_lib.objective.clipped_surrogate`; the unclipped
    :math:`\\rho A` is drawn dashed and the ratios where the clip makes the gradient
    zero are shaded.

    Returns:
        The matplotlib Axes drawn on.
    """
    import torch

    from .objective import clipped_surrogate

    plt = _pyplot()
    eps_high = epsilon if epsilon_high is None else epsilon_high
    ratio = torch.linspace(0.0, ratio_max, 401, dtype=torch.float64)  # [N]
    surrogate = clipped_surrogate(ratio[None, :], torch.tensor([float(advantage)],
                                  dtype=torch.float64), epsilon=epsilon,
                                  epsilon_high=epsilon_high)[0]  # [N]
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.6), constrained_layout=True)
    ax.plot(ratio, ratio * advantage, linestyle="--", color="grey",
            label=r"unclipped $\rho A$")
    ax.plot(ratio, surrogate, color="tab:red", linewidth=2,
            label=r"$\min(\rho A, \mathrm{clip}(\rho) A)$")
    if advantage > 0:
        ax.axvspan(1 + eps_high, ratio_max, color="tab:red", alpha=0.08,
                   label="zero gradient (clipped)")
    elif advantage < 0:
        ax.axvspan(0, 1 - epsilon, color="tab:red", alpha=0.08,
                   label="zero gradient (clipped)")
    for bound in (1 - epsilon, 1 + eps_high):
        ax.axvline(bound, color="black", linewidth=0.6, linestyle=":")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xlabel(r"ratio $\rho = \pi_\theta / \pi_{\theta_{old}}$")
    ax.set_ylabel("surrogate (maximised)")
    ax.set_title(f"A = {advantage:+.2f}, ε = {epsilon:.2f}, ε_high = {eps_high:.2f}",
                 fontsize=10)
    ax.set_xlim(0, ratio_max)
    ax.legend(fontsize=9, loc="best")
    ax.grid(alpha=0.3)
    return ax


def figure_to_png(fig, dpi: int = 100) -> bytes:
    """Render a matplotlib figure to PNG bytes (for widgets and static HTML
    fallbacks)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def png_to_html(png: bytes, alt: str = "figure") -> str:
    """An ``<img>`` tag embedding PNG bytes as base64 (no file needed)."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{alt}"/>'


__all__ = ["plot_run", "run_panels", "read_metrics", "plot_advantages", "bar_table",
           "plot_surrogate", "figure_to_png", "png_to_html", "RUN_PANELS",
           "FIGURE_WIDTH"]

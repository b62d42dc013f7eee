"""Interactive widgets for the chapters (ipywidgets).

* :func:`advantage_table` — edit a group's rewards, watch the advantages change;
* :func:`surrogate_explorer` — move ε, ε_high and A, watch the clipped surrogate change.

Both return a widget. In a live notebook (JupyterLab, VS Code) it is interactive.
Where no kernel is attached — the rendered book, a notebook executed headless — the
widget also carries a static HTML rendering of its current state (a table and a figure),
so the page still shows the numbers: ``_config.yml`` tells the book to prefer that
HTML.
"""
from __future__ import annotations

import html
from typing import Sequence

import ipywidgets as widgets
import numpy as np

from .advantages import group_advantages
from .plots import figure_to_png, plot_advantages, plot_surrogate, png_to_html


class StaticFallbackBox(widgets.VBox):
    """A VBox whose display bundle also holds a static ``text/html`` view of its state.

    Front-ends with a live kernel render the widget; a static renderer (the book's HTML
    build, nbviewer, GitHub) falls back to the HTML returned by ``static_html``.
    """

    def __init__(self, children, static_html, **kwargs):
        super().__init__(children, **kwargs)
        self._static_html = static_html  # () -> str, evaluated at display time

    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs) or {}
        data["text/html"] = self._static_html()
        return data


def _advantage_rows(rewards: np.ndarray, group_size: int, eps: float) -> dict:
    """Advantages of ``rewards`` under both std conventions, as plain float arrays."""
    return {
        "population std": group_advantages(rewards, group_size, std="population",
                                           eps=eps).numpy(),
        "sample std": group_advantages(rewards, group_size, std="sample",
                                       eps=eps).numpy(),
    }


def _html_table(rewards: np.ndarray, advantages: dict, labels: Sequence[str],
                group_size: int) -> str:
    """An HTML table: one row per output, one column per convention, group stats
    below."""
    head = "".join(f"<th>A ({html.escape(k)})</th>" for k in advantages)
    rows = []
    for i, label in enumerate(labels):
        cells = "".join(f"<td>{advantages[k][i]:+.4f}</td>" for k in advantages)
        rows.append(f"<tr><td>{html.escape(label)}</td><td>{rewards[i]:.4f}</td>"
                    f"{cells}</tr>")
    groups = rewards.reshape(-1, group_size)  # [num_groups, G]
    stats = "; ".join(
        f"group {g + 1}: mean {row.mean():.4f}, population std {row.std(ddof=0):.4f}, "
        f"sample std {row.std(ddof=1):.4f}" for g, row in enumerate(groups))
    return (f"<table><thead><tr><th>output</th><th>reward</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table><p><small>{stats}</small></p>")


def advantage_table(
    rewards: Sequence[float],
    group_size: int | None = None,
    labels: Sequence[str] | None = None,
    eps: float = 1e-4,
) -> widgets.VBox:
    """An editable reward table that recomputes the group-relative advantages.

    One number box per output holds its reward; every edit recomputes
    :math:`\\hat A_i = (r_i - \\bar r) / (\\sigma_r + \\epsilon_{\\mathrm{std}})` with
    :func:`grpo_lib.advantages.group_advantages` under both conventions for the group's
    standard deviation :math:`\\sigma_r` (population std, as in the GRPO-Zero code;
    sample std, as in TRL), and redraws the table and the bar chart.

    Args:
        rewards: the starting rewards, ``num_groups * G`` of them, groups contiguous.
        group_size: ``G`` (default: all rewards form one group).
        labels: a name per output (default ``o1, o2, ...``).
        eps: :math:`\\epsilon_{\\mathrm{std}}`, added to the std, as in
            :func:`~grpo_lib.advantages.group_advantages`.

    Returns:
        The widget (display it, or make it the last expression of a cell). Its
        ``.reward_boxes`` are the FloatText inputs, ``.current()`` returns the current
        ``(rewards, advantages)``.
    """
    start = np.asarray(list(rewards), dtype=float)  # [B]
    group_size = int(start.size if group_size is None else group_size)
    if labels is None:
        labels = [f"o{i + 1}" for i in range(start.size)]
    labels = list(labels)
    if len(labels) != start.size:
        raise ValueError(f"advantage_table got {len(labels)} labels for {start.size} "
                         f"rewards; pass one label per reward (or none).")
    _advantage_rows(start, group_size, eps)  # validates group size, NaNs, ... up front

    boxes = [widgets.FloatText(value=float(r), description=label, step=0.1,
                               layout=widgets.Layout(width="170px"))
             for r, label in zip(start, labels)]
    table = widgets.HTML()
    figure = widgets.Image(format="png")
    message = widgets.HTML()

    def current() -> tuple[np.ndarray, dict]:
        values = np.array([box.value for box in boxes], dtype=float)  # [B]
        return values, _advantage_rows(values, group_size, eps)

    def redraw(_change=None) -> None:
        try:
            values, advantages = current()
        except (ValueError, TypeError) as err:
            message.value = f"<span style='color:#b00'>{html.escape(str(err))}</span>"
            return
        message.value = ""
        table.value = _html_table(values, advantages, labels, group_size)
        figure.value = _figure_png(values, advantages, labels)

    def static_html() -> str:
        values, advantages = current()
        return (_html_table(values, advantages, labels, group_size)
                + png_to_html(_figure_png(values, advantages, labels),
                              alt="rewards and advantages"))

    for box in boxes:
        box.observe(redraw, names="value")
    redraw()
    hint = widgets.HTML("<b>Edit the rewards</b> — the advantages follow.")
    box = StaticFallbackBox(
        [hint, widgets.HBox(boxes, layout=widgets.Layout(flex_flow="row wrap")),
         message, table, figure], static_html)
    box.reward_boxes = boxes
    box.current = current
    return box


def _figure_png(values: np.ndarray, advantages: dict, labels: Sequence[str]) -> bytes:
    import matplotlib.pyplot as plt

    fig = plot_advantages(values, advantages, labels)
    try:
        return figure_to_png(fig, dpi=80)
    finally:
        plt.close(fig)


def surrogate_explorer(
    epsilon: float = 0.2,
    advantage: float = 1.0,
    epsilon_high: float | None = None,
) -> widgets.VBox:
    """Sliders for ε, ε_high and A that redraw PPO/GRPO's clipped surrogate.

    The curve is :math:`\\min(\\rho \\hat A, \\operatorname{clip}(\\rho,
    1-\\varepsilon_{\\mathrm{low}}, 1+\\varepsilon_{\\mathrm{high}})\\, \\hat A)`
    against the policy ratio :math:`\\rho`, computed by
    :func:`grpo_lib.objective.clipped_surrogate` (via
    :func:`grpo_lib.plots.plot_surrogate`). Setting ε_high above ε is DAPO's clip-higher
    (0.2 / 0.28 in Yu et al. 2025).

    Returns:
        The widget; ``.sliders`` maps ``"epsilon"``, ``"epsilon_high"``,
        ``"advantage"`` to its sliders.
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    style = {"description_width": "70px"}
    sliders = {
        "epsilon": widgets.FloatSlider(value=epsilon, min=0.0, max=0.5, step=0.01,
                                       description="ε (low)", style=style),
        "epsilon_high": widgets.FloatSlider(value=eps_high, min=0.0, max=0.5, step=0.01,
                                            description="ε_high", style=style),
        "advantage": widgets.FloatSlider(value=advantage, min=-2.0, max=2.0, step=0.05,
                                         description="A", style=style),
    }
    figure = widgets.Image(format="png")

    def png() -> bytes:
        import matplotlib.pyplot as plt

        ax = plot_surrogate(sliders["epsilon"].value, sliders["advantage"].value,
                            sliders["epsilon_high"].value)
        try:
            return figure_to_png(ax.figure, dpi=80)
        finally:
            plt.close(ax.figure)

    def redraw(_change=None) -> None:
        figure.value = png()

    for slider in sliders.values():
        slider.observe(redraw, names="value")
    redraw()

    def static_html() -> str:
        settings = ", ".join(f"{k} = {s.value:.2f}" for k, s in sliders.items())
        return (f"<p><small>Clipped surrogate at {html.escape(settings)} (run the "
                f"notebook to move the sliders).</small></p>"
                + png_to_html(png(), alt="clipped surrogate"))

    box = StaticFallbackBox([widgets.HBox(list(sliders.values())[:2]),
                             sliders["advantage"], figure], static_html)
    box.sliders = sliders
    return box


__all__ = ["advantage_table", "surrogate_explorer", "StaticFallbackBox"]

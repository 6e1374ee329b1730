"""The picture of a mix over time: each group's realised share per window against its weights.

``audiotree.plots.plot_mix_proportions(report, path)`` draws a
:class:`~audiotree.sources.MixProportions`; the report is read by its fields only (``names``,
``starts``, ``window``, ``realised``, ``expected``), so this module does not
import :mod:`audiotree.sources`. matplotlib is imported when drawing.

>>> MIX_PLOT_WIDTH, MIX_PLOT_HEIGHT
(900, 420)
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from audiotree.plots._figure import READABLE_PT, add_title_and_caption, new_figure, require_matplotlib, save_png

__all__ = ["MIX_PLOT_WIDTH", "MIX_PLOT_HEIGHT", "plot_mix_proportions"]

#: Size of the PNG in pixels.
MIX_PLOT_WIDTH, MIX_PLOT_HEIGHT = 900, 420
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<")


def plot_mix_proportions(report: Any, path: str | os.PathLike, *, title: str | None = None,
                         caption: str | None = None, unit: str = "item") -> Any:
    """Draws ``report`` (a ``MixProportions``) to the PNG ``path``; returns the matplotlib ``Figure``.

    Each group is a colour: markers and a solid line for the share it got in
    each window, a dashed line for the share its weights ask for, and a band
    of 3 binomial standard deviations of a window around it.
    """
    require_matplotlib("plot_mix_proportions()")
    if not len(report.starts):
        raise ValueError("The report holds no window to plot; ask realised_proportions for at least one window.")
    fig = new_figure(MIX_PLOT_WIDTH, MIX_PLOT_HEIGHT)
    window = int(report.window)
    text = caption or (f"{len(report.starts)} windows of {window} {unit}s; solid: served, dashed: the weights, "
                       "band: 3 binomial standard deviations of a window")
    bottom, top = add_title_and_caption(fig, title or "audiotree mix: share of each group per window", text)
    ax = fig.add_axes((0.08, bottom + 50 / MIX_PLOT_HEIGHT, 0.72, top - bottom - 60 / MIX_PLOT_HEIGHT))
    x = np.asarray(report.starts, dtype=np.float64) + window / 2
    realised, expected = np.asarray(report.realised), np.asarray(report.expected)
    for g, name in enumerate(report.names):
        colour = _COLOURS[g % len(_COLOURS)]
        sd = np.sqrt(np.clip(expected[:, g] * (1 - expected[:, g]), 0, None) / window)
        ax.fill_between(x, expected[:, g] - 3 * sd, expected[:, g] + 3 * sd, color=colour, alpha=0.12, linewidth=0)
        ax.plot(x, expected[:, g], linestyle="--", color=colour, linewidth=1.2)
        ax.plot(x, realised[:, g], linestyle="-", marker=_MARKERS[g % len(_MARKERS)], markersize=4, color=colour,
                linewidth=1.4, label=str(name))
    ax.set_xlabel(f"{unit} of the global stream (window centre)", fontsize=READABLE_PT + 1)
    ax.set_ylabel("share of the window", fontsize=READABLE_PT + 1)
    ax.set_ylim(-0.02, 1.02)
    ax.tick_params(labelsize=READABLE_PT)
    ax.grid(True, color="#ddd", linewidth=0.6)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=READABLE_PT, frameon=False, title="group",
              title_fontsize=READABLE_PT)
    save_png(fig, path)
    return fig

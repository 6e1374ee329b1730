"""The picture of an index's quality: one bar chart per quality column (``audiotree scan INDEX --plot``).

Seven panels (``WIDTH`` x ``HEIGHT`` pixels), one per column of
``report["quality"]`` (:mod:`audiotree.scan.quality`): the files per
histogram bin, the bins labelled by their range, and the number of files
measured in each panel's title.
"""

from __future__ import annotations

import os
from typing import Any

from audiotree.plots._figure import READABLE_PT, add_title_and_caption, new_figure, require_matplotlib, save_png

__all__ = ["plot_quality", "WIDTH", "HEIGHT"]

WIDTH, HEIGHT = 1280, 640
_BAR = "#5b7fa6"


def _label(value: float | None, column: str) -> str:
    if value is None:
        return "inf"
    if column == "bandwidth_hz":
        return f"{value / 1000:g}k"
    return f"{value:g}"


def plot_quality(path: str | os.PathLike, quality: dict, *, title: str | None = None,
                 caption: str | None = None) -> Any:
    """Draws ``quality`` (an index scan report's ``quality`` section) into a PNG at ``path``.

    Returns the matplotlib ``Figure`` (already saved). Raises ``RuntimeError``
    without matplotlib and ``ValueError`` for an empty section.

    >>> import os, tempfile
    >>> from audiotree.scan.quality import EDGES
    >>> section = {c: {"measured": 1, "histogram": [{"min": lo, "max": hi, "count": 1}
    ...                                             for lo, hi in zip(EDGES[c][:-1], EDGES[c][1:])]}
    ...            for c in EDGES}
    >>> fig = plot_quality(os.path.join(tempfile.mkdtemp(), "q.png"), section)
    >>> [ax.get_title(loc="left") for ax in fig.axes][:2]
    ['bandwidth_hz (1 files)', 'clip_share (1 files)']
    """
    require_matplotlib("audiotree scan --plot")
    from matplotlib.ticker import MaxNLocator

    if not quality:
        raise ValueError("plot_quality() needs the quality section of an index scan (an index with quality columns).")
    fig = new_figure(WIDTH, HEIGHT)
    bottom, top = add_title_and_caption(fig, title, caption)
    columns = list(quality)
    axes = fig.subplots(2, 4, gridspec_kw={"left": 0.05, "right": 0.99, "wspace": 0.28, "hspace": 0.62,
                                           "bottom": bottom + 60 / HEIGHT, "top": top - 30 / HEIGHT}).ravel()
    for ax, column in zip(axes, columns):
        entry = quality[column]
        bins = entry["histogram"]
        labels = [f"{_label(b['min'], column) if b['min'] is not None else '-inf'}..{_label(b['max'], column)}"
                  for b in bins]
        ax.bar(range(len(bins)), [b["count"] for b in bins], color=_BAR, edgecolor="white")
        ax.set_xticks(range(len(bins)))
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=READABLE_PT - 1)
        ax.tick_params(axis="y", labelsize=READABLE_PT)
        ax.set_title(f"{column} ({entry['measured']} files)", fontsize=READABLE_PT + 1, loc="left")
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        if not entry["measured"]:
            ax.set_yticks([])
            ax.text(0.5, 0.5, "no file measured" + (" (no stereo file)" if column == "channel_corr" else ""),
                    ha="center", va="center", transform=ax.transAxes, fontsize=READABLE_PT, color="#666")
    for ax in axes[len(columns):]:
        ax.set_visible(False)
    save_png(fig, path)
    return fig

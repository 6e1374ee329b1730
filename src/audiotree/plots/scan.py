"""The picture of a corpus scan: how long the files are and how loud.

Two histograms side by side (``WIDTH`` x ``HEIGHT`` pixels):

* **durations**, on log-spaced bins when they span more than a decade; files
  shorter than ``min_duration`` (the excerpt length: they get padded) in red,
  left of a dashed line at ``min_duration``;
* **loudness** (integrated LUFS), on bins with an edge at ``lufs_cutoff`` so
  that every bar is wholly above or below it; files at or below the cutoff
  (which the ``loudest`` strategy rejects) in red, silent files (-inf LUFS) as a
  separate bar at the left.
"""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

import numpy as np

from audiotree.plots._figure import READABLE_PT, add_title_and_caption, new_figure, require_matplotlib, save_png

__all__ = ["plot_scan", "WIDTH", "HEIGHT"]

WIDTH, HEIGHT = 960, 400
_KEPT, _FLAGGED, _SILENT = "#5b7fa6", "#c0392b", "#7f7f7f"
_LIMIT = "#7a1f16"  # the --duration and cutoff lines: darker than the bars they mark


def _duration_edges(values: np.ndarray, mark: float | None) -> tuple[np.ndarray, bool]:
    """About 20 bins over the durations (log-spaced past a decade), with an edge at ``mark`` when given."""
    lo, hi = float(values.min()), float(values.max())
    log_scale = lo > 0 and hi / lo > 10
    to_axis, from_axis = (np.log, np.exp) if log_scale else ((lambda v: v), (lambda v: v))
    a, b = to_axis(lo), to_axis(hi)
    step = (b - a) / 20 if b > a else (abs(a) * 0.1 or 0.5)
    anchor = to_axis(mark) if mark is not None and mark > 0 else a
    first = anchor + math.floor((a - anchor) / step) * step
    count = int(math.floor((b - first) / step)) + 2
    return from_axis(first + step * np.arange(count)), log_scale


def _lufs_edges(values: np.ndarray, cutoff: float | None) -> np.ndarray:
    lo, hi = float(values.min()), float(values.max())
    span = max(hi - lo, 1.0)
    step = next(s for s in (0.5, 1.0, 2.0, 5.0, 10.0) if span / s <= 30)
    anchor = cutoff if cutoff is not None else 0.0
    first = anchor + math.floor((lo - anchor) / step) * step
    count = int(math.floor((hi - first) / step)) + 2
    return first + step * np.arange(count)


def _split_bars(ax, values: np.ndarray, edges: np.ndarray, flagged: np.ndarray, flagged_label: str,
                kept_label: str) -> None:
    kept_counts, _ = np.histogram(values[~flagged], edges)
    flagged_counts, _ = np.histogram(values[flagged], edges)
    lefts, widths = edges[:-1], np.diff(edges)
    ax.bar(lefts, kept_counts, widths, align="edge", color=_KEPT, edgecolor="white", linewidth=0.5, label=kept_label)
    if flagged.any():
        ax.bar(lefts, flagged_counts, widths, bottom=kept_counts, align="edge", color=_FLAGGED, edgecolor="white",
               linewidth=0.5, label=flagged_label)


def plot_scan(
    path: str | os.PathLike,
    *,
    durations: Sequence[float],
    lufs: Sequence[float] | None = None,
    min_duration: float | None = None,
    lufs_cutoff: float | None = None,
    title: str | None = None,
    caption: str | None = None,
) -> Any:
    """Draws the duration and loudness histograms of a corpus into a PNG at ``path``.

    Args:
      path: the PNG to write.
      durations: seconds, one per readable file.
      lufs: integrated loudness per measured file (``-inf`` for silence); ``None``
        when loudness was not measured (the panel says so).
      min_duration: mark files shorter than this (seconds).
      lufs_cutoff: mark files at or below this loudness (LUFS).
      title, caption: a heading and a line of context under the plots.

    Returns:
      The matplotlib ``Figure`` (already saved).

    Raises:
      RuntimeError: matplotlib is missing.
      ValueError: no durations.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "scan.png")
    >>> fig = plot_scan(path, durations=[0.5, 2.0, 3.0], lufs=[-45.0, -20.0, float("-inf")],
    ...                 min_duration=1.0, lufs_cutoff=-40.0, title="my corpus")
    >>> os.path.getsize(path) > 1000, [ax.get_title(loc="left") for ax in fig.axes]
    (True, ['Durations', 'Loudness'])
    """
    require_matplotlib("audiotree scan --plot")
    values = np.asarray(list(durations), dtype=np.float64)
    if values.size == 0:
        raise ValueError("plot_scan() needs the duration of at least one readable file.")
    fig = new_figure(WIDTH, HEIGHT)
    bottom, top = add_title_and_caption(fig, title, caption)
    ax_d, ax_l = fig.subplots(1, 2, gridspec_kw={"left": 0.065, "right": 0.985, "wspace": 0.2,
                                                 "bottom": bottom + 58 / HEIGHT, "top": top - 26 / HEIGHT})

    edges, log_scale = _duration_edges(values, min_duration)
    short = values < min_duration if min_duration is not None else np.zeros(values.shape, bool)
    _split_bars(ax_d, values, edges, short, f"shorter than {min_duration:g} s: {int(short.sum())}" if short.any() else "",
                f"{int((~short).sum())} files" + (f" of {min_duration:g} s or more" if min_duration is not None else ""))
    if log_scale:
        from matplotlib.ticker import FuncFormatter

        ax_d.set_xscale("log")
        ax_d.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    if min_duration is not None:
        ax_d.axvline(min_duration, color=_LIMIT, linestyle="--", linewidth=1.2)
    ax_d.set_xlabel("duration (seconds" + (", log scale)" if log_scale else ")"), fontsize=READABLE_PT + 1)
    ax_d.set_ylabel("files", fontsize=READABLE_PT + 1)
    ax_d.set_title("Durations", fontsize=READABLE_PT + 2, loc="left")

    if lufs is None:
        ax_l.text(0.5, 0.5, "loudness not measured\n(audiotree scan --loudness)", ha="center", va="center",
                  transform=ax_l.transAxes, fontsize=READABLE_PT + 1, color="#666")
        ax_l.set_xticks([])
        ax_l.set_yticks([])
        ax_l.set_frame_on(False)
    else:
        loud = np.asarray(list(lufs), dtype=np.float64)
        finite = loud[np.isfinite(loud)]
        silent = int((~np.isfinite(loud)).sum())
        if finite.size:
            l_edges = _lufs_edges(finite, lufs_cutoff)
            quiet = finite <= lufs_cutoff if lufs_cutoff is not None else np.zeros(finite.shape, bool)
            _split_bars(ax_l, finite, l_edges, quiet,
                        f"at or below the cutoff: {int(quiet.sum())}" + (f" (+{silent} silent)" if silent else "")
                        if quiet.any() else "",
                        f"{int((~quiet).sum())} above the cutoff" if lufs_cutoff is not None else f"{finite.size} files")
            width = float(np.diff(l_edges).min())
            low_edge = float(l_edges[0])
        else:
            width, low_edge = 1.0, (lufs_cutoff if lufs_cutoff is not None else -70.0) - 1.0
        if silent:
            x = low_edge - 2 * width
            ax_l.bar([x], [silent], width, align="edge", color=_SILENT, label=f"silent (-inf LUFS): {silent}")
        if lufs_cutoff is not None:
            ax_l.axvline(lufs_cutoff, color=_LIMIT, linestyle="--", linewidth=1.2)
            cutoff_label = ax_l.annotate(
                f"cutoff {lufs_cutoff:g} LUFS", (lufs_cutoff, 0.0), xycoords=("data", "axes fraction"), xytext=(0, 0),
                textcoords="offset points", va="bottom", fontsize=READABLE_PT, color=_LIMIT)
        ax_l.set_xlabel("integrated loudness (LUFS)", fontsize=READABLE_PT + 1)
        ax_l.set_ylabel("files", fontsize=READABLE_PT + 1)
        ax_l.set_title("Loudness", fontsize=READABLE_PT + 2, loc="left")
    from matplotlib.ticker import MaxNLocator

    # The cutoff's label goes on the side of its line with more of the axis; the legend on the other.
    label_right = False
    if lufs is not None and lufs_cutoff is not None:
        low, high = ax_l.get_xlim()
        label_right = lufs_cutoff - low <= high - lufs_cutoff
    for ax in (ax_d, ax_l) if lufs is not None else (ax_d,):
        ax.tick_params(labelsize=READABLE_PT)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        handles, labels = ax.get_legend_handles_labels()
        keep = [(h, t) for h, t in zip(handles, labels) if t]
        tallest = max((p.get_y() + p.get_height() for p in ax.patches), default=1.0)
        ax.set_ylim(0, tallest * (1.12 + 0.16 * len(keep)))  # room for the legend above the bars
        if keep:
            where = "upper right" if ax is ax_l and label_right else "upper left"
            ax.legend(*zip(*keep), fontsize=READABLE_PT, framealpha=0.85, edgecolor="none", loc=where)
    if lufs is not None and lufs_cutoff is not None:
        # Horizontal, just above the tallest bar (below the legend's room): it covers no bar.
        tallest = max((p.get_y() + p.get_height() for p in ax_l.patches), default=1.0)
        cutoff_label.xy = (lufs_cutoff, tallest * 1.02)
        cutoff_label.xycoords = "data"
        cutoff_label.set_horizontalalignment("left" if label_right else "right")
        cutoff_label.xyann = (4, 0) if label_right else (-4, 0)
    save_png(fig, path)
    return fig

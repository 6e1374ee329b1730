"""The picture of a :class:`~audiotree.tuning.TuneResult`: items/s and peak RSS against workers.

:meth:`audiotree.tuning.TuneResult.plot` draws through :func:`plot_tune_result`;
the result is read by its attributes only (``knee``, ``best``, ``measurements``,
``tolerance``, ``batch_size``, ``ram_budget_bytes``), so this module does not
import :mod:`audiotree.tuning`. matplotlib is imported when drawing.

>>> PLOT_WIDTH, PLOT_HEIGHT
(1000, 480)
"""

from __future__ import annotations

import os
from typing import Any

from audiotree.plots._figure import READABLE_PT, add_title_and_caption, machine, new_figure, require_matplotlib, save_png

__all__ = ["PLOT_WIDTH", "PLOT_HEIGHT", "plot_tune_result"]

#: Size of :meth:`TuneResult.plot`'s PNG in pixels.
PLOT_WIDTH, PLOT_HEIGHT = 1000, 480
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
_DASHES = ("-", "--", "-.", ":")


def plot_tune_result(result: Any, path: str | os.PathLike, *, corpus: str | None = None,
                     pipeline: str | None = None) -> Any:
    """Draws ``result`` to the PNG ``path``; returns the matplotlib ``Figure``. See :meth:`TuneResult.plot`."""
    require_matplotlib("TuneResult.plot()")
    fig = new_figure(PLOT_WIDTH, PLOT_HEIGHT)
    k = result.knee
    caption = [
        f"corpus: {corpus or 'not given'}",
        f"pipeline: {pipeline or 'not given'}; {result.batch_size} items per batch; machine: {machine()}",
        f"knee: {k.setting.label}, {k.items_per_second:.1f} items/s (cheapest within {result.tolerance:.0%} "
        f"of the best, {result.best.items_per_second:.1f} items/s with {result.best.setting.label})",
    ]
    bottom, top = add_title_and_caption(fig, "audiotree bench: throughput and memory by setting", "\n".join(caption))
    ms = result.measurements
    thread_values = sorted({m.setting.num_threads for m in ms})
    buffer_values: list[int | None] = sorted({m.setting.per_worker_buffer_size for m in ms if m.setting.num_workers})
    lines = [(t, b) for t in thread_values for b in (buffer_values or [None])]
    entries = len(lines) + 3  # the lines, the knee, the tolerance line, the budget
    columns = entries if entries <= 6 else -(-entries // 2)
    legend_rows = -(-entries // columns)
    ax_rate, ax_rss = fig.subplots(1, 2, gridspec_kw={
        "left": 0.07, "right": 0.985, "wspace": 0.22, "bottom": bottom + 48 / PLOT_HEIGHT,
        "top": top - (30 + 20 * legend_rows) / PLOT_HEIGHT})
    # Settings often measure alike (memory most of all): each line gets its own marker and dash,
    # and a small sideways offset, so lines on top of each other stay apart.
    dodge = 0.08 if len(lines) > 1 else 0.0
    knee_x = float(k.setting.num_workers)
    for i, (t, b) in enumerate(lines):
        # A setting without workers has no buffer: it starts every line of its thread count.
        points = sorted((m for m in ms if m.setting.num_threads == t
                         and (m.setting.num_workers == 0 or m.setting.per_worker_buffer_size == b)),
                        key=lambda m: m.setting.num_workers)
        label = f"{t} thread{'' if t == 1 else 's'}" + (f", buffer {b}" if b is not None and len(buffer_values) > 1 else "")
        shift = (i - (len(lines) - 1) / 2) * dodge
        xs = [m.setting.num_workers + shift for m in points]
        style = dict(marker=_MARKERS[i % len(_MARKERS)], linestyle=_DASHES[i % len(_DASHES)], markersize=6,
                     linewidth=1.4, label=label, color=f"C{i % 10}")
        ax_rate.plot(xs, [m.items_per_second for m in points], **style)
        if all(m.peak_rss_mb is not None for m in points):
            ax_rss.plot(xs, [m.peak_rss_mb for m in points], **style)
        if k in points:
            knee_x = k.setting.num_workers + shift
    star = dict(marker="*", markersize=17, color="#c0392b", markeredgecolor="white", linestyle="none", zorder=5)
    # The knee's label goes on the side of the star with room: to its right in the left half of
    # the axis (else it would cover the y tick labels, or leave the figure), to its left otherwise.
    all_workers = [m.setting.num_workers for m in ms]
    middle = (min(all_workers) + max(all_workers)) / 2
    side = dict(xytext=(10, 6), ha="left") if knee_x <= middle else dict(xytext=(-10, 6), ha="right")
    ax_rate.plot([knee_x], [k.items_per_second], label="knee", **star)
    ax_rate.annotate("knee", (knee_x, k.items_per_second), textcoords="offset points",
                     fontsize=READABLE_PT, color="#c0392b", **side)
    if k.peak_rss_mb is not None:
        ax_rss.plot([knee_x], [k.peak_rss_mb], label="knee", **star)
        ax_rss.annotate(f"knee {k.peak_rss_mb:.0f} MB", (knee_x, k.peak_rss_mb), textcoords="offset points",
                        fontsize=READABLE_PT, color="#c0392b", **side)
    ax_rate.axhline(result.best.items_per_second * (1 - result.tolerance), color="#999", linestyle=":", linewidth=1,
                    label=f"best - {result.tolerance:.0%}")
    ax_rate.set_ylabel("items/s", fontsize=READABLE_PT + 1)
    ax_rate.set_title("Throughput", fontsize=READABLE_PT + 2, loc="left")
    ax_rss.set_ylabel("peak RSS of the process tree (MB)", fontsize=READABLE_PT + 1)
    ax_rss.set_title("Memory", fontsize=READABLE_PT + 2, loc="left")
    if result.ram_budget_bytes is not None:
        ax_rss.axhline(result.ram_budget_bytes / 2**20, color="#c0392b", linestyle="--", linewidth=1, label="budget")
    for ax in (ax_rate, ax_rss):
        ax.set_xlabel("num_workers (lines nudged sideways to stay apart)", fontsize=READABLE_PT + 1)
        ax.set_xticks(sorted({m.setting.num_workers for m in result.measurements}))
        ax.tick_params(labelsize=READABLE_PT)
        ax.grid(alpha=0.3)
        ax.margins(y=0.12)  # room for the knee's label above the top point
    handles, labels = ax_rate.get_legend_handles_labels()
    for handle, label in zip(*ax_rss.get_legend_handles_labels()):
        if label not in labels:
            handles.append(handle)
            labels.append(label)
    fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(0.06, top - 2 / PLOT_HEIGHT),
               ncol=columns, fontsize=READABLE_PT, frameon=False, borderaxespad=0)
    save_png(fig, path)
    return fig

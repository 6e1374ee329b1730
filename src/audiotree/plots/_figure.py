"""What every audiotree plot shares: a matplotlib figure without pyplot, sizes in
pixels, a caption line, and PNG output.

Figures are made with the Agg canvas directly (no ``pyplot``, no global state,
no display needed), at 100 dpi so that ``width_px`` x ``height_px`` is the size
of the PNG. Font sizes are in points: at 100 dpi, 9 pt is 12.5 px, the smallest
size used for text a reader must read at 100% zoom.
"""

from __future__ import annotations

import os
import platform
from typing import Any

DPI = 100
#: Smallest font size (points) of any text a reader must read: ticks, legends, captions.
READABLE_PT = 9.0


def require_matplotlib(what: str) -> None:
    """Raises a RuntimeError naming the extra when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise RuntimeError(f"{what} needs matplotlib, a dependency of audiotree that cannot be imported here: reinstall it (pip install audiotree).") from None


def new_figure(width_px: int, height_px: int) -> Any:
    """A matplotlib ``Figure`` of that size in pixels with its own Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def machine() -> str:
    """This machine in a few words: ``"2 cores, x86_64, Linux"``."""
    cores = os.cpu_count() or 1
    return f"{cores} core{'s' if cores != 1 else ''}, {platform.machine() or 'unknown CPU'}, {platform.system()}"


def add_title_and_caption(fig: Any, title: str | None, caption: str | None) -> tuple[float, float]:
    """Writes a title at the top and a caption at the bottom of ``fig``.

    Returns the ``(bottom, top)`` figure fractions left for the axes.
    """
    height_px = fig.get_figheight() * DPI
    top, bottom = 1.0, 0.0
    if title:
        fig.text(0.01, 1 - 6 / height_px, title, ha="left", va="top", fontsize=11, fontweight="bold")
        top = 1 - 30 / height_px
    if caption:
        text = fig.text(0.01, 5 / height_px, caption, ha="left", va="bottom", fontsize=READABLE_PT, color="#444",
                        linespacing=1.3)
        wrapped = wrap_to_width(fig, text, caption, 0.98 * fig.get_figwidth() * DPI)
        bottom = (10 + 16 * (wrapped.count("\n") + 1)) / height_px
    return bottom, top


def wrap_to_width(fig: Any, text: Any, content: str, width_px: float) -> str:
    """Sets ``text`` to ``content`` with its lines broken at spaces to fit ``width_px``; returns what it set.

    Widths are measured with the figure's renderer, so any font and length fits.
    """
    import textwrap

    renderer = fig.canvas.get_renderer()
    out: list[str] = []
    for line in content.split("\n"):
        text.set_text(line)
        measured = text.get_window_extent(renderer).width
        if measured <= width_px or " " not in line.strip():
            out.append(line)
            continue
        chars = max(10, int(len(line) * width_px / measured))
        while chars > 10:
            pieces = textwrap.wrap(line, chars, break_long_words=False, subsequent_indent="  ")
            text.set_text("\n".join(pieces))
            if text.get_window_extent(renderer).width <= width_px:
                break
            chars -= 2
        out.extend(pieces)
    joined = "\n".join(out)
    text.set_text(joined)
    return joined


def save_png(fig: Any, path: str | os.PathLike) -> None:
    """Writes ``fig`` as a PNG of exactly its pixel size."""
    fig.savefig(os.fspath(path), format="png", dpi=DPI, metadata={"Software": "audiotree"})

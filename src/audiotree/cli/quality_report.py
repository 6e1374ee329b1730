"""The quality section of ``audiotree scan INDEX``: tables, and the plot beside the scan's."""

from __future__ import annotations

from pathlib import Path

__all__ = ["print_quality", "quality_plot_path", "plot_quality_section", "sorted_items", "sort_where"]

_BAR_WIDTH = 30


def _value(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def print_quality(quality: dict, console, limit: int | None, unit: str = "files") -> None:
    """Each column's histogram and its worst rows (at most ``limit`` lines each; ``None``: every row).

    ``unit`` names the rows: ``"files"``, or ``"segments"`` in a segment index's report.
    """
    from rich.table import Table

    console.print("Quality (from the index's quality columns; docs/index.md, \"Quality\"):")
    for column, entry in quality.items():
        console.print(f"{column}: {entry['measured']} {unit}, min {_value(entry['min'])}, median "
                      f"{_value(entry['median'])}, max {_value(entry['max'])}", soft_wrap=True)
        largest = max((b["count"] for b in entry["histogram"]), default=0)
        hist = Table(show_edge=False, box=None, padding=(0, 1))
        hist.add_column(column)
        hist.add_column(unit, justify="right")
        hist.add_column("")
        for b in entry["histogram"]:
            low = "-inf" if b["min"] is None else f"{b['min']:g}"
            high = "inf" if b["max"] is None else f"{b['max']:g}"
            bar = "█" * max(1, round(b["count"] / max(largest, 1) * _BAR_WIDTH)) if b["count"] else ""
            hist.add_row(f"{low} .. {high}", str(b["count"]), bar)
        console.print(hist)
        worst = entry["worst"] if limit is None else entry["worst"][:limit]
        if worst:
            console.print(f"  worst by {column}:")
        for item in worst:
            extra = f" (Nyquist {_value(item['nyquist_hz'])})" if "nyquist_hz" in item else ""
            console.print(f"    {_value(item['value'])}{extra}  {item['path']}", soft_wrap=True)


def quality_plot_path(plot: Path) -> Path:
    """Where ``--plot PNG`` puts the quality panels: ``PNG`` with ``-quality`` before its suffix."""
    return plot.with_name(f"{plot.stem}-quality{plot.suffix or '.png'}")


def plot_quality_section(plot: Path, report: dict, described: str) -> Path:
    """Draws ``report["quality"]`` beside the scan's plot; returns its path."""
    from audiotree.plots.quality import plot_quality

    path = quality_plot_path(plot)
    plot_quality(path, report["quality"], title="audiotree scan: quality",
                 caption=f"corpus: {described}; {report['readable']} readable files")
    return path


def sorted_items(ds, n: int, column: str, descending: bool) -> list:
    """The first ``n`` items of ``ds`` (``None`` items passed over), ordered by ``extras[column]`` (NaN last)."""
    import math

    import numpy as np

    items = []
    for i in range(max(n * 10, n + 100)):
        if len(items) == n or (hasattr(ds, "__len__") and i >= len(ds)):
            break
        item = ds[i]
        if item is not None:
            items.append(item)

    def key(item) -> tuple:
        value = float(np.asarray(item.extras[column]).reshape(-1)[0])
        if math.isnan(value):
            return (1, 0.0)
        return (0, -value if descending else value)

    return sorted(items, key=key)


def sort_where(index_path: str, column: str, n: int, descending: bool, where: str | None) -> str:
    """A ``where=`` expression keeping the ``n`` rows with the lowest (highest) ``column`` (ties kept) among those
    ``where`` keeps: the rows ``preview --sort-by`` shows."""
    import numpy as np

    from audiotree.index.columns import open_columns
    from audiotree.index.reader import open_index
    from audiotree.index.where import index_columns, where_mask

    ix = open_index(index_path, columns=())
    store = open_columns(ix)
    values = index_columns(store, ix.path, ix.meta, [column], f"--sort-by {column}")(column)
    keep = store.column("readable").astype(bool) & ~np.isnan(values)
    if where is not None:
        keep &= where_mask(where, store, ix.path, ix.meta)
    candidates = np.sort(values[keep])
    if candidates.size == 0:
        raise ValueError(f"--sort-by {column}: no readable row of {ix.path} has a value" +
                         (f" where {where}" if where else "") + ".")
    k = min(n, candidates.size) - 1
    bound = candidates[-1 - k] if descending else candidates[k]
    clause = f"{column} {'>=' if descending else '<='} {float(bound)!r}"
    return clause if where is None else f"({where}) and {clause}"

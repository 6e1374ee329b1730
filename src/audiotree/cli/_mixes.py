"""The mix table of ``audiotree bench`` and ``audiotree demo``: each group's share per window of steps.

The numbers come from :func:`audiotree.sources.realised_proportions` (the mix
itself, no audio); this module only lays them out.
"""

from __future__ import annotations

from typing import Any

#: The mix table: windows of this many steps (batches), this many windows.
MIX_WINDOW_STEPS, MIX_WINDOWS = 10, 8


def mix_report(ds: Any, batch_size: int) -> Any:
    """The realised proportions of a mixed ``ds`` per window of ``MIX_WINDOW_STEPS`` steps (``None``: no mix)."""
    from audiotree.sources.mixing import find_mix, realised_proportions

    selection = find_mix(ds)
    window = MIX_WINDOW_STEPS * batch_size
    if selection is None or len(selection) < window:
        return None
    stop = min(MIX_WINDOWS * window, len(selection) // window * window)
    return realised_proportions(ds, stop, window=window)


def mix_table(mix: Any, batch_size: int) -> Any:
    """A rich Table: per window of steps, each group's share served and (in brackets) asked for."""
    from rich.table import Table

    steps = mix.window // batch_size
    table = Table(title=f"Mix per {steps} steps of {batch_size} (served, and the weights' share in brackets)",
                  caption=f"read from the mix itself (no audio); worst window {mix.worst_deviation():.1f} binomial SD "
                          "from the weights", title_justify="left", caption_justify="left")
    table.add_column("steps")
    for name in mix.names:
        table.add_column(name, justify="right")
    for start, realised, expected in zip(mix.starts, mix.realised, mix.expected):
        first = start // batch_size
        table.add_row(f"{first}-{first + steps - 1}", *(f"{r:.1%} ({e:.1%})" for r, e in zip(realised, expected)))
    return table

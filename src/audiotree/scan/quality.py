"""The ``quality`` section of an index scan: a histogram of each quality column and its worst files.

``report["quality"]`` is ``None`` for a folder scan and for an index without
quality columns (:mod:`audiotree.index.quality`); else ``{column: entry}`` in
the index's column order, each entry holding (:data:`QUALITY_ENTRY_KEYS`):

- ``measured``: readable rows with a value (``channel_corr``: stereo files);
- ``min``, ``median``, ``max`` (``None`` when none is measured);
- ``histogram``: ``[{"min", "max", "count"}]`` over fixed edges
  (:data:`EDGES`; ``max`` ``None`` for the open last bin), a value ``v`` counted
  where ``min <= v < max``;
- ``worst``: up to ``worst`` files ``[{"path", "value"}]``, worst first:
  the lowest ``bandwidth_hz`` as a share of the file's Nyquist (its ``nyquist_hz``
  beside it), the lowest ``snr_db``, the highest value of the other columns
  (``channel_corr``: closest to 1, a mono file stored as stereo), leaving out
  values that are no fault at all (no clipping, no DC, no silence).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

__all__ = ["quality_section", "EDGES", "QUALITY_ENTRY_KEYS", "WORST_SHOWN"]

#: The keys of each ``report["quality"][column]``.
QUALITY_ENTRY_KEYS = frozenset({"measured", "min", "median", "max", "histogram", "worst"})
#: Files listed as worst per column by default.
WORST_SHOWN = 10
#: Histogram edges per column.
EDGES: dict[str, tuple[float, ...]] = {
    "bandwidth_hz": (0.0, 3_000.0, 4_500.0, 6_000.0, 8_500.0, 11_500.0, 16_500.0, 20_000.0, 22_500.0, 24_500.0,
                     math.inf),
    "clip_share": (0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, math.inf),
    "clip_longest": (0.0, 1.0, 10.0, 100.0, 1_000.0, 10_000.0, math.inf),
    "dc_offset": (0.0, 1e-4, 1e-3, 1e-2, 0.1, math.inf),
    "channel_corr": (-1.0, 0.0, 0.5, 0.9, 0.99, 0.9999, math.inf),
    "silence_share": (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, math.inf),
    "snr_db": (-math.inf, 0.0, 10.0, 20.0, 30.0, 40.0, 60.0, math.inf),
}
# Values that are no fault: not listed among the worst.
_HARMLESS = {"clip_share": 0.0, "clip_longest": 0.0, "dc_offset": 0.0, "silence_share": 0.0}


def _histogram(values: np.ndarray, edges: Sequence[float]) -> list[dict]:
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        count = int(np.count_nonzero((values >= lo) & (values < hi)))
        out.append({"min": None if math.isinf(lo) else lo, "max": None if math.isinf(hi) else hi, "count": count})
    return out


def quality_section(table: Any, names: Sequence[str], readable: Sequence[bool], *,
                    worst: int | None = WORST_SHOWN) -> dict[str, dict]:
    """The section (see the module) from an index ``table`` with the quality columns and ``sample_rate``.

    ``names`` name the rows (paths, or segments), ``readable`` marks the rows
    counted; ``worst=None`` lists every measured file, worst first.
    """
    from audiotree.index.quality import QUALITY_COLUMNS, quality_arrays, store_key

    arrays = quality_arrays(table)
    keep = np.asarray(readable, dtype=bool)
    nyquist = arrays[store_key("sample_rate")] / 2.0
    section = {}
    for column in QUALITY_COLUMNS:
        values = arrays[store_key(column)]
        present = keep & ~np.isnan(values)
        rows = np.flatnonzero(present)
        measured = values[rows]
        if column == "bandwidth_hz":
            badness = -(measured / np.where(nyquist[rows] > 0, nyquist[rows], np.nan))
        elif column == "snr_db":
            badness = -measured
        else:
            badness = measured
        order = np.lexsort((rows, -np.nan_to_num(badness, nan=-np.inf)))
        listed = []
        for k in order:
            if column in _HARMLESS and measured[k] <= _HARMLESS[column]:
                continue
            if column == "bandwidth_hz" and measured[k] >= 0.9 * nyquist[rows[k]]:
                continue  # full band: no fault
            entry = {"path": names[int(rows[k])], "value": _plain(measured[k])}
            if column == "bandwidth_hz":
                entry["nyquist_hz"] = _plain(nyquist[rows[k]])
            listed.append(entry)
            if worst is not None and len(listed) >= worst:
                break
        section[column] = {
            "measured": int(rows.size),
            "min": _plain(measured.min()) if rows.size else None,
            "median": _plain(np.median(measured)) if rows.size else None,
            "max": _plain(measured.max()) if rows.size else None,
            "histogram": _histogram(measured, EDGES[column]),
            "worst": listed,
        }
    return section


def _plain(value: Any) -> float | int:
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2 ** 53 else round(value, 6)

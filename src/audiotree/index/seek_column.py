"""The index's FLAC seek tables in its column store: a ragged array, one row's table read by itself.

Layout (beside the other arrays of :mod:`audiotree.index.columns`):
``seek.offsets`` (int64, ``rows + 1``: row ``r`` owns pairs
``[offsets[r], offsets[r + 1])``) and ``seek.data`` (int64 ``(P, 2)``
``[first sample, byte offset]`` pairs). A row without a table owns none. An item
reads its row's two offsets and then its table: two positioned reads of a
few hundred bytes, whatever the number of rows. The tables stream from the
Parquet file in batches, so building the store never holds the column whole.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

__all__ = ["write_seek_tables", "seek_table"]

_BATCH_ROWS = 65_536


def write_seek_tables(ix: Any, folder: str, put: Callable[[str, np.ndarray], None], arrays: dict) -> None:
    """Writes ``seek.offsets``/``seek.data`` of ``ix`` (an index with the ``seek_points`` column) into ``folder``."""
    import pyarrow.parquet as pq

    from audiotree.io import storage
    from audiotree.io.remote_file import open_input

    source = open_input(ix.path) if storage.is_url(ix.path) else ix.path
    offsets, total = [np.zeros(1, np.int64)], 0
    try:
        pf = pq.ParquetFile(source)
        with open(os.path.join(folder, "seek.data.bin"), "wb") as raw:
            for batch in pf.iter_batches(batch_size=_BATCH_ROWS, columns=["seek_points"]):
                column = batch.column(0)
                starts = column.offsets.to_numpy().astype(np.int64)
                values = column.values.slice(int(starts[0]), int(starts[-1] - starts[0]))
                lengths = np.diff(starts)
                if np.any(lengths % 2) or values.null_count:
                    raise ValueError(f"{ix.path}: a row's seek_points are not [sample, byte] pairs; the index was "
                                     "edited or damaged. Rebuild it.")
                np.ascontiguousarray(values.to_numpy(zero_copy_only=False), dtype="<i8").tofile(raw)
                offsets.append((starts[1:] - starts[0]) // 2 + total)
                total += int(starts[-1] - starts[0]) // 2
    finally:
        if source is not ix.path:
            source.close()
    put("seek.offsets", np.concatenate(offsets))
    arrays["seek.data"] = {"dtype": np.dtype("<i8").str, "shape": [total, 2]}


def seek_table(store: Any, row: int) -> np.ndarray | None:
    """Row ``row``'s seek table, ``int64 (K, 2)``, or ``None`` (no table, or a store without the arrays)."""
    if not store.has("seek.offsets"):
        return None
    lo, hi = (int(v) for v in store.read("seek.offsets", int(row), int(row) + 2))
    if hi <= lo:
        return None
    return store.read("seek.data", lo, hi)

"""Windowed sampling over a corpus index, as arrays in the index's column store.

A windowed dataset over an index plans its slots once, in the process that
builds it, from the index's columns: durations as one float64 array, and the
window-LUFS cells (when ``lufs_window_sec`` drops quiet slots) computed from
the stored loudness profiles as flat arrays (an offset per row plus the cell
values), kept in the store beside the columns so the next dataset with that
cell length maps them instead (:func:`index_cells`). The slots themselves go
to the store too (:class:`StoreSlots`: 8 bytes per slot, 16 per file, named
by their content), so the dataset a worker unpickles holds the store's folder
and a few names: nothing in it grows with the rows or the slots. Each read
looks up one slot and one row (its path from the mapped path column).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from audiotree.sources.slots import SlotPlan

__all__ = ["StoreSlots", "index_cells", "row_cells", "check_cell_length"]


def check_cell_length(index_path: str, lufs_window_sec: Any) -> int:
    """The profile blocks in a cell of ``lufs_window_sec`` seconds; a ValueError unless a multiple of 0.1 s."""
    from audiotree.index.profile import BLOCK_SEC, window_blocks

    if lufs_window_sec is None:
        raise ValueError(f"Reading the corpus index {index_path} as a window-LUFS cache needs lufs_window_sec= "
                         "(the cell length in seconds, a multiple of 0.1).")
    blocks = window_blocks(lufs_window_sec)
    if abs(blocks * BLOCK_SEC - float(lufs_window_sec)) > 1e-9:
        raise ValueError(f"lufs_window_sec={lufs_window_sec} is not a multiple of the index's 0.1 s blocks.")
    return blocks


def index_cells(store: Any, blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(offsets, values, known)`` of every store row: cells of ``blocks`` profile blocks.

    Row ``r``'s cells are ``values[offsets[r]:offsets[r + 1]]`` (float32 LUFS,
    the gated loudness of consecutive windows, a trailing partial one dropped:
    :func:`audiotree.index.window_loudness`); ``known[r]`` is False for a row
    without a profile (unreadable). Computed once per cell length, from each
    row's profile, and kept in the store (``window-lufs-{blocks}b``); later
    calls, in any process, read it.
    """
    from audiotree.index.profile import window_loudness

    name = f"window-lufs-{int(blocks)}b"
    known = store.column("profile.valid").astype(bool) & store.column("readable").astype(bool)
    if store.has_ragged(name):
        offsets, values = store.ragged(name)
        return offsets, values, known
    counts = np.zeros(len(store), dtype=np.int64)
    chunks = []
    for r in np.flatnonzero(known):
        profile = store.profile(int(r))
        cells = window_loudness(profile, blocks, hop_blocks=blocks).astype(np.float32)
        counts[r] = cells.size
        chunks.append(cells)
    offsets = np.zeros(len(store) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    values = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    offsets, values = store.save_ragged(name, offsets, values)
    return offsets, values, known


def row_cells(rows: Any, blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(starts, ends, values)`` of the selected rows' cells (see :func:`index_cells`), as ``plan_slots`` takes them.

    Raises a ValueError naming the row when a selected row has no profile.
    """
    offsets, values, known = index_cells(rows.store, blocks)
    selected = rows.rows()
    missing = np.flatnonzero(~known[selected])
    if missing.size:
        raise ValueError(f"No window loudness for '{rows.path(int(missing[0]))}' in the corpus index "
                         f"{rows.index_path} ({missing.size} row(s) without a loudness profile); rebuild the index.")
    return offsets[selected], offsets[selected + 1], values


@dataclasses.dataclass(frozen=True)
class StoreSlots:
    """The slots of one windowed dataset, kept in the index's column store.

    Holds the store and the plan's name; the arrays (a :class:`SlotPlan`) stay
    on disk, and :meth:`at` reads a slot's few bytes. ``file_idx[k]`` is slot ``k``'s file
    (its position in the dataset's rows); :meth:`at` gives a slot's
    ``(file, offset, stride, max_offset)`` in seconds, the values a
    :class:`~audiotree.sources.slots.SlotIndex` holds.
    """

    store: Any
    name: str
    count: int

    @classmethod
    def save(cls, store: Any, plan: SlotPlan) -> "StoreSlots":
        """Keeps ``plan`` in ``store`` (once per content) and returns its mapped view."""
        name = store.save_derived("slots", {"file": plan.file, "j": plan.j, "stride": plan.stride,
                                            "usable": plan.usable})
        return cls(store=store, name=name, count=len(plan))

    def __len__(self) -> int:
        return self.count

    @property
    def file_idx(self) -> np.ndarray:
        """Every slot's file (read whole: for the building process)."""
        return self.store.derived(self.name, "file")

    def at(self, slot: int) -> tuple[int, float, float, float]:
        value = self.store.derived_value
        file, j = int(value(self.name, "file", slot)), int(value(self.name, "j", slot))
        files = self.store.derived_length(self.name, "stride")
        if not 0 <= file < files:
            from audiotree.index.store_check import damaged

            raise damaged(os.path.join(self.store.directory, f"{self.name}.file.npy"),
                          f"slot {slot} names file {file} of {files}")
        step = float(value(self.name, "stride", file))
        # float(j) * step is the float64 product SlotIndex.offset holds (j * stride).
        return file, float(j) * step, step, float(value(self.name, "usable", file))

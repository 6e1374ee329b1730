"""Slot arithmetic of windowed sampling: which excerpts of which files an epoch visits.

Each file of ``dur`` seconds, for excerpts of ``duration`` s placed every
``hop`` s (default ``duration``), gets

* ``usable = max(0, dur - duration)`` seconds of possible start offsets,
* ``natural = max(1, floor(usable / hop) + 1)`` windows at that hop,
* ``m = max(1, round(natural ** alpha))`` *slots*, at nominal offsets
  ``j * usable / m`` for ``j < m`` (``stride = usable / m``).

``alpha`` sets the length bias: ``1`` gives every window a slot (a file's share
grows with its length), ``0`` one slot per file (file-balanced), ``0.5`` in
between. E.g. 4 s and 40 s files with ``duration = hop = 1`` get 1+1, 2+6 and
4+40 slots for alpha 0, 0.5 and 1. A file shorter than ``duration`` gets one
slot at 0 and is padded. With ``jitter`` each read starts at the slot's
offset plus ``uniform(0, stride)`` (clamped to ``usable``), so every start
offset can be drawn; without it slots are read at their nominal offsets.

One epoch visits every slot exactly once (``len(ds) == n_slots * num_epochs``).
Slots are shuffled globally (a new permutation per epoch) and each global index
has its own RNG, exactly like :func:`~audiotree.sources.create_audio_dataset`.
Items are read by seeking (:func:`audiotree.io.excerpt.read_excerpt`); whole files
are never decoded. Durations come from file headers (:func:`scan_durations`).

Loudness filtering: With per-file window loudness (``lufs_per_file`` or a cache from
:func:`build_window_lufs_cache`), a slot is kept only if the cell of
``lufs_window_sec`` seconds holding its *centre* measures at least
``lufs_cutoff`` LUFS. Cells hold the gated BS.1770 loudness of consecutive,
non-overlapping windows (a trailing partial window is dropped; a file shorter
than one window has no cells and keeps all its slots).

The planner is vectorised over files and slots (:func:`plan_slots`, on a
float64 array of durations; :func:`build_slot_index` looks paths up first) and
gives the per-file arithmetic above float for float.

>>> slot_count(40.0, duration=1.0, hop=1.0, alpha=0.5)
6
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["SlotIndex", "SlotPlan", "PathLookup", "slot_count", "plan_slots", "build_slot_index", "lookup_files"]


class PathLookup:
    """Fast path -> value lookup that also matches equivalent absolute paths."""

    def __init__(self, mapping: Mapping[str, Any]):
        self.mapping = mapping
        self.normalized = {os.path.normpath(os.path.abspath(k)): k for k in mapping}

    def get(self, path: str) -> Any:
        if path in self.mapping:
            return self.mapping[path]
        key = self.normalized.get(os.path.normpath(os.path.abspath(path)))
        return None if key is None else self.mapping[key]


@dataclasses.dataclass(frozen=True)
class SlotIndex:
    """Parallel arrays, one entry per slot."""

    file_idx: np.ndarray  # int64
    offset: np.ndarray  # float64 seconds
    stride: np.ndarray  # float64 seconds
    max_offset: np.ndarray  # float64 seconds (the file's usable span)

    def __len__(self) -> int:
        return int(self.file_idx.shape[0])

    def at(self, slot: int) -> tuple[int, float, float, float]:
        """Slot ``slot``'s ``(file, offset, stride, max_offset)``."""
        return (int(self.file_idx[slot]), float(self.offset[slot]), float(self.stride[slot]),
                float(self.max_offset[slot]))


#: The most slots one file may have (a 24-hour file at a 10 ms hop has 8.6 million): more means a bad duration.
MAX_SLOTS_PER_FILE = 1 << 26


def check_file_duration(path: str, value: Any, hop: float, source: str) -> float:
    """``value`` as a file's duration in seconds, or a ValueError naming ``path`` and ``source`` (where it came from)."""
    try:
        dur = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"The duration of '{path}' in {source} is {value!r}, not a number of seconds.") from None
    if not math.isfinite(dur):
        raise ValueError(f"The duration of '{path}' in {source} is {value!r}, not a finite number of seconds.")
    if dur < 0:
        raise ValueError(f"The duration of '{path}' in {source} is negative ({dur!r} s).")
    if dur / hop > MAX_SLOTS_PER_FILE:
        raise ValueError(f"The duration of '{path}' in {source} is implausible ({dur:g} s: more than "
                         f"{MAX_SLOTS_PER_FILE} windows of {hop:g} s).")
    return dur


def slot_count(file_duration: float, duration: float, hop: float, alpha: float) -> int:
    """Number of slots of one file (see the module docstring)."""
    usable = max(0.0, float(file_duration) - duration)
    natural = max(1, math.floor(usable / hop + 1e-9) + 1)
    return max(1, int(round(natural**alpha)))


@dataclasses.dataclass(frozen=True)
class SlotPlan:
    """Slots as compact arrays: ``file`` (int32) and ``j`` (int32, the slot's number in its file) per slot, and
    ``stride``/``usable`` (float64 seconds) per file.

    Slot ``k`` starts at ``j[k] * stride[file[k]]`` (the same float64 product
    :class:`SlotIndex` holds) and may start up to ``usable[file[k]]``: 8 bytes
    per slot and 16 per file.
    """

    file: np.ndarray
    j: np.ndarray
    stride: np.ndarray
    usable: np.ndarray

    def __len__(self) -> int:
        return int(self.file.shape[0])

    def to_index(self) -> SlotIndex:
        file = self.file.astype(np.int64)
        return SlotIndex(file_idx=file, offset=self.j.astype(np.float64) * self.stride[file],
                         stride=self.stride[file], max_offset=self.usable[file])


def _slot_counts(usable: np.ndarray, hop: float, alpha: float) -> np.ndarray:
    """:func:`slot_count` of every file (int64), vectorised; ``natural ** alpha`` rounds in Python, once per value."""
    natural = np.maximum(1, np.floor(usable / hop + 1e-9).astype(np.int64) + 1)
    values, inverse = np.unique(natural, return_inverse=True)
    counts = np.array([max(1, int(round(int(v) ** alpha))) for v in values], dtype=np.int64)
    return counts[inverse.reshape(-1)]


def plan_slots(
    durations: np.ndarray,
    *,
    duration: float,
    hop: float,
    alpha: float,
    cells: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    lufs_window_sec: float | None = None,
    lufs_cutoff: float = -40.0,
) -> SlotPlan:
    """The slots of files of ``durations`` (float64 seconds, checked), vectorised over files and slots.

    ``cells`` is ``(starts, ends, values)``: file ``i``'s loudness cells are
    ``values[starts[i]:ends[i]]`` (float32 LUFS, ``lufs_window_sec`` long). The
    arithmetic is the module docstring's, float for float: the same slots as
    :func:`build_slot_index`. Raises RuntimeError when no slot is left.

    >>> plan = plan_slots(np.array([0.3, 5.0]), duration=1.0, hop=1.0, alpha=1.0)
    >>> plan.file.tolist(), plan.j.tolist(), plan.stride.tolist(), plan.usable.tolist()
    ([0, 1, 1, 1, 1, 1], [0, 0, 1, 2, 3, 4], [0.0, 0.8], [0.0, 4.0])
    """
    durations = np.asarray(durations, dtype=np.float64).reshape(-1)
    usable = np.maximum(0.0, durations - duration)
    counts = _slot_counts(usable, hop, alpha)
    stride = usable / counts
    file = np.repeat(np.arange(durations.size, dtype=np.int64), counts)
    first = np.cumsum(counts) - counts
    j = np.arange(file.size, dtype=np.int64) - np.repeat(first, counts)
    if cells is not None and file.size:
        starts, ends, values = (np.asarray(a) for a in cells)
        size = (ends - starts)[file]
        nominal = j.astype(np.float64) * stride[file]
        centre = ((nominal + duration / 2) / lufs_window_sec).astype(np.int64)
        centre = np.clip(centre, 0, np.maximum(size - 1, 0))
        has = size > 0
        loud = np.ones(file.size, dtype=bool)
        loud[has] = np.asarray(values[(starts[file] + centre)[has]], dtype=np.float32) >= lufs_cutoff
        file, j = file[loud], j[loud]
    if file.size == 0:
        raise RuntimeError(
            f"No windows left to sample from {durations.size} file(s)"
            + (f" after dropping those quieter than lufs_cutoff={lufs_cutoff} LUFS; lower the cutoff."
               if cells is not None else ".")
        )
    index_type = np.int32 if durations.size < 2**31 else np.int64
    return SlotPlan(file=file.astype(index_type), j=j.astype(np.int32), stride=stride, usable=usable)


def build_slot_index(
    files: Sequence[str],
    durations: Mapping[str, float],
    *,
    duration: float,
    hop: float,
    alpha: float,
    lufs_per_file: Mapping[str, Any] | None = None,
    lufs_window_sec: float | None = None,
    lufs_cutoff: float = -40.0,
    durations_hint: str = "add it to durations= or pass durations=None to read the file headers.",
    durations_source: str = "durations=",
) -> SlotIndex:
    """The slots of every file, looked up by path in ``durations`` (and ``lufs_per_file``); see the module docstring."""
    seconds, cells = lookup_files(files, durations, hop=hop, lufs_per_file=lufs_per_file,
                                  durations_hint=durations_hint, durations_source=durations_source)
    return plan_slots(seconds, duration=duration, hop=hop, alpha=alpha, cells=cells, lufs_window_sec=lufs_window_sec,
                      lufs_cutoff=lufs_cutoff).to_index()


def lookup_files(
    files: Any,
    durations: Mapping[str, float] | np.ndarray,
    *,
    hop: float,
    lufs_per_file: Mapping[str, Any] | None = None,
    durations_hint: str = "add it to durations= or pass durations=None to read the file headers.",
    durations_source: str = "durations=",
) -> tuple[np.ndarray, tuple | None]:
    """``(durations, cells)`` of ``files`` from path-keyed mappings, as :func:`plan_slots` takes them.

    ``cells`` is ``(starts, ends, values)``, or ``None`` without
    ``lufs_per_file``. Each file's duration is checked (a ValueError names it
    and ``durations_source``); a file missing from a mapping is a ValueError.

    ``durations`` may be an array already (checked by the caller), then only the loudness is looked up.
    """
    lookup = None if isinstance(durations, np.ndarray) else PathLookup(durations)
    lufs_lookup = PathLookup(lufs_per_file) if lufs_per_file is not None else None
    out = np.asarray(durations, dtype=np.float64) if lookup is None else np.empty(len(files), dtype=np.float64)
    sizes, chunks = [], []
    for i, path in enumerate(files):
        if lookup is not None:
            dur = lookup.get(path)
            if dur is None:
                raise ValueError(f"No duration for '{path}'; {durations_hint}")
            out[i] = check_file_duration(path, dur, hop, durations_source)
        if lufs_lookup is not None:
            cells = lufs_lookup.get(path)
            if cells is None:
                raise ValueError(f"No window loudness for '{path}'; rebuild the LUFS cache including this file.")
            chunks.append(np.asarray(cells, dtype=np.float32).reshape(-1))
            sizes.append(chunks[-1].size)
    if lufs_lookup is None:
        return out, None
    ends = np.cumsum(np.asarray(sizes, dtype=np.int64))
    values = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return out, (ends - np.asarray(sizes, dtype=np.int64), ends, values)

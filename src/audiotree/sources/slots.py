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

>>> slot_count(40.0, duration=1.0, hop=1.0, alpha=0.5)
6
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["SlotIndex", "PathLookup", "slot_count", "build_slot_index"]


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
    """The slots of every file; see the module docstring."""
    durations_lookup = PathLookup(durations)
    lufs_lookup = PathLookup(lufs_per_file) if lufs_per_file is not None else None
    file_idx, offsets, strides, max_offsets = [], [], [], []
    for i, path in enumerate(files):
        dur = durations_lookup.get(path)
        if dur is None:
            raise ValueError(f"No duration for '{path}'; {durations_hint}")
        dur = check_file_duration(path, dur, hop, durations_source)
        usable = max(0.0, float(dur) - duration)
        m = slot_count(float(dur), duration, hop, alpha)
        stride = usable / m
        nominal = np.arange(m, dtype=np.float64) * stride
        if lufs_lookup is not None:
            cells = lufs_lookup.get(path)
            if cells is None:
                raise ValueError(f"No window loudness for '{path}'; rebuild the LUFS cache including this file.")
            cells = np.asarray(cells, dtype=np.float32).reshape(-1)
            if cells.size:
                centre = np.clip(((nominal + duration / 2) / lufs_window_sec).astype(np.int64), 0, cells.size - 1)
                nominal = nominal[cells[centre] >= lufs_cutoff]
        if nominal.size == 0:
            continue
        file_idx.append(np.full(nominal.size, i, dtype=np.int64))
        offsets.append(nominal)
        strides.append(np.full(nominal.size, stride))
        max_offsets.append(np.full(nominal.size, usable))
    if not file_idx:
        raise RuntimeError(
            f"No windows left to sample from {len(files)} file(s)"
            + (f" after dropping those quieter than lufs_cutoff={lufs_cutoff} LUFS; lower the cutoff." if lufs_lookup else ".")
        )
    return SlotIndex(
        file_idx=np.concatenate(file_idx), offset=np.concatenate(offsets), stride=np.concatenate(strides),
        max_offset=np.concatenate(max_offsets),
    )

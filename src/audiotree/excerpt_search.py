"""Where the loud passages of a long file are: the two searches behind ``loudest``.

With a corpus index (:class:`LoudestPlan`)
    The index holds each file's loudness profile (K-weighted mean square per
    100 ms block). At start-up the dataset turns every profile into the gated
    loudness of every block-aligned window of ``duration``
    (:func:`audiotree.index.window_loudness`) and keeps, per file, the runs of
    window starts whose profile loudness clears ``lufs_cutoff +
    PROFILE_MARGIN_LU``. An item draws one of those starts uniformly with its
    own RNG, reads that excerpt only and meters it (the item's ``lufs`` is the
    meter's). The margin covers the profile's one bias (filter ringing can make
    it read a near-silent window louder than the meter; on program material
    the two agree within 0.1 LU), and the meter confirms the winner: if it
    does not clear the cutoff another start is drawn, up to ``num_tries``.
    Files with no window above ``cutoff + margin`` are known before anything
    is read.

Without an index (:func:`probe_energy`)
    After a first random attempt misses on a file longer than
    ``scan_max_seconds``, short probes spaced at most ``duration / 2`` apart
    (with a random phase) measure the raw energy along the file. Probes are
    read from the end of the file backwards, so every hop is a real seek (a
    short forward hop on Ogg/Vorbis decodes through instead). The loudest
    probes, in order, then each get one read of ``2 * duration`` around them,
    in which a 100 ms energy map picks the loudest window to meter. Any loud
    passage at least ``duration / 2`` long is hit by a probe.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "EXCERPT_METHODS", "PROFILE_MARGIN_LU", "LoudestPlan", "RowPlan", "build_plan", "method_extras",
    "method_name", "probe_energy", "probe_layout",
]

#: How an item's excerpt was chosen, stored as ``extras["excerpt_method"]``
#: (int8 ``(1,)``, the position in this tuple): ``loudest`` with an index
#: (``"index"``) or by the probe search (``"search"``).
EXCERPT_METHODS = ("start", "random", "search", "index")
#: LU above ``lufs_cutoff`` a window's profile loudness must reach to count as
#: qualifying: 5x the profile's measured error on program material (0.1 LU),
#: so a window the meter would put below the cutoff is (all but) never drawn.
PROFILE_MARGIN_LU = 0.5
_LUFS_OFFSET = -0.691
_ABS_GATE = 10 ** ((-70.0 - _LUFS_OFFSET) / 10)  # BS.1770: -70 LUFS absolute gate, as a mean square
_REL_GATE = 0.1  # and 10 LU below the absolutely gated mean


def _to_lufs(ms: float) -> float:
    return _LUFS_OFFSET + 10 * math.log10(ms) if ms > 0 else -math.inf


def _gate_one(gating: list) -> float:
    """BS.1770 gated loudness of one window's gating-block mean squares (floats).

    The same gates as :func:`audiotree.dsp.loudness.gated_from_block_power`,
    for a single window: its general (batched, masked) form costs ~10x more
    than this on a few dozen blocks, once per item.
    """
    kept = [ms for ms in gating if ms > _ABS_GATE]
    if not kept:
        return -math.inf
    floor = sum(kept) / len(kept) * _REL_GATE
    kept = [ms for ms in kept if ms > floor]
    return _to_lufs(sum(kept) / len(kept)) if kept else -math.inf


# Probe search: probes at most this many per file, this long (seconds).
_MAX_PROBES = 4096
_MIN_PROBE_SEC = 0.01
_MAX_PROBE_SEC = 0.1


def method_extras(name: str) -> dict:
    """``{"excerpt_method": int8 (1,)}`` for one of :data:`EXCERPT_METHODS`.

    >>> method_extras("index")["excerpt_method"].tolist()
    [3]
    """
    return {"excerpt_method": np.array([EXCERPT_METHODS.index(name)], dtype=np.int8)}


def method_name(code: Any) -> str | None:
    """The name of an ``excerpt_method`` code (``None`` when out of range).

    >>> method_name(2)
    'search'
    """
    code = int(code)
    return EXCERPT_METHODS[code] if 0 <= code < len(EXCERPT_METHODS) else None


# ------------------------------------------------------------------- index
class RowPlan(NamedTuple):
    """One file's qualifying window starts: runs ``[first[k], first[k] + count[k])`` of blocks.

    ``best`` is the block of the loudest window by the profile, ``best_lufs`` its
    profile loudness; ``window_blocks`` the window length in 100 ms blocks.
    """

    first: np.ndarray
    count: np.ndarray
    best: int
    best_lufs: float
    window_blocks: int
    profile: np.ndarray | None = None

    def loudness(self, block: int) -> tuple[float, np.ndarray] | None:
        """Profile loudness of the window at ``block``: (gated LUFS, ungated 0.4 s windows), or ``None``.

        Within 0.1 LU of the meter on windows above -50 LUFS (see
        :mod:`audiotree.index.profile`); ``None`` without a stored profile.
        """
        if self.profile is None:
            return None
        from audiotree.index.profile import GATING_BLOCKS

        # One window of a few dozen blocks: plain Python floats beat a dozen tiny NumPy calls here,
        # and this runs once per item (window_loudness computes the same for every start).
        blocks = self.profile[block:block + self.window_blocks].tolist()
        if not blocks:
            return None
        g = GATING_BLOCKS
        if len(blocks) >= g:
            gating = [(blocks[k] + blocks[k + 1] + blocks[k + 2] + blocks[k + 3]) * 0.25
                      for k in range(len(blocks) - g + 1)]
        else:
            gating = [sum(blocks) / len(blocks)]
        windows = np.array([_to_lufs(ms) for ms in gating[::g]], dtype=np.float32) if len(blocks) >= g else \
            np.zeros(0, np.float32)
        return _gate_one(gating), windows

    @property
    def qualifies(self) -> bool:
        return bool(self.count.size)

    def draw(self, rng: np.random.Generator) -> int:
        """A qualifying start block, uniform over all of them (one RNG draw)."""
        total = int(self.count.sum())
        k = int(rng.integers(total))
        ends = np.cumsum(self.count)
        run = int(np.searchsorted(ends, k, side="right"))
        return int(self.first[run] + k - (ends[run] - self.count[run]))


@dataclasses.dataclass(frozen=True, eq=False)
class LoudestPlan:
    """Qualifying window starts of every row of an index, as flat arrays (picklable).

    Row ``i``'s runs are ``first[ptr[i]:ptr[i + 1]]`` / ``count[...]`` (in 100 ms
    blocks); ``best[i]`` is ``-1`` when the row has no profile (then ``loudest``
    falls back to the probe search for it). With ``profiles`` (the rows'
    profiles end to end, row ``i``'s at ``profiles[pptr[i]:pptr[i + 1]]``) an
    item's ``lufs`` comes from the profile and nothing is metered.
    """

    window_blocks: int
    cutoff: float
    ptr: np.ndarray
    first: np.ndarray
    count: np.ndarray
    best: np.ndarray
    best_lufs: np.ndarray
    pptr: np.ndarray | None = None
    profiles: np.ndarray | None = None

    def row(self, i: int) -> RowPlan | None:
        if self.best[i] < 0:
            return None
        a, b = int(self.ptr[i]), int(self.ptr[i + 1])
        profile = None if self.profiles is None else self.profiles[self.pptr[i]:self.pptr[i + 1]]
        return RowPlan(self.first[a:b], self.count[a:b], int(self.best[i]), float(self.best_lufs[i]),
                       self.window_blocks, profile)

    def qualifying(self) -> np.ndarray:
        """Rows with a qualifying window, or with no profile (not known to be silent)."""
        return np.flatnonzero((np.diff(self.ptr) > 0) | (self.best < 0))

    def take(self, rows: np.ndarray) -> "LoudestPlan":
        rows = np.asarray(rows, dtype=np.int64)
        ptr, picks = _take_ragged(self.ptr, rows)
        out = dataclasses.replace(self, ptr=ptr, first=self.first[picks], count=self.count[picks],
                                  best=self.best[rows], best_lufs=self.best_lufs[rows])
        if self.profiles is not None:
            pptr, ppicks = _take_ragged(self.pptr, rows)
            out = dataclasses.replace(out, pptr=pptr, profiles=self.profiles[ppicks])
        return out


def _take_ragged(ptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """New offsets and the flat positions of ``rows`` of a ragged array with offsets ``ptr``."""
    lengths = (ptr[rows + 1] - ptr[rows]).astype(np.int64)
    picks = np.concatenate([np.arange(ptr[r], ptr[r + 1]) for r in rows]) if rows.size else np.zeros(0, np.int64)
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), picks.astype(np.int64)


def build_plan(profiles, *, duration: float, cutoff: float, margin: float = PROFILE_MARGIN_LU,
               keep_profiles: bool = False) -> LoudestPlan:
    """A :class:`LoudestPlan` from per-row profiles (``None`` for a row without one).

    A file shorter than ``duration`` has one window, the whole file. Cost: one
    vectorised :func:`~audiotree.index.window_loudness` per row.
    ``keep_profiles`` stores the profiles (4 bytes per 100 ms of audio) so
    items take their ``lufs`` from them instead of metering.

    >>> p = np.r_[np.full(100, 1e-9), np.full(30, 1e-2), np.full(100, 1e-9)]
    >>> plan = build_plan([p, np.full(100, 1e-9), None], duration=3.0, cutoff=-40.0)
    >>> plan.qualifying().tolist(), plan.row(0).best
    ([0, 2], 100)
    """
    from audiotree.index.profile import window_blocks, window_loudness

    w = window_blocks(duration)
    ptr, firsts, counts, best, best_lufs = [0], [], [], [], []
    for p in profiles:
        n = 0 if p is None else len(p)
        if n == 0:
            ptr.append(ptr[-1])
            best.append(-1)
            best_lufs.append(math.nan)
            continue
        lufs = window_loudness(p, min(w, n))
        good = lufs > cutoff + margin
        edges = np.flatnonzero(np.diff(np.r_[0, good.astype(np.int8), 0]))
        starts, ends = edges[0::2], edges[1::2]
        firsts.append(starts)
        counts.append(ends - starts)
        ptr.append(ptr[-1] + starts.size)
        k = int(np.argmax(lufs))
        best.append(k)
        best_lufs.append(float(lufs[k]))
    flat = lambda parts: np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)  # noqa: E731
    plan = LoudestPlan(window_blocks=w, cutoff=float(cutoff), ptr=np.asarray(ptr, np.int64), first=flat(firsts),
                       count=flat(counts), best=np.asarray(best, np.int64),
                       best_lufs=np.asarray(best_lufs, np.float64))
    if keep_profiles:
        sizes = [0 if p is None else len(p) for p in profiles]
        kept = [np.asarray(p, np.float32) for p in profiles if p is not None and len(p)]
        plan = dataclasses.replace(plan, pptr=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                                   profiles=np.concatenate(kept) if kept else np.zeros(0, np.float32))
    return plan


# ------------------------------------------------------------------- probes
def probe_layout(frames: int, rate: int, duration: float, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Probe start frames (ascending) and probe length in frames for a file of ``frames``.

    Spacing is ``duration / 2`` (wider only past :data:`_MAX_PROBES` probes), with
    a random phase; each probe is ``2 * duration / n`` seconds, clamped to
    [10 ms, 100 ms], so the probes read at most ``max(2 * duration, n * 10 ms)``.

    >>> starts, length = probe_layout(16_000 * 40, 16_000, 3.0, np.random.default_rng(0))
    >>> len(starts), length
    (27, 1600)
    """
    total = frames / rate
    spacing = max(duration / 2.0, total / _MAX_PROBES)
    n = max(1, int(math.ceil(total / spacing)))
    length = int(round(min(max(2.0 * duration / n, _MIN_PROBE_SEC), _MAX_PROBE_SEC) * rate))
    length = max(1, min(length, frames))
    phase = float(rng.uniform(0.0, spacing))
    starts = np.round((phase + spacing * np.arange(n)) * rate).astype(np.int64)
    starts = np.unique(np.minimum(starts, frames - length))
    return starts, length


def probe_energy(read, starts: np.ndarray, length: int) -> np.ndarray:
    """Mean square of each probe ``read(start, length) -> (n, C)``, read from the last backwards."""
    energy = np.zeros(starts.shape[0], dtype=np.float64)
    for k in range(starts.shape[0] - 1, -1, -1):
        chunk = read(int(starts[k]), length)
        if chunk.size:
            energy[k] = float(np.mean(np.square(chunk, dtype=np.float64)))
    return energy

"""Where the loud passages of a long file are, by a corpus index: the plan behind ``loudest``.

With a corpus index (:class:`LoudestPlan`)
    The index holds each file's loudness profile (K-weighted mean square per
    100 ms block). At start-up the dataset turns every profile into the gated
    loudness of every block-aligned window of ``duration``
    (:func:`audiotree.index.window_loudness`) and keeps, per file, the runs of
    window starts whose profile loudness clears ``lufs_cutoff +
    PROFILE_MARGIN_LU``, with their running totals, and the 400 ms gating-block
    mean squares of the profile. An item draws one of those starts uniformly
    with its own RNG (one RNG call, one binary search), reads that excerpt
    only, and takes its ``lufs`` and ``lufs_windows`` from the profile (the
    gating of one window's few dozen blocks): nothing is metered. The margin
    covers the profile's one bias (filter ringing can make it read a
    near-silent window louder than the meter; on program material the two
    agree within 0.1 LU). When the index's mix differs from the dataset's
    (a mono index, ``mono=False``) the profile does not describe the item, so
    the winner is metered and a draw the meter rejects is redrawn, up to
    ``num_tries``. Files with no window above ``cutoff + margin`` are known
    before anything is read.


Without an index, ``loudest`` searches the file itself: :mod:`audiotree.excerpts.search`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from audiotree.dsp.loudness import ABSOLUTE_GATE_POWER, BLOCK_STEPS, LUFS_OFFSET, gate_few, gated_from_block_power

def _silent_shares(profile: np.ndarray, w: int) -> np.ndarray:
    """Per window of ``w`` blocks (one per start): the share of its blocks under the index's silence level."""
    from audiotree.dsp.quality import SILENCE_LUFS

    silent = (profile < 10.0 ** ((SILENCE_LUFS - LUFS_OFFSET) / 10.0)).astype(np.int64)
    counts = np.cumsum(np.r_[0, silent])
    return (counts[w:] - counts[:-w]) / w


def _window_means(shares, blocks: int, w: int) -> np.ndarray:
    """Per window of ``w`` blocks (one per start): the mean of its blocks' ``shares`` (one per profile block)."""
    s = np.asarray(shares, dtype=np.float64).reshape(-1)
    if s.size != blocks:
        raise ValueError(f"the index's clip_blocks holds {s.size} blocks where the profile has {blocks}; the index "
                         "was edited or damaged. Rebuild it.")
    sums = np.cumsum(np.r_[0.0, s])
    return (sums[w:] - sums[:-w]) / w


__all__ = [
    "EXCERPT_METHODS", "PROFILE_MARGIN_LU", "LoudestPlan", "ProfileRowPlan", "RowPlan", "build_plan", "method_extras",
    "method_name",
]

#: How an item's excerpt was chosen, stored as ``extras["excerpt_method"]``
#: (int8 ``(1,)``, the position in this tuple): ``loudest`` with an index
#: (``"index"``) or by the probe search (``"search"``).
EXCERPT_METHODS = ("start", "random", "search", "index")
#: LU above ``lufs_cutoff`` a window's profile loudness must reach to count as
#: qualifying: 5x the profile's measured error on program material (0.1 LU),
#: so a window the meter would put below the cutoff is (all but) never drawn.
PROFILE_MARGIN_LU = 0.5


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
class RowPlan:
    """Row ``i`` of a :class:`LoudestPlan`: one file's qualifying window starts.

    A view (two references, built per item), read with plain-Python look-ups
    because it runs once per item. ``first``/``count``/``ends`` are the file's
    runs ``[first[k], first[k] + count[k])`` of 100 ms blocks and their running
    total; ``best`` is the block of the loudest window by the profile,
    ``best_lufs`` its profile loudness; ``window_blocks`` the window length in
    blocks.
    """

    __slots__ = ("plan", "i")

    def __init__(self, plan: "LoudestPlan", i: int):
        self.plan, self.i = plan, int(i)

    @property
    def first(self) -> np.ndarray:
        return self.plan.first[self.plan.ptr[self.i]:self.plan.ptr[self.i + 1]]

    @property
    def count(self) -> np.ndarray:
        return self.plan.count[self.plan.ptr[self.i]:self.plan.ptr[self.i + 1]]

    @property
    def ends(self) -> np.ndarray:
        return self.plan.ends[self.plan.ptr[self.i]:self.plan.ptr[self.i + 1]]

    @property
    def best(self) -> int:
        return self.plan.best.item(self.i)

    @property
    def best_lufs(self) -> float:
        return self.plan.best_lufs.item(self.i)

    @property
    def window_blocks(self) -> int:
        return self.plan.window_blocks

    @property
    def qualifies(self) -> bool:
        return self.plan.ptr.item(self.i + 1) > self.plan.ptr.item(self.i)

    def pick(self, rng: np.random.Generator) -> tuple[int, tuple[float, np.ndarray] | None]:
        """A qualifying start block, uniform over all of them (one RNG draw), and :meth:`loudness` there.

        The draw is ``floor(rng.random() * n)`` over the file's ``n``
        qualifying starts, mapped through the runs (a binary search only when
        there are several).
        """
        p, i = self.plan, self.i
        lo, hi = p.ptr.item(i), p.ptr.item(i + 1)
        total = p.ends.item(hi - 1)
        k = min(int(rng.random() * total), total - 1)
        run = lo if hi - lo == 1 else lo + int(p.ends[lo:hi].searchsorted(k, side="right"))
        block = p.first.item(run) + k - (p.ends.item(run) - p.count.item(run))
        if p.start_lufs is None:
            return block, None
        return block, (p.start_lufs.item(p.qptr.item(i) + k), self._windows(block))

    def draw(self, rng: np.random.Generator) -> int:
        """A qualifying start block (the block of :meth:`pick`)."""
        return self.pick(rng)[0]

    def whole(self) -> None:
        """Always ``None``: a whole-corpus plan keeps no reading of a whole short file (it is metered)."""
        return None

    def _windows(self, block: int) -> np.ndarray:
        w, g = self.plan.window_blocks, BLOCK_STEPS
        if w < g:
            return np.zeros(0, np.float32)
        at = self.plan.gptr.item(self.i) + block
        return self.plan.gating[at:at + w - g + 1:g].copy()

    def loudness(self, block: int) -> tuple[float, np.ndarray] | None:
        """Profile loudness of the window at ``block``: (gated LUFS, ungated 0.4 s windows), or ``None``.

        Within 0.1 LU of the meter on windows above -50 LUFS (see
        :mod:`audiotree.index.profile`); ``None`` without the kept readings.
        A qualifying start is looked up; any other block is gated from its
        400 ms blocks.
        """
        p, i = self.plan, self.i
        if p.gating is None:
            return None
        w, g = p.window_blocks, BLOCK_STEPS
        at = p.gptr.item(i) + block
        gating = p.gating[at:min(at + (1 if w < g else w - g + 1), p.gptr.item(i + 1))]
        if not gating.size:
            return None
        first, count = self.first, self.count
        run = int(first.searchsorted(block, side="right")) - 1
        if run >= 0 and block < first.item(run) + count.item(run):
            k = self.ends.item(run) - count.item(run) + block - first.item(run)
            return p.start_lufs.item(p.qptr.item(i) + k), self._windows(block)
        mean_squares = [10 ** ((lufs - LUFS_OFFSET) / 10) if lufs > -math.inf else 0.0 for lufs in gating.tolist()]
        return gate_few(mean_squares), self._windows(block)


@dataclasses.dataclass(frozen=True, eq=False)
class LoudestPlan:
    """Qualifying window starts of every row of an index, as flat arrays (picklable).

    Row ``i``'s runs are ``first[ptr[i]:ptr[i + 1]]`` / ``count[...]`` (in 100 ms
    blocks), ``ends[...]`` their running total within the row; ``best[i]`` is
    ``-1`` when the row has no profile (then ``loudest`` falls back to the probe
    search for it). With the profile's readings kept (row ``i``'s
    ``start_lufs[qptr[i]:qptr[i + 1]]`` and ``gating[gptr[i]:gptr[i + 1]]``,
    see :class:`RowPlan`) an item's ``lufs``
    comes from the profile and nothing is metered.
    """

    window_blocks: int
    cutoff: float
    ptr: np.ndarray
    first: np.ndarray
    count: np.ndarray
    ends: np.ndarray
    best: np.ndarray
    best_lufs: np.ndarray
    start_lufs: np.ndarray | None = None
    qptr: np.ndarray | None = None
    gating: np.ndarray | None = None
    gptr: np.ndarray | None = None

    def row(self, i: int) -> RowPlan | None:
        return None if self.best.item(i) < 0 else RowPlan(self, i)

    def qualifying(self) -> np.ndarray:
        """Rows with a qualifying window, or with no profile (not known to be silent)."""
        return np.flatnonzero((np.diff(self.ptr) > 0) | (self.best < 0))

    def take(self, rows: np.ndarray) -> "LoudestPlan":
        rows = np.asarray(rows, dtype=np.int64)
        ptr, picks = _take_ragged(self.ptr, rows)
        out = dataclasses.replace(self, ptr=ptr, first=self.first[picks], count=self.count[picks],
                                  ends=self.ends[picks], best=self.best[rows], best_lufs=self.best_lufs[rows])
        if self.gating is not None:
            qptr, qpicks = _take_ragged(self.qptr, rows)
            gptr, gpicks = _take_ragged(self.gptr, rows)
            out = dataclasses.replace(out, start_lufs=self.start_lufs[qpicks], qptr=qptr, gating=self.gating[gpicks],
                                      gptr=gptr)
        return out


def _take_ragged(ptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """New offsets and the flat positions of ``rows`` of a ragged array with offsets ``ptr``."""
    lengths = (ptr[rows + 1] - ptr[rows]).astype(np.int64)
    picks = np.concatenate([np.arange(ptr[r], ptr[r + 1]) for r in rows]) if rows.size else np.zeros(0, np.int64)
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), picks.astype(np.int64)


def _gating_lufs(profile: np.ndarray, window_blocks: int) -> np.ndarray:
    """What :meth:`RowPlan.loudness` slices: the loudness of each 400 ms gating block (float32 LUFS).

    For windows shorter than a gating block, the loudness of each window instead.
    """
    p = np.asarray(profile, dtype=np.float64)
    g = BLOCK_STEPS if window_blocks >= BLOCK_STEPS else min(window_blocks, p.size)
    if p.size < g:
        return np.zeros(0, np.float32)
    with np.errstate(divide="ignore"):
        return (LUFS_OFFSET + 10 * np.log10(np.lib.stride_tricks.sliding_window_view(p, g).mean(axis=1))
                ).astype(np.float32)


def build_plan(profiles, *, duration: float, cutoff: float, margin: float = PROFILE_MARGIN_LU,
               keep_profiles: bool = False) -> LoudestPlan:
    """A :class:`LoudestPlan` from per-row profiles (``None`` for a row without one).

    A file shorter than ``duration`` has one window, the whole file. Cost: one
    vectorised :func:`~audiotree.index.window_loudness` per row, once, at
    start-up. ``keep_profiles`` keeps the profile's readings (the loudness of
    every qualifying start and of every 400 ms gating block: at most 8 bytes
    per 100 ms of audio) so items take their ``lufs`` and ``lufs_windows``
    from them, by look-up, instead of metering.

    >>> p = np.r_[np.full(100, 1e-9), np.full(30, 1e-2), np.full(100, 1e-9)]
    >>> plan = build_plan([p, np.full(100, 1e-9), None], duration=3.0, cutoff=-40.0)
    >>> plan.qualifying().tolist(), plan.row(0).best
    ([0, 2], 100)
    """
    from audiotree.index.profile import window_blocks, window_loudness

    w = window_blocks(duration)
    ptr, firsts, counts, best, best_lufs, start_lufs, gating = [0], [], [], [], [], [], []
    for p in profiles:
        n = 0 if p is None else len(p)
        if n == 0:
            ptr.append(ptr[-1])
            best.append(-1)
            best_lufs.append(math.nan)
            start_lufs.append(np.zeros(0, np.float32))
            gating.append(np.zeros(0, np.float32))
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
        if keep_profiles:
            start_lufs.append(lufs[good].astype(np.float32))
            gating.append(_gating_lufs(p, min(w, n)))
    flat = lambda parts: np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)  # noqa: E731
    ptr = np.asarray(ptr, np.int64)
    count = flat(counts)
    # Running total of the run lengths within each row (a row's draw is a binary search in it).
    ends = np.cumsum(count) - np.repeat(np.r_[0, np.cumsum(count)][ptr[:-1]], np.diff(ptr))
    plan = LoudestPlan(window_blocks=w, cutoff=float(cutoff), ptr=ptr, first=flat(firsts), count=count,
                       ends=ends.astype(np.int64), best=np.asarray(best, np.int64),
                       best_lufs=np.asarray(best_lufs, np.float64))
    if keep_profiles:
        joined = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.float32)  # noqa: E731
        offsets = lambda parts: np.r_[0, np.cumsum([x.size for x in parts])].astype(np.int64)  # noqa: E731
        plan = dataclasses.replace(plan, start_lufs=joined(start_lufs), qptr=offsets(start_lufs),
                                   gating=joined(gating), gptr=offsets(gating))
    return plan


def _sliding_max(x: np.ndarray, k: int) -> np.ndarray:
    """``max(x[i:i + k])`` for every ``i``: maxima over spans doubling in length, then two spans per window."""
    span, level = 1, x
    while span * 2 <= k:
        level = np.maximum(level[:-span], level[span:])
        span *= 2
    return np.maximum(level[:x.size - k + 1], level[k - span:k - span + x.size - k + 1])


def _sliding_mean(x: np.ndarray, k: int) -> np.ndarray:
    """``mean(x[i:i + k])`` for every ``i``, summed left to right exactly as ``sliding_window_view(x, k).mean(1)``."""
    total = x[:x.size - k + 1].copy()
    for j in range(1, k):
        total += x[j:x.size - k + 1 + j]
    return total / k


class ProfileRowPlan:
    """One file's ``loudest`` plan, computed when an item reads it, from that file's profile alone.

    The same runs of qualifying starts, the same draw and the same readings as
    row ``i`` of :func:`build_plan` over the whole corpus, at a cost that does
    not grow with the corpus and barely with the file: a window's gated
    loudness lies between the loudness of its plain mean square (gating only
    drops blocks below the mean) and that of its loudest 400 ms block, so
    only windows whose bounds straddle ``cutoff + margin`` are gated. That is
    ``O(blocks)`` for a file with a clear loud/quiet structure: about 1 ms for a
    3-hour file, where gating every window costs ~40 ms. Readings of the drawn
    window (``lufs``, ``lufs_windows``) are gated for that window only.

    >>> p = np.r_[np.full(100, 1e-9), np.full(30, 1e-2), np.full(100, 1e-9)]
    >>> row = ProfileRowPlan(p, duration=3.0, cutoff=-40.0)
    >>> row.qualifies, row.first.tolist(), row.best  # windows from block 71 on reach the loud passage
    (True, [71], 100)
    """

    def __init__(self, profile, *, duration: float, cutoff: float, margin: float = PROFILE_MARGIN_LU,
                 keep_profiles: bool = False, max_silence_share: float | None = None,
                 max_clip_share: float | None = None, clip_shares=None):
        from audiotree.index.profile import window_blocks

        p = np.asarray(profile, dtype=np.float64).reshape(-1)
        if p.size == 0:
            raise ValueError("a per-item plan needs a profile of at least one block.")
        self.profile = p
        self.window_blocks = w = min(window_blocks(duration), p.size)
        self.cutoff = float(cutoff)
        self.keep_profiles = bool(keep_profiles)
        self.threshold = threshold = self.cutoff + margin
        g = BLOCK_STEPS if w >= BLOCK_STEPS else w
        # Mean square of each gating block (each window's only block when w < 4), and, per window, the
        # bounds of its gated mean square: its plain mean (below) and its loudest gating block (above).
        self._gating_ms = gating = _sliding_mean(p, g)
        per_window = w - g + 1
        csum = np.cumsum(np.r_[0.0, gating])
        mean = (csum[per_window:] - csum[:-per_window]) / per_window
        # The running sum's worst-case rounding error, so that "surely above" is never wrong.
        error = 4e-16 * gating.size * float(csum[-1]) / per_window
        upper = _sliding_max(gating, per_window)
        level = 10 ** ((threshold - LUFS_OFFSET) / 10)
        slack = 1 + 1e-6
        sure = mean - error > max(level, ABSOLUTE_GATE_POWER) * slack
        maybe = np.flatnonzero(~sure & (upper * slack > level))
        self._mean, self._upper, self._level = mean, upper, level
        self._exact: dict[int, float] = {}
        good = sure
        if maybe.size:
            exact = self._gate(maybe)
            good = sure.copy()
            good[maybe] = exact > threshold
        if max_silence_share is not None:  # and not mostly silent (ExcerptConfig.max_silence_share)
            good = good & (_silent_shares(p, w) <= max_silence_share)
        if max_clip_share is not None:  # and not clipped (ExcerptConfig.max_clip_share)
            good = good & (_window_means(clip_shares, p.size, w) <= max_clip_share)
        edges = np.flatnonzero(np.diff(np.r_[0, good.astype(np.int8), 0]))
        self.first = edges[0::2].astype(np.int64)
        self.count = (edges[1::2] - edges[0::2]).astype(np.int64)
        self.ends = np.cumsum(self.count)
        self._best: int | None = None

    def _gate(self, starts: np.ndarray) -> np.ndarray:
        """Exact gated loudness (float64 LUFS) of the windows at ``starts`` (remembered)."""
        per_window = self.window_blocks - (BLOCK_STEPS if self.window_blocks >= BLOCK_STEPS
                                           else self.window_blocks) + 1
        view = np.lib.stride_tricks.sliding_window_view(self._gating_ms, per_window)
        out = np.empty(starts.size, dtype=np.float64)
        step = max(1, (1 << 22) // per_window)
        for at in range(0, starts.size, step):
            out[at:at + step] = gated_from_block_power(view[starts[at:at + step]])
        self._exact.update(zip(starts.tolist(), out.tolist()))
        return out

    def _lufs(self, block: int) -> float:
        value = self._exact.get(block)
        return value if value is not None else float(self._gate(np.array([block]))[0])

    @property
    def qualifies(self) -> bool:
        return self.first.size > 0

    @property
    def best(self) -> int:
        """The start block of the loudest window by the profile (the first, on ties)."""
        if self._best is None:
            # Only a window whose upper bound reaches the best lower bound can be the loudest.
            # (That holds where the best lower bound is above the absolute gate; below it, gate them all.)
            floor = float(self._mean.max()) * (1 - 1e-6)
            floor = floor if floor > ABSOLUTE_GATE_POWER * (1 + 1e-6) else -np.inf
            candidates = np.flatnonzero(self._upper * (1 + 1e-6) >= floor)
            exact = self._gate(candidates)
            self._best = int(candidates[int(np.argmax(exact))]) if candidates.size else 0
        return self._best

    @property
    def best_lufs(self) -> float:
        return self._lufs(self.best)

    def pick(self, rng: np.random.Generator) -> tuple[int, tuple[float, np.ndarray] | None]:
        """A qualifying start block, uniform over all of them (one RNG draw), and :meth:`loudness` there."""
        total = int(self.ends[-1])
        k = min(int(rng.random() * total), total - 1)
        run = 0 if self.first.size == 1 else int(self.ends.searchsorted(k, side="right"))
        block = int(self.first[run] + k - (self.ends[run] - self.count[run]))
        return block, (self.loudness(block) if self.keep_profiles else None)

    def draw(self, rng: np.random.Generator) -> int:
        return self.pick(rng)[0]

    def whole(self) -> tuple[float, np.ndarray] | None:
        """:meth:`loudness` of the whole file when its one window is the whole profile (a file no longer than
        the excerpt) and the profile describes the item's mix; else ``None``.

        BS.1770 gates complete 400 ms blocks on a 100 ms grid, so the meter of
        such a file drops the same trailing partial block as its profile.
        """
        if not self.keep_profiles or self.window_blocks != self.profile.size:
            return None
        return self.loudness(0)

    def loudness(self, block: int) -> tuple[float, np.ndarray]:
        """Profile loudness of the window at ``block``: (gated LUFS as float32, its 400 ms windows' LUFS)."""
        w = self.window_blocks
        lufs = float(np.float32(self._lufs(int(block))))
        if w < BLOCK_STEPS:
            return lufs, np.zeros(0, np.float32)
        quads = self._gating_ms[block:block + w - BLOCK_STEPS + 1:BLOCK_STEPS]
        with np.errstate(divide="ignore"):
            return lufs, (LUFS_OFFSET + 10 * np.log10(quads)).astype(np.float32)

"""Group weights that change along the global stream: :class:`WeightSchedule`.

A schedule gives the weights of a mix at every item ``i`` of the *global
stream* (item ``i`` of the unsharded dataset, the index a checkpoint counts):

* points: ``WeightSchedule({0: {"a": 0.9, "b": 0.1}, 1000: {"a": 0.1, "b": 0.9}})``.
  Each point's weights are made proportions (divided by their sum), then
  ``interpolation="linear"`` moves the proportions in a straight line from one
  key to the next and ``"step"`` holds each point's until the next key. Before
  the first key the first point holds, after the last key the last one.
* a callable ``f(i) -> {group: weight}``, pure and picklable (a module-level
  function or a ``functools.partial`` of one; workers may be spawned).

``schedule.then(step, other)`` is the schedule to resume a run with: items
before ``step`` keep this schedule's weights, items from ``step`` on follow
``other`` (whose keys also count items of the global stream from 0).

How a mix follows a schedule (:mod:`audiotree.sources.mixing`): per *block* of
``block_size`` consecutive items. Block ``b`` holds each group's mean share of
the schedule over the block's items, rounded to whole items with the rounding
error carried into the next block (so the running count of every group stays
within about one item of the schedule's running sum), and its labels are
shuffled with a generator seeded by ``(seed, b)``. A group with weight 0 over
a whole block gets none of its items. A callable is evaluated once per block,
at the block's middle item. ``block_size`` defaults to an eighth of the
shortest distance between keys (a power of two from 16 to 4096) and 256 for a
callable, raised to at least the square of the group count (and 4 per group).

Cost: the running counts of the blocks up to the last key are computed once
per process on first use (vectorised block means, then a short Python step per
block: about 0.03 s for 25,000 blocks), then looked up; past the last key the
weights are constant and the counts have a closed form. Reading an item costs
what it costs in a fixed mix (measured: 2.3 against 2.0 µs per item, audio
aside). A callable has no last key and is called once per block: reaching
block ``b`` for the first time costs ``b`` calls (about 30 µs each; a first
read at item 10^8 with 256-item blocks takes 10-20 s, once per process and
worker), so prefer points, or a larger ``block_size``, for long runs.

>>> s = WeightSchedule({0: {"a": 0.9, "b": 0.1}, 1000: {"a": 0.1, "b": 0.9}})
>>> s(0), s(500), s(2000)
({'a': 0.9, 'b': 0.1}, {'a': 0.5, 'b': 0.5}, {'a': 0.1, 'b': 0.9})
>>> s.block_size
64
>>> later = s.then(437, WeightSchedule({0: {"a": 1, "b": 1}}))  # switches at the block boundary 448
>>> later(447) == s(447), later(448)
(True, {'a': 0.5, 'b': 0.5})
"""

from __future__ import annotations

import bisect
import math
import threading
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from audiotree.process_local import FromObject, ProcessLocal
from audiotree.validation import is_int, is_real

__all__ = ["WeightSchedule", "ScheduledCounts", "as_schedule"]

_INTERPOLATION = ("linear", "step")
_CALLABLE_BLOCK = 256
_MAX_BLOCK = 4096
_MIN_BLOCK = 16


def _proportions(weights: Any, names: Sequence[str] | None, where: str) -> tuple[list[str], np.ndarray]:
    """``weights`` ({group: weight}) checked and divided by their sum, in the order of ``names``."""
    if not isinstance(weights, Mapping) or not weights:
        raise ValueError(f"{where} must be a non-empty {{group: weight}} mapping, got {weights!r}.")
    keys = list(weights)
    if names is not None and set(keys) != set(names):
        missing, extra = sorted(set(names) - set(keys)), sorted(set(keys) - set(names))
        raise ValueError(f"{where} names groups {sorted(keys)}, but the schedule's groups are {sorted(names)} "
                         f"(missing {missing}, unknown {extra}); every point must weigh the same groups.")
    order = list(names) if names is not None else keys
    for name in order:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: group names must be non-empty strings, got {name!r}.")
        w = weights[name]
        if not is_real(w) or not math.isfinite(w) or w < 0:
            raise ValueError(f"{where}: the weight of group {name!r} must be a finite number >= 0, got {w!r}.")
    values = np.asarray([float(weights[n]) for n in order], dtype=np.float64)
    total = float(values.sum())
    if total <= 0:
        raise ValueError(f"{where}: the weights sum to 0; give at least one group a weight > 0.")
    return order, values / total


class _Points:
    """Proportions at keys, linear or step in between (one part of a schedule)."""

    def __init__(self, keys: np.ndarray, props: np.ndarray, interpolation: str):
        self.keys, self.props, self.interpolation = keys, props, interpolation
        self._key_list = keys.tolist()  # for bisect: made once, not per lookup

    def at(self, x: float) -> np.ndarray:
        keys = self.keys
        j = bisect.bisect_right(self._key_list, x) - 1
        if j < 0:
            return self.props[0]
        if j >= len(keys) - 1 or self.interpolation == "step":
            return self.props[j]
        t = (x - keys[j]) / (keys[j + 1] - keys[j])
        return self.props[j] + t * (self.props[j + 1] - self.props[j])

    def at_many(self, x: np.ndarray) -> np.ndarray:
        """:meth:`at` for many ``x`` at once: ``(len(x), groups)``."""
        last = len(self.keys) - 1
        j = np.searchsorted(self.keys, x, side="right") - 1
        below = j < 0
        j = np.clip(j, 0, last)
        out = self.props[j]
        if self.interpolation == "linear" and last > 0:
            inside = (~below) & (j < last)
            k = j[inside]
            t = (x[inside] - self.keys[k]) / (self.keys[k + 1] - self.keys[k])
            out[inside] = self.props[k] + t[:, None] * (self.props[k + 1] - self.props[k])
        return out

    def block_means(self, starts: np.ndarray, size: int) -> np.ndarray:
        """Mean proportions over ``starts[i] .. starts[i] + size - 1`` for every ``i``."""
        out = self.at_many(starts + (size - 1) / 2)
        first_key_after = np.searchsorted(self.keys, starts, side="right")
        split = np.flatnonzero((first_key_after < len(self.keys))
                               & (self.keys[np.minimum(first_key_after, len(self.keys) - 1)] < starts + size))
        for i in split:  # a key inside the block: sum its pieces
            out[i] = self.total(int(starts[i]), int(starts[i]) + size) / size
        return out

    def total(self, lo: int, hi: int) -> np.ndarray:
        """Sum of the proportions of items ``lo .. hi - 1`` (exact: linear pieces sum to count x midpoint)."""
        inside = self.keys[np.searchsorted(self.keys, lo, "right"):np.searchsorted(self.keys, hi, "left")]
        cuts = [lo] + [int(k) for k in inside] + [hi]
        out = np.zeros(self.props.shape[1])
        for a, b in zip(cuts[:-1], cuts[1:]):
            out += (b - a) * self.at((a + b - 1) / 2)
        return out


class _Function:
    """A callable ``f(i) -> {group: weight}``, evaluated at the middle item of each span."""

    def __init__(self, fn: Callable[[int], Mapping[str, float]], names: list[str]):
        self.fn, self.names = fn, names

    def at(self, x: float) -> np.ndarray:
        i = int(x)
        return _proportions(self.fn(i), self.names, f"the schedule's weights at item {i}")[1]

    def total(self, lo: int, hi: int) -> np.ndarray:
        return (hi - lo) * self.at((lo + hi - 1) // 2)

    def block_means(self, starts: np.ndarray, size: int) -> np.ndarray:
        return np.stack([self.at(int(lo) + (size - 1) // 2) for lo in starts])


class WeightSchedule:
    """Mix weights as a function of the global item count; see the module docstring.

    Args:
      points: ``{item: {group: weight}}`` with int keys >= 0 in increasing
        order, every point naming the same groups, weights >= 0 with a
        positive sum; or a picklable callable ``f(item) -> {group: weight}``.
      interpolation: ``"linear"`` (default) or ``"step"``, between points.
      block_size: items per block of the mix (see the module docstring).

    Raises:
      ValueError / TypeError: a bad point, naming its key and group.
    """

    def __init__(self, points: Mapping[int, Mapping[str, float]] | Callable[[int], Mapping[str, float]],
                 interpolation: str = "linear", *, block_size: int | None = None):
        if interpolation not in _INTERPOLATION:
            raise ValueError(f"interpolation must be one of {_INTERPOLATION}, got {interpolation!r}.")
        if block_size is not None and (not is_int(block_size) or block_size < 1):
            raise ValueError(f"block_size must be a positive int, got {block_size!r}.")
        self.interpolation = interpolation
        if callable(points) and not isinstance(points, Mapping):
            names, _ = _proportions(points(0), None, "the schedule's weights at item 0")
            part: Any = _Function(points, names)
            default_block = _CALLABLE_BLOCK
        else:
            if not isinstance(points, Mapping) or not points:
                raise TypeError("WeightSchedule takes {item: {group: weight}} (non-empty) or a callable "
                                f"item -> {{group: weight}}, got {points!r}.")
            keys = list(points)
            for previous, key in zip([None] + keys[:-1], keys):
                if not is_int(key) or key < 0:
                    raise ValueError(f"Schedule keys count items of the global stream: ints >= 0, got {key!r}.")
                if previous is not None and key <= previous:
                    raise ValueError(f"Schedule keys must increase: {key} comes after {previous}; "
                                     "list the points in item order.")
            names, first = _proportions(points[keys[0]], None, f"the schedule's point {keys[0]}")
            props = [first] + [_proportions(points[k], names, f"the schedule's point {k}")[1] for k in keys[1:]]
            part = _Points(np.asarray(keys, dtype=np.int64), np.stack(props), interpolation)
            gaps = np.diff(part.keys)
            default_block = _block_for(int(gaps.min())) if gaps.size else _MAX_BLOCK
        self.names: tuple[str, ...] = tuple(names)
        least = max(len(names) ** 2, 4 * len(names))
        if block_size is not None and block_size < least:
            raise ValueError(f"block_size={block_size} is too small for {len(names)} groups; use at least {least}.")
        while default_block < least:
            default_block *= 2
        self.block_size = int(block_size) if block_size is not None else default_block
        self._parts: list[tuple[int, Any]] = [(0, part)]

    # ------------------------------------------------------------ values
    def _part_index(self, i: int) -> int:
        return bisect.bisect_right([start for start, _ in self._parts], i) - 1

    def proportions(self, index: int) -> np.ndarray:
        """The proportions at item ``index``, in the order of :attr:`names`."""
        return self._parts[self._part_index(int(index))][1].at(int(index))

    def __call__(self, index: int) -> dict[str, float]:
        """``{group: proportion}`` at item ``index`` of the global stream (they sum to 1)."""
        return {n: round(float(p), 12) for n, p in zip(self.names, self.proportions(index))}

    def mean(self, start: int, stop: int) -> np.ndarray:
        """Mean proportions over items ``start .. stop - 1``, in the order of :attr:`names`."""
        start, stop = int(start), int(stop)
        if stop <= start:
            raise ValueError(f"mean needs start < stop, got {start}, {stop}.")
        total = np.zeros(len(self.names))
        bounds = [s for s, _ in self._parts] + [None]
        for (first, part), end in zip(self._parts, bounds[1:]):
            lo, hi = max(start, first), stop if end is None else min(stop, end)
            if lo < hi:
                total += part.total(lo, hi)
        return total / (stop - start)

    def block_means(self, start: int, size: int, count: int) -> np.ndarray:
        """Mean proportions over ``count`` consecutive blocks of ``size`` items from ``start``: ``(count, groups)``."""
        starts = int(start) + int(size) * np.arange(int(count), dtype=np.int64)
        firsts = np.asarray([s for s, _ in self._parts], dtype=np.int64)
        lo = np.searchsorted(firsts, starts, side="right") - 1
        hi = np.searchsorted(firsts, starts + size - 1, side="right") - 1
        out = np.empty((starts.size, len(self.names)))
        for j, (_, part) in enumerate(self._parts):
            whole = (lo == j) & (hi == j)
            if whole.any():
                out[whole] = part.block_means(starts[whole], int(size))
        for i in np.flatnonzero(lo != hi):  # a switch between parts inside the block
            out[i] = self.mean(int(starts[i]), int(starts[i]) + size)
        return out

    @property
    def horizon(self) -> int | None:
        """The item from which the weights stay constant (``None``: a callable decides to the end)."""
        start, part = self._parts[-1]
        if isinstance(part, _Function):
            return None
        return max(start, int(part.keys[-1]))

    def then(self, step: int, schedule: "WeightSchedule | Mapping | Callable") -> "WeightSchedule":
        """This schedule before item ``step``, ``schedule`` from ``step`` on (its keys count from item 0).

        Resuming a checkpoint with the returned schedule serves the same items
        before ``step``. In a mix, the new weights take effect from the first
        block boundary at or after ``step`` (blocks of this schedule's
        ``block_size``), so a block is never split between two schedules.
        """
        if not is_int(step) or step < 0:
            raise ValueError(f"then() needs a step >= 0 (an item of the global stream), got {step!r}.")
        other = schedule if isinstance(schedule, WeightSchedule) else WeightSchedule(schedule)
        if set(other.names) != set(self.names):
            raise ValueError(f"then() switches between schedules of the same groups: {sorted(self.names)} "
                             f"and {sorted(other.names)}.")
        step = -(-int(step) // self.block_size) * self.block_size
        out = object.__new__(WeightSchedule)
        out.interpolation, out.names, out.block_size = self.interpolation, self.names, self.block_size
        out._parts = [(s, p) for s, p in self._parts if s < step]
        reorder = [other.names.index(n) for n in self.names]
        for s, part in other._parts:  # pylint: disable=protected-access
            part = _reordered(part, reorder, list(self.names))
            if s <= step:
                out._parts = [(x, p) for x, p in out._parts if x < step] + [(step, part)]
            else:
                out._parts.append((s, part))
        return out

    def __repr__(self) -> str:
        kinds = ", ".join(f"from {s}: {'callable' if isinstance(p, _Function) else p.interpolation}"
                          for s, p in self._parts)
        return f"WeightSchedule(groups={list(self.names)}, block_size={self.block_size}, {kinds})"


def _reordered(part: Any, reorder: list[int], names: list[str]) -> Any:
    if isinstance(part, _Function):
        return _Function(part.fn, names)
    return _Points(part.keys, part.props[:, reorder], part.interpolation)


def _block_for(gap: int) -> int:
    """A power of two near ``gap / 8``, within [16, 4096]."""
    target = max(_MIN_BLOCK, min(_MAX_BLOCK, gap // 8))
    return 1 << (int(target).bit_length() - 1)


def as_schedule(weights: Any) -> WeightSchedule | None:
    """``weights`` as a :class:`WeightSchedule` when it is one or a callable; ``None`` for a plain mapping."""
    if isinstance(weights, WeightSchedule):
        return weights
    if callable(weights) and not isinstance(weights, Mapping):
        return WeightSchedule(weights)
    return None


class ScheduledCounts(ProcessLocal):
    """Items of each group among the first ``b`` blocks of a scheduled mix (``at(b)``), a pure function of ``b``.

    ``names`` is the mix's group order. Blocks before the schedule's horizon
    are counted once per process and cached; past it, constant weights give a
    closed form (floors, the largest group taking the remainder, as for a
    constant mix).
    """

    # The blocks this process counted: a new process starts again from block 0 (all zeros).
    process_local = {
        "_lock": threading.Lock,
        "_prefix": FromObject(lambda self: np.zeros((1, len(self._order)), dtype=np.int64)),
        "_rows": lambda: 1,
        "_targets": FromObject(lambda self: [0.0] * len(self._order)),
    }

    def __init__(self, schedule: WeightSchedule, names: Sequence[str], block_size: int):
        if set(schedule.names) != set(names):
            raise ValueError(f"The schedule weighs groups {sorted(schedule.names)}, but the mix has groups "
                             f"{sorted(names)}; a schedule names every group of the mix.")
        self.schedule = schedule
        self.block = int(block_size)
        self._order = [schedule.names.index(n) for n in names]
        horizon = schedule.horizon
        self.horizon_block = None if horizon is None else -(-horizon // self.block)
        self._prefix = np.zeros((1, len(names)), dtype=np.int64)  # rows 0 .. _rows - 1 are counted
        self._rows = 1
        self._targets = [0.0] * len(names)
        self._lock = threading.Lock()
        if self.horizon_block is not None:
            final = schedule.proportions(horizon)[self._order]
            self.final = final
            self._largest = int(np.argmax(final))

    def _extend(self, block: int) -> None:
        """Counts blocks up to ``block``: each takes its mean share, rounded, the error carried on."""
        size, groups = self.block, len(self._targets)
        while self._rows <= block:
            first = self._rows - 1
            count = min(block + 1 - first, 1 << 14)
            means = self.schedule.block_means(first * size, size, count)[:, self._order].tolist()
            targets, done = self._targets, self._prefix[first].tolist()
            rows = []
            for mean in means:
                want = []
                for g in range(groups):
                    targets[g] += mean[g] * size
                    want.append(max(targets[g] - done[g], 0.0) if mean[g] > 0 else 0.0)
                total = sum(want)
                if total <= 0:
                    want, total = [m * size for m in mean], size * sum(mean)
                want = [w * (size / total) for w in want]
                counts = [math.floor(w) for w in want]
                short = size - sum(counts)
                if short > 0:
                    for g in sorted(range(groups), key=lambda g: counts[g] - want[g])[:short]:
                        counts[g] += 1
                done = [d + c for d, c in zip(done, counts)]
                rows.append(done)
            if self._rows + len(rows) > len(self._prefix):  # grow geometrically: appending stays O(1) per block
                grown = np.zeros((max(2 * len(self._prefix), self._rows + len(rows)), groups), dtype=np.int64)
                grown[: self._rows] = self._prefix[: self._rows]
                self._prefix = grown
            self._prefix[self._rows: self._rows + len(rows)] = rows
            self._rows += len(rows)

    def at(self, block: int) -> np.ndarray:
        """Items of each group among the first ``block * block_size`` positions."""
        block = int(block)
        if self.horizon_block is None or block <= self.horizon_block:
            if block >= self._rows:
                with self._lock:
                    self._extend(block)
            return self._prefix[block].copy()
        base = self.at(self.horizon_block)
        n = (block - self.horizon_block) * self.block
        counts = np.floor(n * self.final).astype(np.int64)
        counts[self._largest] += n - int(counts.sum())
        return base + counts

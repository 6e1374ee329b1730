"""Read-ahead along the known order: a dataset step that plans the byte ranges of a process's next items.

A process reads its items in an order with a shape: Grain's workers read every
W-th index, batches read runs of B, a plain loop reads 0, 1, 2, ... Every item
is a pure function of (seed, index), so once the shape is seen the next items
are known, and so are their reads. :class:`ReadAheadMapDataset` sits on top of
a builder's dataset. Each ``ds[i]``:

1. notes ``i`` and finds the order's shape (:class:`OrderShape`: the indices
   seen, sorted, repeat with a period ``p`` and a step ``D``: ``x[m + p] = x[m] + D``);
2. plans the next ``ReadAhead.items`` indices it has not planned: the dataset's
   own routing (epoch orders, mixes, Grain's per-index generators) runs for
   index ``j`` inside :func:`planning`, and the loader that would read stops
   there and raises :class:`PlannedReads` with the ranges it would read
   (:mod:`audiotree.sources.indexed`); the process's
   :class:`~audiotree.io.read_ahead.RangeStore` fetches them, many in flight;
3. reads item ``i`` as always: the byte layer takes what the store holds.

The item is the same with or without this step (the step changes where bytes
come from, never which); an order without a shape (a random sampler) plans
nothing, and an item no plan foresaw reads as today.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import threading
from typing import Any, Sequence

import grain
import numpy as np

from audiotree.io.read_ahead import PlannedRange, ReadAhead, process_store
from audiotree.process_local import ProcessLocal

__all__ = ["ReadAheadMapDataset", "OrderShape", "PlannedReads", "planning", "is_planning"]

_PLANNING: contextvars.ContextVar[bool] = contextvars.ContextVar("audiotree_planning", default=False)


class PlannedReads(Exception):
    """Raised by a loader inside :func:`planning` instead of reading: ``ranges`` are what it would read (empty:
    nothing can be planned for this item, e.g. a local file or ``loudest`` without an index)."""

    def __init__(self, ranges: Sequence[PlannedRange]):
        super().__init__(len(ranges))
        self.ranges = list(ranges)


@contextlib.contextmanager
def planning():
    """Within this block, loaders raise :class:`PlannedReads` instead of reading."""
    token = _PLANNING.set(True)
    try:
        yield
    finally:
        _PLANNING.reset(token)


def is_planning() -> bool:
    """Whether the current item is being planned, not read (see :func:`planning`)."""
    return _PLANNING.get()


class OrderShape:
    """The shape of the order a process reads in, from the indices it has read, and the indices that come next.

    >>> shape = OrderShape(span=8)
    >>> for i in (1, 5, 9, 13): shape.note(i)
    >>> shape.upcoming(3)
    [17, 21, 25]
    >>> shape = OrderShape(span=8)
    >>> for i in (0, 1, 2, 3, 8, 9, 10, 11): shape.note(i)   # runs of 4, every 8 (batches of 4, 2 workers)
    >>> shape.upcoming(6)
    [16, 17, 18, 19, 24, 25]
    """

    def __init__(self, span: int = 64, max_period: int = 64) -> None:
        self.span, self.max_period = int(span), int(max_period)
        self.seen: list[int] = []  # the last indices read, sorted, at most 2 * span + max_period

    @property
    def last(self) -> int:
        """The largest index seen (-1 before any)."""
        return self.seen[-1] if self.seen else -1

    def note(self, index: int) -> None:
        pos = bisect.bisect_left(self.seen, index)
        if pos < len(self.seen) and self.seen[pos] == index:
            return
        self.seen.insert(pos, index)
        keep = 2 * self.span + 2 * self.max_period
        if len(self.seen) > keep:
            del self.seen[:len(self.seen) - keep]

    def has(self, index: int) -> bool:
        """Whether ``index`` is among the indices kept (read, or being read)."""
        pos = bisect.bisect_left(self.seen, index)
        return pos < len(self.seen) and self.seen[pos] == index

    def period(self, lag: int = 0) -> tuple[int, int] | None:
        """``(p, D)``, the smallest ``p`` with ``x[m + p] = x[m] + D`` over the indices kept but the last ``lag``
        (at least ``2p`` of them, and 3).

        ``lag``: how many of the latest indices may still have holes between them (reader threads bring items a
        little out of order). An order that changed its shape (a new epoch's start, a resume) has none until the
        older half of what was kept, which is then dropped, no longer spans the change.
        """
        x = self.seen[:len(self.seen) - lag] if lag else self.seen
        n = len(x)
        kept = None
        for p in range(1, min(self.max_period, n // 2) + 1 if n >= 3 else 1):
            step = x[-1] - x[-1 - p]
            if step <= 0 or x[-2] - x[-2 - p] != step:  # (most periods fail here, before the whole check)
                continue
            if kept is None:
                kept = np.asarray(x, dtype=np.int64)
            if (kept[p:] - kept[:-p] == step).all():
                return p, int(step)
        if n >= 32:
            del self.seen[:n // 2]
        return None

    def upcoming(self, count: int, lag: int = 0) -> list[int]:
        """The ``count`` indices after the last ``lag`` seen ones by the order's shape (``[]`` when it has none)."""
        shape = self.period(lag)
        if shape is None:
            return []
        p, step = shape
        last = self.seen[len(self.seen) - lag - p:len(self.seen) - lag]
        return [last[k % p] + step * (1 + k // p) for k in range(count + lag)]


class _Ahead(ProcessLocal):
    """What one process knows of its order and has planned (rebuilt empty in every worker)."""

    process_local = {"_lock": threading.Lock, "shape": OrderShape, "planned": set, "useless": int,
                     "store": lambda: None, "reading": dict}

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.store = None  # the store the plans went to (a forked child has a new one: plan again)
        self.shape = OrderShape()
        self.planned: set[int] = set()
        self.useless = 0  # plans in a row that found nothing to fetch (a local corpus): then stop planning
        self.reading: dict[int, int] = {}  # items being read now (by reader threads), with their count


#: After this many items in a row whose plans hold nothing remote, a process stops planning.
_GIVE_UP = 64


class ReadAheadMapDataset(grain.MapDataset):
    """``parent`` with its remote reads planned ``options.items`` items ahead (see the module text).

    ``ds[i]`` is ``parent[i]``: the same item, read from bytes fetched ahead where the plan foresaw them.
    ``group``: the next items are planned ``group`` at a time, in one plan, so that ranges of neighbouring items
    (rows of a render's part) are merged into one request (default 1: each item as soon as it is known).
    """

    def __init__(self, parent: grain.MapDataset, options: ReadAhead, *, group: int = 1):
        super().__init__(parent)
        self.options = options
        self.group = max(1, min(int(group), options.items or 1))
        self._ahead = _Ahead()

    def __len__(self) -> int:
        return len(self._parent)

    def __str__(self) -> str:
        return f"ReadAheadMapDataset(items={self.options.items})"

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        ahead = self._ahead
        if is_planning() or ahead.useless >= _GIVE_UP:  # (a local corpus: nothing to plan, no bookkeeping)
            return self._parent[index]
        index = int(index)
        with ahead._lock:
            ahead.reading[index] = ahead.reading.get(index, 0) + 1
        try:
            self._plan_after(index)
            return self._parent[index]
        finally:
            with ahead._lock:
                left = ahead.reading.pop(index) - 1
                if left:
                    ahead.reading[index] = left
                # Reader threads take items in order: every item below the lowest one being read is done.
                done_below = min(ahead.reading) if ahead.reading else ahead.shape.last + 1
            if ahead.store is not None:
                ahead.store.advance(done_below)

    def _plan_after(self, index: int) -> None:
        ahead = self._ahead
        if ahead.useless >= _GIVE_UP:
            return
        store = process_store(self.options)
        with ahead._lock:
            if ahead.store is not store:
                ahead.store, ahead.planned = store, set()
            ahead.shape.note(index)
            # The items being read now may leave holes among the latest indices: the shape is read below them.
            lag = min(len(ahead.reading), len(ahead.shape.seen) // 2)
            # Items noted already are being read or were read (by their own requests where no plan held them):
            # a plan for them now would fetch their bytes a second time.
            upcoming = [j for j in ahead.shape.upcoming(self.options.items, lag)
                        if j not in ahead.planned and not ahead.shape.has(j)]
            if len(upcoming) < self.group:
                return
            done_below = min(ahead.reading) if ahead.reading else index
            ahead.planned.difference_update([j for j in ahead.planned if j < done_below])
            room = store.room()
            grouped: list[PlannedRange] = []
            members = 0
            for j in upcoming:
                if room <= 0:
                    break
                if j >= len(self._parent):
                    break
                ranges = self._ranges_of(j)
                ahead.planned.add(j)
                if not ranges:
                    ahead.useless += 1
                    continue
                ahead.useless = 0
                grouped.extend(ranges)
                members += 1
                room -= sum(r.stop - r.start for r in ranges)
                if members >= self.group:
                    store.plan(grouped, j)  # (a block of several items is needed until the last of them)
                    grouped, members = [], 0
            if grouped:
                store.plan(grouped, j)

    def _ranges_of(self, j: int) -> list[PlannedRange]:
        with planning():
            try:
                self._parent[j]
            except PlannedReads as planned:
                return planned.ranges
            except Exception:  # a plan is only a guess: the item's own read reports its faults
                return []
        return []

"""Byte ranges fetched before they are read: the per-process store of the read-ahead along the known item order.

Why: every item is a pure function of (seed, index), so a process knows which
objects and byte ranges its next items will read. Fetched one item at a time,
a bucket's 20-100 ms per request is paid several times per item, in series;
planned ahead, the requests of many future items are in flight together and
the item finds its bytes already here.

What: :class:`RangeStore` holds blocks ``[start, stop)`` of remote objects,
each fetched by one checked ranged GET (:func:`audiotree.io.ranged_get.fetch_range`,
on the backend's own async client, on fsspec's IO loop: no thread per request),
at most ``max_in_flight`` at a time and, when asked, within a request budget.
:meth:`RangeStore.plan` takes the ranges of a future item (:class:`PlannedRange`),
merges ranges of one object that are at most ``merge_gap`` apart and leaves out
what a block already holds. :meth:`RangeStore.take` is what the byte layer asks
before it makes a request of its own (:func:`audiotree.io.ranged_get.get_range`):
bytes a block holds (waiting for it if it is still in flight) or ``None``.

Eviction is by next use, which the order gives exactly: each block knows the
item that will read it next. Once the store holds half its ``cache_limit``, the
blocks the process has read past (no later item planned on them) go; until
then they stay, so an object's header and tail serve its later items. At the
limit nothing further is planned until read blocks make room.

What stays true: a block is bytes a checked GET returned for exactly its range,
so the store can only save requests, never change what is read. A failed
read-ahead request is dropped (the item's own read then makes its request,
retried and reported as always). The store belongs to one process: it
pickles empty and a forked child starts with none.

>>> merge_ranges([(0, 65536), (70000, 80000), (5_000_000, 5_100_000)], gap=262144)
[(0, 80000), (5000000, 5100000)]
>>> excerpt_ranges(size=10_000_000, duration=100.0, start=50.0, length=3.0)
[(0, 65536), (4900000, 5465536), (9803392, 10000000)]
>>> excerpt_ranges(size=320_044, duration=10.0, start=5.0, length=1.0, uncompressed=True)
[(0, 8192), (143318, 208730)]
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import os
import threading
import time
from typing import Any, Iterable, Sequence

from audiotree.io import byte_counters
from audiotree.validation import check_positive, is_int
from audiotree.io import ranged_get
from audiotree.io.ranged_get import fetch_range

__all__ = ["ReadAhead", "PlannedRange", "RangeStore", "merge_ranges", "excerpt_ranges", "process_store",
           "HEADER_BYTES", "active_stores", "close_stores"]

#: Bytes planned at the start of every object read: the header a decoder opens (and a FLAC's seek table).
HEADER_BYTES = 64 * 1024
#: Reads before every planned excerpt of an object after which its plans start at byte 0 (:meth:`RangeStore.take`).
FROM_START_AFTER = 2
#: Seconds :meth:`RangeStore.take` waits for a block in flight before the caller makes its own request.
TAKE_TIMEOUT = 60.0
#: The longest :meth:`RangeStore.close` waits for the requests it cancelled to end.
CLOSE_WAIT = 5.0


def _size(value: Any, name: str) -> int:
    from audiotree.io.ranges import parse_size

    try:
        parsed = parse_size(value)
    except ValueError as exc:
        raise ValueError(f"ReadAhead({name}={value!r}): {exc}") from None
    if parsed is None or parsed < 0:
        raise ValueError(f"ReadAhead({name}={value!r}) must be a size in bytes (an int or a string like '512MB').")
    return parsed


@dataclasses.dataclass(frozen=True)
class ReadAhead:
    """How far and how hard a process reads ahead of its items (``Corpus(read_ahead=...)``).

    Args:
      items: how many of this process's next items are planned and fetched ahead (0 turns the read-ahead off).
      cache_limit: bytes the planned blocks of one process may hold (``"512MB"``, an int); planning stops
        there until read items free room.
      merge_gap: ranges of one object at most this far apart are fetched by one request (a request costs a
        round trip; a gap costs its bytes).
      max_in_flight: concurrent requests per process.
      requests_per_second: a budget per process (``None``: none), to keep a job within a bucket's request rate
        (multiply by the number of worker processes and hosts).

    All reads planned ahead are the same ranged GETs a read makes; items are identical with or without it.

    >>> ReadAhead(cache_limit="512MB").cache_bytes
    512000000
    >>> ReadAhead(items=-1)
    Traceback (most recent call last):
    ...
    ValueError: ReadAhead(items=-1) must be >= 0.
    """

    items: int = 64
    cache_limit: int | str = "256MB"
    merge_gap: int | str = "256KiB"
    max_in_flight: int = 32
    requests_per_second: float | None = None

    def __post_init__(self) -> None:
        if not is_int(self.items) or self.items < 0:
            raise ValueError(f"ReadAhead(items={self.items!r}) must be >= 0.")
        if not is_int(self.max_in_flight) or self.max_in_flight < 1:
            raise ValueError(f"ReadAhead(max_in_flight={self.max_in_flight!r}) must be >= 1.")
        check_positive(self.requests_per_second, "ReadAhead(requests_per_second=...)", optional=True)
        # Parsed once (read on every plan); not a field: equality and hashing stay those of the options given.
        object.__setattr__(self, "_bytes", (_size(self.cache_limit, "cache_limit"), _size(self.merge_gap, "merge_gap")))

    @property
    def enabled(self) -> bool:
        return self.items > 0

    @property
    def cache_bytes(self) -> int:
        return self._bytes[0]

    @property
    def gap_bytes(self) -> int:
        return self._bytes[1]


@dataclasses.dataclass(frozen=True)
class PlannedRange:
    """Bytes ``[start, stop)`` of the object ``url`` (of ``size`` bytes when known), read through ``fs``.

    ``rows``: the object is an array read by exact rows (a render's part), never by a decoder that may read on
    from its start: a read of it outside the plans is only an item planned too late (the store was full), so its
    plans are never widened to start at byte 0 (see :meth:`RangeStore.take`).
    """

    url: str
    start: int
    stop: int
    size: int | None = None
    fs: Any = dataclasses.field(default=None, compare=False, repr=False)
    rows: bool = False


def merge_ranges(ranges: Iterable[tuple[int, int]], *, gap: int) -> list[tuple[int, int]]:
    """``ranges`` sorted, with those that overlap or lie at most ``gap`` bytes apart joined."""
    merged: list[list[int]] = []
    for start, stop in sorted((int(a), int(b)) for a, b in ranges if b > a):
        if merged and start <= merged[-1][1] + gap:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    return [(a, b) for a, b in merged]


def excerpt_ranges(*, size: int, duration: float, start: float, length: float | None, margin: float = 0.01,
                   uncompressed: bool = False, seek_bytes: Any = None,
                   header: int = HEADER_BYTES) -> list[tuple[int, int]]:
    """The byte ranges a decoder reads for ``length`` s at ``start`` s of a file of ``size`` bytes and ``duration``
    s (``length=None``: to the end): its header, and the excerpt.

    The excerpt's place is estimated from the mean bit rate. For an ``uncompressed`` file (WAV, AIFF: a constant
    rate) that is exact up to the header's size, so it is widened by 16 KiB and 0.1 % of the file; otherwise by
    ``margin`` of the file (at least ``header`` bytes) on each side, where a decoder's seek probes land, and its
    last ``header`` bytes (Ogg's last page gives its length, MP3 ends with its ID3v1 tag). With
    ``seek_bytes`` (a FLAC file's seek points, increasing byte offsets) the range is widened to the points around
    it, one more on each side, since a decoder starts and stops there. A read outside the plan is simply a
    request of its own.
    """
    size = int(size)
    if size <= 0:
        return []
    if not duration or duration <= 0 or length is None:
        return [(0, size)]
    # An uncompressed file's header is a few chunks (a decoder that reads on past them makes a request of its own);
    # a compressed stream's setup (Ogg's codebooks, an MP3's ID3v2 tag) can be tens of KiB.
    head = (0, min(size, ranged_get.HEAD_NEED if uncompressed else header))
    pad = 16384 + size // 1000 if uncompressed else max(int(margin * size), header)
    if seek_bytes is not None and len(seek_bytes) > 1:
        import numpy as np

        points = np.asarray(seek_bytes, dtype=np.int64)
        first = int(points[0])
        rate = (size - first) / float(duration)
        lo_pos, hi_pos = first + rate * max(0.0, start), first + rate * (start + length)
        k = max(0, int(np.searchsorted(points, lo_pos, side="right")) - 2)
        j = int(np.searchsorted(points, hi_pos, side="left")) + 1
        # The reader checks the frame header at the closing point too: a few bytes past it.
        stop = min(size, int(points[j]) + 64) if j < len(points) else size
        return merge_ranges([(0, first), (int(points[k]), stop)], gap=0)
    rate = size / float(duration)
    lo = max(0, int(rate * max(0.0, start)) - pad)
    # A compressed stream's decoder reads on past the excerpt's end, a buffer at a time: one more header's worth.
    hi = min(size, int(rate * (start + length)) + pad + (0 if uncompressed else header))
    if uncompressed:
        return merge_ranges([head, (lo, hi)], gap=0)
    # Compressed streams are also read at their end: Ogg's last pages (its length; a decoder looks back up to two
    # of its 64 KiB chunks from the end), MP3's ID3v1 tag.
    return merge_ranges([head, (lo, hi), (max(0, size - 3 * header), size)], gap=0)


class _Block:
    __slots__ = ("url", "start", "stop", "future", "next_use", "done", "failed")

    def __init__(self, url: str, start: int, stop: int, future: Any, next_use: int) -> None:
        self.url, self.start, self.stop, self.future, self.next_use = url, start, stop, future, next_use
        self.done = self.failed = False  # set once by settle (plain reads: no lock per look)
        future.add_done_callback(self.settle)

    def settle(self, future: Any) -> None:
        self.failed = future.cancelled() or future.exception() is not None
        self.done = True

    @property
    def nbytes(self) -> int:
        return self.stop - self.start


class _Budget:
    """A token bucket of ``rate`` requests per second (burst: one second's worth), awaited on the IO loop."""

    def __init__(self, rate: float) -> None:
        self.rate, self.tokens, self.stamp = float(rate), float(rate), time.monotonic()

    async def take(self) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            if self.tokens >= 1.0:
                self.tokens -= 1.0
                return
            await asyncio.sleep((1.0 - self.tokens) / self.rate)


class RangeStore:
    """The blocks this process fetched (or is fetching) ahead of its items; see the module text.

    ``position``: every item before it has been read (``advance``); blocks whose next use is before it are the
    first evicted. Thread-safe.
    """

    def __init__(self, options: ReadAhead) -> None:
        self.options = options
        self._lock = threading.Lock()
        self._blocks: dict[str, list[_Block]] = {}
        self._sizes: dict[str, int] = {}
        self._totals: dict[str, int] = {}  # object sizes as the fetches' answers gave them (Content-Range)
        self._held = 0
        self.position = -1
        self.wait_seconds = 0.0  # time readers spent waiting for blocks in flight
        self._gates: dict[int, tuple[asyncio.Semaphore, _Budget | None]] = {}  # per event loop
        self._prefix_misses: dict[str, int] = {}
        self._from_start: set[str] = set()  # objects whose decoder reads from byte 0 (see _note_miss)
        self._rows: set[str] = set()  # objects read by exact rows: no decoder reads them from byte 0
        self._running = 0  # fetches started on the IO loop and not yet ended (see close)
        self._settled = threading.Condition()
        self._loops: set[Any] = set()  # the IO loops fetches ran on

    # -- planning -------------------------------------------------------------------------------------------
    def room(self) -> int:
        """Bytes that may still be planned under ``cache_limit``."""
        with self._lock:
            # Read blocks stay until the store is half full: an object's header and tail blocks serve its later
            # items (planned only once those come within reach); a scan of every block is not made per item.
            if self._held > self.options.cache_bytes // 2:
                self._evict_read()
            return self.options.cache_bytes - self._held

    def size_of(self, url: str) -> int | None:
        """The size of ``url`` as a plan gave it (from the index), or ``None``."""
        return self._sizes.get(url)

    def total_of(self, url: str) -> int | None:
        """The size of ``url`` as the last answer to a fetch of it gave it, or ``None``."""
        return self._totals.get(url)

    def plan(self, ranges: Sequence[PlannedRange], use: int) -> int:
        """Fetches what the item ``use`` will read and no block holds yet; returns the requests started."""
        by_url: dict[str, list[PlannedRange]] = {}
        for r in ranges:
            by_url.setdefault(r.url, []).append(r)
        started = 0
        with self._lock:
            for url, parts in by_url.items():
                first = parts[0]
                if first.size is not None:
                    self._sizes[url] = int(first.size)
                if first.rows:
                    self._rows.add(url)
                blocks = self._blocks.setdefault(url, [])
                asked = [(p.start, p.stop) for p in parts]
                if url in self._from_start:  # its decoder reads from the start up to the excerpt (seen below);
                    # where that ends is a bit-rate estimate: 5 % of the object more.
                    end = max(b for _, b in asked)
                    asked = [(0, end + (first.size // 20 if first.size else end // 10))]
                wanted = []
                for start, stop in merge_ranges(asked, gap=self.options.gap_bytes):
                    wanted.extend(self._missing(blocks, start, stop, use))
                for start, stop in merge_ranges(wanted, gap=self.options.gap_bytes):
                    future = self._start_fetch(first.fs, url, start, stop, first.size)
                    if future is None:
                        continue
                    bisect.insort(blocks, _Block(url, start, stop, future, use), key=_start_of)
                    self._held += stop - start
                    started += 1
        return started

    def _missing(self, blocks: list[_Block], start: int, stop: int, use: int) -> list[tuple[int, int]]:
        """Parts of ``[start, stop)`` no live block holds; the blocks that hold the rest are now needed by ``use``."""
        gaps = [(start, stop)]
        for block in blocks:
            if block.stop <= start or block.start >= stop or block.failed:
                continue
            if block.next_use < use:
                block.next_use = use
            rest = []
            for a, b in gaps:
                if block.start > a:
                    rest.append((a, min(b, block.start)))
                if block.stop < b:
                    rest.append((max(a, block.stop), b))
            gaps = [(a, b) for a, b in rest if b > a]
        return gaps

    def _start_fetch(self, fs: Any, url: str, start: int, stop: int, size: int | None) -> Any:
        loop = getattr(fs, "loop", None)
        if loop is None:  # no async client (local, memory://): the read makes its own request
            return None

        async def fetch() -> bytes:
            with self._settled:
                self._running += 1
                self._loops.add(loop)
            try:
                gate, budget = self._gate(loop)
                async with gate:
                    if budget is not None:
                        await budget.take()
                    answer = await fetch_range(fs, url, start, stop, size=size)
                    if answer.total is not None:
                        self._totals[url] = answer.total
                    return answer.part(start, stop)
            finally:  # (counted by then: fetch_range counts its request as it ends)
                with self._settled:
                    self._running -= 1
                    self._settled.notify_all()

        try:
            return asyncio.run_coroutine_threadsafe(fetch(), loop)
        except RuntimeError:  # the loop is closed (interpreter exit)
            return None

    def _gate(self, loop: Any) -> tuple[asyncio.Semaphore, _Budget | None]:
        key = id(loop)
        gate = self._gates.get(key)
        if gate is None:  # made on the loop's own thread (asyncio primitives bind to the running loop)
            rate = self.options.requests_per_second
            gate = self._gates[key] = (asyncio.Semaphore(self.options.max_in_flight),
                                       _Budget(rate) if rate else None)
        return gate

    # -- reading --------------------------------------------------------------------------------------------
    def take(self, url: str, start: int, stop: int, need: int | None = None, *,
             view: bool = False) -> bytes | memoryview | None:
        """Bytes ``[start, stop)`` of ``url`` from blocks (joined where one ends and the next begins), or as far as
        they hold them past ``need`` (default ``stop``); ``None`` when they do not hold ``[start, need)`` (then the
        caller makes its request).

        ``view``: bytes one block holds come as a read-only ``memoryview`` of it, not copied (a render's row is
        copied once, into its item's array, instead of twice); the view keeps the block's bytes alive.
        """
        need = stop if need is None else min(int(need), int(stop))
        with self._lock:
            blocks = self._blocks.get(url, ())
            chain = _chain(blocks, start, need, stop)
            if chain is None and blocks:
                self._note_miss(url, start, blocks)
        if chain is None:
            return None
        parts = []
        began = time.monotonic()
        try:
            for block in chain:
                try:
                    data = block.future.result(timeout=TAKE_TIMEOUT)
                except Exception:  # a failed or abandoned read-ahead: the caller's own request (retried) decides
                    self._drop(block)
                    return None
                lo = max(start, block.start) - block.start
                hi = min(stop, block.stop) - block.start
                parts.append(memoryview(data)[lo:hi] if view and len(chain) == 1 else data[lo:hi])
        finally:
            waited = time.monotonic() - began
            self.wait_seconds += waited
            byte_counters.count_wait(byte_counters.backend_of(url), waited)  # read_stats(): the reader's wait
        got = b"".join(parts) if len(parts) > 1 else parts[0]
        if len(got) < need - start:  # the object ended before the block: only the caller can say what that means
            return None
        return got

    def _note_miss(self, url: str, start: int, blocks: Sequence[_Block]) -> None:
        """A read of ``url`` no block holds: past the header but before every planned excerpt of the object, it is
        a decoder reading on from the start (an MP3 without a seek table is decoded from its first frame). After
        :data:`FROM_START_AFTER` such reads, this object's plans start at byte 0."""
        if url in self._from_start or url in self._rows or start < HEADER_BYTES or any(
                b.start <= start for b in blocks if b.start > 0):
            return
        seen = self._prefix_misses.get(url, 0) + 1
        self._prefix_misses[url] = seen
        if seen >= FROM_START_AFTER:
            self._from_start.add(url)

    def advance(self, done_below: int) -> None:
        """Every item of this process before ``done_below`` has been read: blocks no later item needs may go."""
        with self._lock:
            if done_below > self.position:
                self.position = done_below

    def _evict_read(self) -> None:
        for url in list(self._blocks):
            keep = []
            for block in self._blocks[url]:
                if block.next_use < self.position and block.done or block.failed:
                    self._held -= block.nbytes
                else:
                    keep.append(block)
            if keep:
                self._blocks[url] = keep
            else:
                del self._blocks[url]

    def _drop(self, block: _Block) -> None:
        with self._lock:
            blocks = self._blocks.get(block.url, [])
            if block in blocks:
                blocks.remove(block)
                self._held -= block.nbytes

    def stats(self) -> dict[str, int]:
        """``{"blocks", "bytes", "in_flight"}`` held by this store now."""
        with self._lock:
            blocks = [b for bs in self._blocks.values() for b in bs]
            return {"blocks": len(blocks), "bytes": self._held,
                    "in_flight": sum(1 for b in blocks if not b.future.done())}

    def close(self) -> None:
        """Cancels what is in flight, forgets every block, and waits (at most :data:`CLOSE_WAIT` s) for the
        cancelled requests to end: once it returns, none of them is still sending, and each is counted."""
        with self._lock:
            for blocks in self._blocks.values():
                for block in blocks:
                    block.future.cancel()
            self._blocks.clear()
            self._held = 0
        try:
            asyncio.get_running_loop()
            return  # (on an event loop's thread: its fetches end only once this returns)
        except RuntimeError:
            pass
        with self._settled:  # (fetches on a loop that stopped never end: no wait for them)
            self._settled.wait_for(lambda: self._running == 0 or not any(loop.is_running() for loop in self._loops),
                                   timeout=CLOSE_WAIT)


def _start_of(block: _Block) -> int:
    return block.start


def _chain(blocks: Iterable[_Block], start: int, need: int, stop: int) -> list[_Block] | None:
    """Blocks that together hold ``[start, need)``, each beginning where the one before ends (or earlier), then
    those that continue them towards ``stop`` and have arrived; ``None`` when there is a hole before ``need``.

    Why not more: a render's rows are planned as one block after another, so the blocks of a part form one
    contiguous run up to the newest request in flight. A read that waited for every block continuing its own (or
    past ``stop``) would wait for that newest request, a round trip per read, and join megabytes it never uses.
    """
    chain: list[_Block] = []
    at = start
    for block in blocks:  # kept sorted by start (RangeStore.plan)
        if block.stop <= start or block.failed:
            continue
        if block.start > at or at >= stop or at >= need and not block.done:
            break
        if block.stop > at:
            chain.append(block)
            at = block.stop
    return chain if chain and at >= need else None


_stores: dict[ReadAhead, RangeStore] = {}
_stores_lock = threading.Lock()


def process_store(options: ReadAhead) -> RangeStore:
    """This process's store for ``options`` (made on first use; a forked child starts without one)."""
    store = _stores.get(options)
    if store is None:
        with _stores_lock:
            store = _stores.get(options)
            if store is None:
                store = _stores[options] = RangeStore(options)
                ranged_get.hold_bytes_in(store)
    return store


def active_stores() -> list[RangeStore]:
    """The stores this process made (each registered with :func:`audiotree.io.ranged_get.hold_bytes_in`)."""
    return list(_stores.values())


def close_stores() -> None:
    """Cancels every store's requests in flight and forgets the stores of this process (their bytes go too)."""
    with _stores_lock:
        stores = list(_stores.values())
        _stores.clear()
    for store in stores:
        ranged_get.stop_holding_in(store)
        store.close()


def _after_fork_in_child() -> None:
    global _stores_lock
    _stores_lock = threading.Lock()
    _stores.clear()  # the parent's blocks are futures of the parent's IO loop


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

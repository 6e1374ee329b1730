"""Reading what ``audiotree render`` wrote: one Grain dataset over the finished parts.

The on-disk layout is :mod:`audiotree.formats.render_record`. A render on object
storage is read in place: the record in one request, each part's manifest
when an item of that part is first read, then each item by ranged requests
(see :class:`audiotree.sources.TreeDataSource`); nothing is downloaded whole.
"""

from __future__ import annotations

import bisect
import functools
import os
import threading
from pathlib import Path
from typing import Any

import grain

from audiotree.process_local import ProcessLocal
from audiotree.formats.render_record import MAX_RECORD_BYTES, RECORD, parse_record, read_record
from audiotree.discovery.sharding import host_range
from audiotree.io import storage
from audiotree.io.read_ahead import ReadAhead
from audiotree.sources.readers.arrayrecord_source import ArrayRecordAudioSource, open_arrayrecord
from audiotree.sources.readers.audio import AudioDataSource
from audiotree.sources.audio_datasets import wrap_stored
from audiotree.sources.read_ahead_map import ReadAheadMapDataset
from audiotree.sources.readers.tree import TreeDataSource

__all__ = ["open_render", "RenderParts", "host_range"]


def _open_part(fmt: str, options: dict, location: str):
    if fmt == "audio":
        return AudioDataSource(location, storage_options=options.get("storage_options"))
    return TreeDataSource(location, **options)


class RenderParts(ProcessLocal):
    """A Grain ``RandomAccessDataSource`` over items ``[start, stop)`` of a render's parts, in item order.

    Each part's reader is built on first use of one of its items (one
    manifest request for a remote part), in each process: a host reading
    its own share (``shard_options``) never touches other parts. A part
    whose item count differs from the record's, or that is missing, is a
    ``ValueError``/``FileNotFoundError`` naming it; the other parts stay
    readable.
    """

    #: Rebuilt fresh in every process this object is unpickled in (see audiotree.process_local).
    process_local = {"_lock": threading.Lock, "_sources": dict}

    def __init__(self, root: str, parts: list[tuple[str, int]], open_part, *, start: int = 0,
                 stop: int | None = None) -> None:
        self.root = root
        self.parts = list(parts)
        self._open_part = open_part
        self._ends = []
        total = 0
        for _, count in self.parts:
            total += count
            self._ends.append(total)
        self.start = start
        self.stop = total if stop is None else stop
        self._sources: dict[int, Any] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.stop - self.start

    def __repr__(self) -> str:
        return f"RenderParts({storage.redact(self.root)!r}, parts={len(self.parts)}, items=[{self.start}, {self.stop}))"

    def _source(self, k: int):
        source = self._sources.get(k)
        if source is not None:
            return source
        with self._lock:
            if k in self._sources:
                return self._sources[k]
            name, count = self.parts[k]
            location = f"{self.root}/{name}" if storage.is_url(self.root) else os.path.join(self.root, name)
            try:
                source = self._open_part(location)
            except FileNotFoundError as exc:
                raise FileNotFoundError(f"{self.root}/{RECORD} names the finished part {name}, but it cannot be "
                                        f"read: {exc}") from None
            if len(source) != count:
                raise ValueError(f"{self.root}/{RECORD} records {count} items in {name}, but it holds {len(source)}; "
                                 "the part was replaced or damaged. Re-render (audiotree render --overwrite).")
            self._sources[k] = source
            return source

    def waveform_nbytes(self) -> int | None:
        """Bytes of the first item's waveform from its part's manifest (opened, no item read); ``None`` if unknown."""
        if not len(self):
            return 0
        k = bisect.bisect_right(self._ends, self.start)
        return getattr(self._source(k), "waveform_nbytes", None)

    def __getitem__(self, index: int):
        i = int(index)
        if not 0 <= i < len(self):
            raise IndexError(f"Index {i} is out of range for {len(self)} items of the render {self.root}.")
        i += self.start
        k = bisect.bisect_right(self._ends, i)
        first = self._ends[k - 1] if k else 0
        return self._source(k)[i - first]


#: Items a render's read-ahead plans together, so that neighbouring rows of a part come in one request.
READ_AHEAD_GROUP = 8

#: ``open_render``'s read-ahead: twice the items and requests in flight of ``ReadAhead()``. A render's item is a
#: whole row (529 KB for 3 s of 44.1 kHz float32), so a process reads fewer items per second than from excerpts
#: and each costs a request when shuffled: at +50 ms per request, 2,000 items of 529 KB behind nginx, one process
#: read 725-780 items/s in item order and 480-530 shuffled with ``ReadAhead()``, 935-1,017 and 470-713 with this
#: (readers' wait per item halved), within the same 256 MB per process.
RENDER_READ_AHEAD = ReadAhead(items=128, max_in_flight=64)


def open_render(out: str | os.PathLike, *, shard_options: Any = None, storage_options: dict | None = None,
                cache_limit: int | str | None = None, cache_dir: str | os.PathLike | None = None,
                read_ahead: ReadAhead | None = RENDER_READ_AHEAD):
    """The finished parts of a render in ``out`` as one dataset, in item order.

    Returns an :class:`~audiotree.sources.audio_datasets.AudioMapDataset` (a
    ``grain.MapDataset``) over the parts; ArrayRecord renders are read with
    :func:`~audiotree.sources.open_arrayrecord`.

    Args:
      out: the render folder, or its URL (``s3://bucket/render``): a URL is
        read in place by ranged requests (the record, then each part's
        manifest on first use, then each item's bytes), never downloaded.
      shard_options: a ``grain.sharding.ShardOptions``: this host reads its
        contiguous share of the items (:func:`~audiotree.discovery.sharding.host_range`), so it opens only
        the parts that hold them; hosts' shares are disjoint and complete.
        ArrayRecord renders are split by shard files instead.
      storage_options: filesystem options for a URL.
      cache_limit: keep the bytes read from a URL in a local cache of at most
        this size (``"20GB"``), least recently used evicted; default none.
      cache_dir: that cache's folder (default ``$AUDIOTREE_CACHE/ranges``).
      read_ahead: for a ``tree`` render at a URL, how each process fetches the rows of its next items ahead,
        many requests in flight (:class:`~audiotree.io.read_ahead.ReadAhead`; ``None`` turns it off; default
        :data:`RENDER_READ_AHEAD`, 128 items and 64 requests in flight). It follows
        the order the dataset is read in (in item order, every W-th item in each of W workers, runs of a
        batch), also after a ``shuffle``, ``map`` or ``repeat`` of the dataset ``open_render`` returns, which
        stay below it. Items are the same with or without it.

    Raises ``FileNotFoundError`` when ``out`` holds no render record,
    ``ValueError`` when the record is unreadable, and ``RuntimeError`` when no
    part has finished yet. A part the record names but the storage lacks (or
    holds truncated) raises when its items are read, naming the object.
    """
    if read_ahead is not None and not isinstance(read_ahead, ReadAhead):
        raise TypeError("read_ahead must be a ReadAhead (audiotree.sources.ReadAhead) or None, got "
                        f"{type(read_ahead).__name__}.")
    location = os.fspath(out)
    if storage.is_url(location):
        from audiotree.io.ranges import remote_folder

        folder = remote_folder(location, storage_options=storage_options, cache_limit=cache_limit,
                               cache_dir=cache_dir)
        root = folder.url
        try:
            raw = folder.read_object(RECORD, limit=MAX_RECORD_BYTES)
        except FileNotFoundError:
            raise FileNotFoundError(f"{root} holds no {RECORD}; it is not an audiotree render (or not yet).") from None
        record = parse_record(raw, folder.object_url(RECORD))
    else:
        root = str(Path(location))
        record = read_record(Path(root))
        if record is None:
            raise FileNotFoundError(f"{root} holds no {RECORD}; it is not an audiotree render.")
    if not any(part["count"] for part in record["parts"]):
        raise RuntimeError(f"The render in {root} has no finished part yet.")
    fmt = record["config"]["format"]
    if fmt == "webdataset":
        raise ValueError(f"{root} is a --format webdataset render: its parts are tar shards, not datasets "
                         "open_render reads. Read them as a source (create_audio_dataset(sources=[...]) with the "
                         f"shards {root}/part-00000/shard-000000.tar, ...) or with webdataset.WebDataset.")
    if fmt not in ("tree", "audio", "arrayrecord"):
        raise ValueError(f"{root}/{RECORD} names the format {fmt!r}, which this version of audiotree does not read; "
                         "upgrade audiotree, or re-render.")
    if fmt == "arrayrecord":
        if not storage.is_url(root):
            return open_arrayrecord(root, shard_options=shard_options, storage_options=storage_options,
                                    cache_limit=cache_limit, cache_dir=cache_dir)
        # The record is read already: it lists the shards (older records: each part's index is read on first use).
        source = ArrayRecordAudioSource.of_remote_render(root, record, shard_options=shard_options,
                                                         storage_options=storage_options, cache_limit=cache_limit,
                                                         cache_dir=cache_dir)
        # Sized from the record when it lists the shards: reading item 0 would stage a shard at open.
        return wrap_stored(grain.MapDataset.source(source), item_bytes=source.item_bytes())
    parts = [(part["dir"], part["count"]) for part in record["parts"] if part["count"]]
    options = {"storage_options": storage_options, "cache_limit": cache_limit, "cache_dir": cache_dir}
    if storage.is_url(root) or shard_options is not None:
        total = sum(count for _, count in parts)
        start, stop = host_range(total, shard_options) if shard_options is not None else (0, total)
        source = RenderParts(root, parts, functools.partial(_open_part, fmt, options), start=start, stop=stop)
        ds = grain.MapDataset.source(source)
        # Sized from the first part's manifest, not by reading an item: on a bucket that is a request.
        if not (fmt == "tree" and storage.is_url(root) and read_ahead is not None and read_ahead.enabled):
            return wrap_stored(ds, item_bytes=source.waveform_nbytes())
        # Each TreeDataSource answers a plan with its item's ranges (TreeDataSource.planned_reads). The read-ahead
        # stays above later shuffles, maps and slices (AudioMapDataset.on_top): it sees the order items are read in.
        make = functools.partial(ReadAheadMapDataset, options=read_ahead, group=READ_AHEAD_GROUP)
        wrapped = wrap_stored(make(ds), item_bytes=source.waveform_nbytes())
        wrapped.on_top = (make, ds)
        return wrapped
    # On a local disk every part is opened (and its files checked) now: it costs nothing.
    sources = [grain.MapDataset.source(_open_part(fmt, options, os.path.join(root, name))) for name, _ in parts]
    return wrap_stored(sources[0] if len(sources) == 1 else grain.MapDataset.concatenate(sources))

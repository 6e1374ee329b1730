"""Where each row's audio bytes sit inside a Parquet file, so one row is one ranged read.

Hugging Face ``datasets`` writes the audio ``bytes`` leaf uncompressed and
PLAIN-encoded (compression gains nothing on encoded audio): every cell's bytes
are then stored verbatim, contiguously, somewhere in the row group's column
chunk. pyarrow decodes column chunks only whole (it cannot start at a page:
apache/arrow#45284), so a row read through pyarrow costs its whole row group.
Instead, the first time a process needs a row group it reads the audio column
chunk once (one ranged read), lets pyarrow decode the values from those bytes
(nothing is read twice), and finds each value's bytes in the chunk: the
row's ``(offset, size)`` in the file. Each later row of that group is a ranged
read of its own bytes, opened like a tar member (partial decodes read only the
excerpt's part).

Nothing is decoded by hand: pyarrow decodes, and a location is only recorded
where the chunk's bytes there equal pyarrow's value, so a located cell is
exactly the value pyarrow would return. Where the writer recorded page
checksums, each page of the chunk is checked once against its CRC32
(:mod:`audiotree.io.parquet_pages`), as pyarrow's ``page_checksum_verification``
would: a cell on a failing page is refused when read. A compressed chunk (snappy, zstd, ...)
has no such location; :func:`locate` returns ``None`` and the caller reads the
row group through pyarrow. The maps are small (two integers a row), kept per
process in an LRU keyed by the file's version.
"""

from __future__ import annotations

from typing import Any, Callable

from audiotree.io.byte_cache import MISSING, BoundedCache

__all__ = ["locate", "NULL", "BAD_CHECKSUM", "forget"]

#: The map entry of a null cell (a missing struct or a null ``bytes``).
NULL = (-1, -1)
#: The map entry of a cell on a page whose bytes fail the CRC32 its header records (:mod:`audiotree.io.parquet_pages`).
BAD_CHECKSUM = (-2, -2)

# A map is 16 bytes a row (an int64 array): 16,384 groups of 100 rows are 26 MB.
_MAPS = BoundedCache("parquet_cell_maps", max_entries=16384)


def _audio_leaf(opened: Any, column: str) -> tuple[int, str] | None:
    """``(leaf column index, dotted path)`` of the audio bytes: ``column`` itself or its ``bytes`` field."""
    import pyarrow as pa

    arrow_type = opened.schema_arrow.field(column).type
    dotted = f"{column}.bytes" if pa.types.is_struct(arrow_type) else column
    schema = opened.metadata.schema
    for i in range(len(schema)):
        if schema.column(i).path == dotted:
            return i, dotted
    return None


class _Window:
    """A read-only file of ``size`` bytes serving ``[start, start + len(data))`` from memory, the rest by ``fetch``.

    Reads return views of ``data`` (pyarrow wraps them without a copy).
    """

    closed = False

    def __init__(self, size: int, start: int, data: bytes, fetch: Callable[[int, int], bytes]) -> None:
        self._size, self._start, self._data, self._fetch, self._pos = size, start, memoryview(data), fetch, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, self._size)[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        return self._size

    def read(self, n: int = -1) -> Any:
        a = self._pos
        b = self._size if n is None or n < 0 else min(a + n, self._size)
        if b <= a:
            return b""
        lo, hi = a - self._start, b - self._start
        # pyarrow reads the chunk's own range; anything else (not seen in practice) is fetched.
        chunk = self._data[lo:hi] if lo >= 0 and hi <= len(self._data) else self._fetch(a, b)
        self._pos = a + len(chunk)
        return chunk

    read_buffer = read

    def close(self) -> None:
        self.closed = True


def _value_views(column: Any) -> list[memoryview | None] | None:
    """Per row, a view of the audio value's bytes inside pyarrow's buffer (``None`` where null).

    ``None`` (no views) for a column that is not ``binary`` or ``large_binary``.
    """
    import pyarrow as pa

    arr = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    missing = arr.is_null().to_pylist()
    if pa.types.is_struct(arr.type):
        child = arr.field("bytes")
        missing = [m or c for m, c in zip(missing, child.is_null().to_pylist())]
        arr = child
    if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
        return None  # another layout of buffers (string, view types): read through pyarrow instead
    import numpy as np

    _, offsets_buf, data_buf = arr.buffers()[:3]
    wide = pa.types.is_large_binary(arr.type)
    offsets = np.frombuffer(offsets_buf, dtype=np.int64 if wide else np.int32)[arr.offset:arr.offset + len(arr) + 1]
    data = memoryview(data_buf) if data_buf is not None else memoryview(b"")
    return [None if m else data[int(offsets[i]):int(offsets[i + 1])] for i, m in enumerate(missing)]


def _find_all(chunk: bytes, values: list[memoryview | None]) -> tuple[tuple[int, int], ...] | None:
    """Position in ``chunk`` of each value (``NULL`` for a null); ``None`` when one is not there verbatim."""
    found, cursor = [], 0
    for v in values:
        if v is None:
            found.append(NULL)
            continue
        # PLAIN pages hold the values in row order, so the next one starts a few bytes past the cursor; a
        # dictionary holds each distinct value once (a repeat sits earlier), hence the second search from 0.
        at = _find(chunk, v, cursor)
        if at < 0 and cursor:
            at = _find(chunk, v, 0)
        if at < 0:
            return None
        found.append((at, len(v)))
        cursor = at + len(v)
    return tuple(found)


def _find(chunk: bytes, value: memoryview, start: int) -> int:
    """First position at or after ``start`` where ``chunk`` holds ``value`` (-1 if none)."""
    if not len(value):
        return start if start <= len(chunk) else -1
    prefix = bytes(value[:64])  # a short needle; the full comparison below is one memcmp
    at = chunk.find(prefix, start)
    while at >= 0 and not chunk.startswith(value, at):
        at = chunk.find(prefix, at + 1)
    return at


def locate(key: tuple, opened: Any, column: str, group: int, *, size: int,
           fetch: Callable[[int, int], bytes]) -> Any:
    """Per row of row group ``group``, ``(offset in the file, size)`` of its audio bytes, or :data:`NULL`.

    An ``int64`` array of shape ``(rows, 2)``; a null cell's row is ``(-1, -1)``.

    ``None`` when the audio chunk is compressed or its values are not stored
    verbatim (the caller then reads the group through pyarrow). ``key``
    identifies the file's version (the map is cached under it); ``size`` is
    the file's byte count and ``fetch(a, b)`` returns its bytes ``[a, b)``.
    Exceptions from ``fetch`` and from pyarrow propagate.

    >>> import io, pyarrow as pa, pyarrow.parquet as pq
    >>> buf = io.BytesIO()
    >>> pq.write_table(pa.table({"audio": [b"fLaC one", None]}), buf, compression="none", use_dictionary=False)
    >>> data = buf.getvalue()
    >>> spans = locate(("doc",), pq.ParquetFile(io.BytesIO(data)), "audio", 0, size=len(data),
    ...                fetch=lambda a, b: data[a:b])
    >>> [None if o < 0 else data[o:o + n] for o, n in spans.tolist()]
    [b'fLaC one', None]
    """
    import pyarrow.parquet as pq

    full = (*key, column, group)
    kept = _MAPS.get(full, MISSING)
    if kept is not MISSING:
        return kept
    leaf = _audio_leaf(opened, column)
    found = None
    if leaf is not None:
        meta = opened.metadata.row_group(group).column(leaf[0])
        if meta.compression == "UNCOMPRESSED":
            offsets = [o for o in (meta.dictionary_page_offset, meta.data_page_offset) if o]
            start = min(offsets)
            chunk = fetch(start, start + meta.total_compressed_size)
            window = pq.ParquetFile(_Window(size, start, chunk, fetch), metadata=opened.metadata, pre_buffer=False)
            values = _value_views(window.read_row_group(group, columns=[leaf[1]]).column(0))
            spots = None if values is None else _find_all(chunk, values)
            if spots is not None:
                found = _checked(spots, chunk, start)
    _MAPS.put(full, found)
    return found


def _checked(spots: tuple[tuple[int, int], ...], chunk: bytes, start: int) -> Any:
    """The map of ``spots`` (positions in ``chunk``, which starts at byte ``start``), checked against page CRCs.

    A cell on a page whose CRC fails is :data:`BAD_CHECKSUM`. ``None`` (read the group through pyarrow, which
    checks the CRCs itself) when the page headers do not parse here.
    """
    import numpy as np

    from audiotree.io.parquet_pages import bad_pages

    found = np.array(spots, dtype=np.int64).reshape(-1, 2)
    try:
        bad = bad_pages(chunk)
    except ValueError:
        return None
    for a, b in bad:
        hit = (found[:, 0] >= 0) & (found[:, 0] < b) & (found[:, 0] + found[:, 1] > a)
        found[hit] = BAD_CHECKSUM
    found[found[:, 0] >= 0, 0] += start
    return found


def forget() -> None:
    """Drops the cached maps."""
    _MAPS.clear()

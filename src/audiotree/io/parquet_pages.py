"""The pages of a Parquet column chunk and their checksums, read from the chunk's bytes.

A Parquet writer may record a CRC32 of each page's bytes in the page's header
(``write_page_checksum=True`` in pyarrow). pyarrow checks it only when a file is
opened with ``page_checksum_verification=True``, and a row read by a ranged read
of its own bytes (:mod:`audiotree.io.parquet_cells`) does not go through pyarrow
at all. So the chunk read once to locate the cells is checked here, page by
page: :func:`bad_pages` parses each page header (Thrift compact protocol: only
the page's stored size and its CRC are kept, every other field is skipped) and
returns the byte ranges of the pages whose bytes do not match their CRC (the
CRC covers the page's bytes after its header, as the format defines it).

A page without a CRC is not checked (nothing to compare with). A header that
does not parse raises ``ValueError``.

>>> import io, pyarrow as pa, pyarrow.parquet as pq
>>> buf = io.BytesIO()
>>> pq.write_table(pa.table({"a": [b"x" * 100]}), buf, compression="none", use_dictionary=False,
...                write_page_checksum=True)
>>> data = bytearray(buf.getvalue())
>>> meta = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(0).column(0)
>>> start = meta.data_page_offset
>>> chunk = bytes(data[start:start + meta.total_compressed_size])
>>> bad_pages(chunk)
[]
>>> at = chunk.rfind(b"x" * 100) + 50  # in the page data (the header holds the value too, as statistics)
>>> bad_pages(chunk[:at] + b"y" + chunk[at + 1:])
[(0, 345)]
"""

from __future__ import annotations

import zlib

__all__ = ["page_headers", "bad_pages"]

# Thrift compact protocol type ids.
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
# PageHeader fields kept: compressed_page_size (3) and crc (4).
_SIZE_FIELD, _CRC_FIELD = 3, 4
# Nesting deeper than this is not a page header.
_MAX_DEPTH = 16


class _Reader:
    """A cursor over Thrift compact-protocol bytes."""

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ValueError("a page header runs past the end of the column chunk")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = value = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ValueError("a varint in a page header is too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, kind: int, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise ValueError("a page header nests too deep")
        if kind == _BYTE:
            self.pos += 1
        elif kind in (_TRUE, _FALSE):
            pass  # a field's value is its type
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.pos += 8
        elif kind == _BINARY:
            length = self.varint()  # read before the position is: the varint moves it
            self.pos += length
        elif kind in (_LIST, _SET):
            head = self.byte()
            count, element = head >> 4, head & 0x0F
            if count == 15:
                count = self.varint()
            for _ in range(count):
                self.skip(_BYTE if element in (_TRUE, _FALSE) else element, depth + 1)
        elif kind == _MAP:
            count = self.varint()
            if count:
                types = self.byte()
                for _ in range(count):
                    self.skip(types >> 4, depth + 1)
                    self.skip(types & 0x0F, depth + 1)
        elif kind == _STRUCT:
            self.fields(depth + 1)
        else:
            raise ValueError(f"a page header holds an unknown Thrift type {kind}")
        if self.pos > len(self.data):
            raise ValueError("a page header runs past the end of the column chunk")

    def fields(self, depth: int, keep: tuple[int, ...] = ()) -> dict[int, int]:
        """Reads a struct's fields up to its stop byte; the i32 values of the field ids in ``keep``."""
        kept: dict[int, int] = {}
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return kept
            kind, delta = head & 0x0F, head >> 4
            field = last + delta if delta else self.zigzag()
            last = field
            if field in keep and kind == _I32:
                kept[field] = self.zigzag()
            else:
                self.skip(kind, depth)


def page_headers(chunk: bytes) -> list[tuple[int, int, int, int | None]]:
    """``(header start, data start, end, crc)`` of each page in ``chunk``; ``crc`` is ``None`` if not recorded.

    Raises ``ValueError`` for a header that does not parse or a page that runs past the chunk.
    """
    pages = []
    pos = 0
    while pos < len(chunk):
        reader = _Reader(chunk, pos)
        kept = reader.fields(0, (_SIZE_FIELD, _CRC_FIELD))
        size = kept.get(_SIZE_FIELD)
        if size is None or size < 0 or reader.pos + size > len(chunk):
            raise ValueError(f"the page header at byte {pos} of the column chunk records no valid page size")
        pages.append((pos, reader.pos, reader.pos + size, kept.get(_CRC_FIELD)))
        pos = reader.pos + size
    return pages


def bad_pages(chunk: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` in ``chunk`` (header included) of each page whose bytes fail the CRC32 its header records."""
    return [(h, b) for h, a, b, crc in page_headers(chunk)
            if crc is not None and zlib.crc32(memoryview(chunk)[a:b]) != crc & 0xFFFFFFFF]

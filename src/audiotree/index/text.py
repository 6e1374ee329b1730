"""Text label columns as two flat buffers: UTF-8 bytes and int64 offsets.

A transcript column of ten million rows must not become ten million Python
strings in every worker. :class:`TextColumn` keeps Arrow's string layout
(``data[offsets[i]:offsets[i + 1]]`` is row ``i``'s UTF-8 text), pickles as two
NumPy arrays, selects rows with one vectorised gather, and makes a Python
``str`` only for the row an item reads. A null reads as ``""``.

>>> import pyarrow as pa
>>> col = TextColumn.from_arrow(pa.array(["hello", None, "wörld"]))
>>> len(col), col.text(2), col.text(1)
(3, 'wörld', '')
>>> col[[2, 0]].to_list()
['wörld', 'hello']
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["TextColumn"]


def _gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, bytes) of the byte ranges ``[starts[i], starts[i] + lengths[i])``, concatenated."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return offsets, np.zeros(0, dtype=np.uint8)
    # Byte k of the output comes from starts[row] + (k - offsets[row]) of the input.
    shift = np.repeat(starts - offsets[:-1], lengths)
    return offsets, data[np.arange(total, dtype=np.int64) + shift]


@dataclasses.dataclass(frozen=True, eq=False)
class TextColumn:
    """``n`` texts: ``offsets`` int64 ``(n + 1,)`` into ``data`` uint8 (UTF-8)."""

    offsets: np.ndarray
    data: np.ndarray

    def __post_init__(self) -> None:
        offsets = np.asarray(self.offsets)
        if offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or np.any(np.diff(offsets) < 0) \
                or int(offsets[-1]) != np.asarray(self.data).size:
            raise ValueError("TextColumn offsets must start at 0, never decrease, and end at the data's size.")

    @classmethod
    def from_arrow(cls, column: Any) -> "TextColumn":
        """From a pyarrow string array or chunked array (nulls read as ``""``)."""
        import pyarrow as pa

        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        if pa.types.is_string(column.type):
            width = np.int32
        elif pa.types.is_large_string(column.type):
            width = np.int64
        else:
            raise TypeError(f"a text column must hold strings, got {column.type}.")
        n = len(column)
        _, offsets_buf, data_buf = column.buffers()
        raw = np.frombuffer(offsets_buf, dtype=width)[column.offset:column.offset + n + 1].astype(np.int64) \
            if offsets_buf is not None else np.zeros(n + 1, dtype=np.int64)
        data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, dtype=np.uint8)
        lengths = np.diff(raw)
        if column.null_count:
            valid = np.unpackbits(np.frombuffer(column.buffers()[0], dtype=np.uint8), bitorder="little")
            lengths = lengths * valid[column.offset:column.offset + n]
        return cls(*_gather(data, raw[:-1], lengths))

    @classmethod
    def from_strings(cls, values: Any) -> "TextColumn":
        import pyarrow as pa

        return cls.from_arrow(pa.array(list(values), type=pa.string()))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def text(self, i: int) -> str:
        i = int(i)
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        if not 0 <= start <= end <= self.data.size:
            raise ValueError(f"text row {i} spans bytes [{start}, {end}) of {self.data.size}: its offsets are damaged.")
        return bytes(self.data[start:end]).decode("utf-8")

    def __getitem__(self, rows: Any) -> "TextColumn":
        """The texts of ``rows`` (an int array, a list or a slice), as a new column."""
        index = np.arange(len(self))[rows] if isinstance(rows, slice) else np.asarray(rows, dtype=np.int64)
        index = index.reshape(-1)
        starts = self.offsets[:-1][index]
        return TextColumn(*_gather(self.data, starts, self.offsets[1:][index] - starts))

    def to_list(self) -> list[str]:
        return [self.text(i) for i in range(len(self))]

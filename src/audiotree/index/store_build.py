"""Writing an index's column store (the layout is :mod:`audiotree.index.columns`'s).

:func:`write_store` streams an index's columns into flat files in a staging
folder and returns the manifest; :func:`audiotree.index.columns.open_columns`
adds the checksums (:mod:`audiotree.index.store_check`) and swaps the folder in.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["write_store", "STORE_FORMAT"]

#: Version of the store's layout; a store of another version is rebuilt (2: generations, checksums; 3: segment
#: ids, the quality columns and ``sample_rate``, :mod:`audiotree.index.quality`; 4: ``clip_blocks``).
STORE_FORMAT = 4
# Rows read from the index per step while building (bounds the builder's memory).
_BATCH_ROWS = 65_536


def write_store(ix: Any, folder: str, identity: dict) -> dict:
    """Writes the arrays of ``ix`` into ``folder``; returns the manifest (without its checksum)."""
    import pyarrow as pa

    from audiotree.index.quality import STORE_COLUMNS, quality_arrays
    from audiotree.index.reader import open_index
    from audiotree.index.text import TextColumn

    arrays: dict[str, dict] = {}

    def put(name: str, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        array.tofile(os.path.join(folder, name + ".bin"))
        arrays[name] = {"dtype": array.dtype.str, "shape": list(array.shape)}

    def put_text(name: str, column: Any) -> None:
        offsets, data = column if isinstance(column, tuple) else (column.offsets, column.data)
        put(name + ".offsets", np.asarray(offsets, np.int64))
        put(name + ".data", np.asarray(data, np.uint8))

    names = list(ix.meta["labels"])
    full = open_index(ix.path, columns=["path", "group", "size", "mtime_ns", "channels", "duration", "readable",
                                        *STORE_COLUMNS],
                      labels=names, root=ix.root)
    table = full.table
    n = len(full)
    put_text("path", _string_buffers(table.column("path")))
    if full.has_segments:  # the segment ids: items' keys
        put_text("id", _string_buffers(table.column("id")))
    put("size", np.nan_to_num(np.asarray(full.column("size"), dtype=np.float64), nan=-1).astype(np.int64)
        if table.column("size").null_count else full.column("size").astype(np.int64))
    put("mtime_ns", np.asarray([-1 if v is None else v for v in table.column("mtime_ns").to_pylist()], np.int64)
        if table.column("mtime_ns").null_count else full.column("mtime_ns").astype(np.int64))
    put("duration", np.asarray(full.column("duration"), dtype=np.float64))
    put("channels", np.asarray(full.column("channels"), dtype=np.float64))
    put("readable", full.column("readable").astype(bool))
    groups = _dictionary(table.column("group"))
    put("group.codes", groups[0])
    labels: dict[str, dict] = {}
    for position, name in enumerate(names):
        kind = ix.meta["labels"][name]["kind"]
        key = f"label-{position}"
        labels[name] = {"position": position, "kind": kind}
        if kind == "text":
            put_text(key, _string_buffers(table.column(name)))
            codes, values = _dictionary(table.column(name))
            put(key + ".codes", codes)
            put_text(key + ".names", TextColumn.from_strings(values))
        elif kind == "category":
            put(key, full.label_values(name))
            put_text(key + ".names", TextColumn.from_strings(["" if v is None else str(v)
                                                              for v in full.vocabulary(name)]))
        else:
            put(key, np.asarray(full.label_values(name)))
    for key, array in quality_arrays(table).items():  # (NaN for an index without quality columns)
        put(key, array)
    if "audio_channels" in table.column_names:  # a segment on some channels: a bit per channel (0: all)
        put("audio_channels", np.asarray([0 if c is None else sum(1 << int(k) for k in c)
                                          for c in table.column("audio_channels").to_pylist()], np.int64))
    if "start" in table.column_names:
        put("window", np.stack([np.asarray(full.column("start"), dtype=np.float64),
                                np.asarray(full.column("end"), dtype=np.float64)], axis=1))
    del full, table
    pa.default_memory_pool().release_unused()
    if ix.has_profile:
        _write_profiles(ix, folder, put, arrays)
    if ix.has_seek_points:
        from audiotree.index.seek_column import write_seek_tables

        write_seek_tables(ix, folder, put, arrays)
    return {"format": STORE_FORMAT, "index": identity, "rows": n, "root": ix.root, "groups": groups[1],
            "labels": labels, "arrays": arrays}


def _string_buffers(column: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, utf8)`` of a string column, as Arrow holds them (nulls read as ``""``).

    Without nulls (every path column) the buffers are taken as they are: no
    per-byte gather, whose index arrays would take 16 bytes per byte of text.
    """
    import pyarrow as pa

    from audiotree.index.text import TextColumn

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if column.null_count:
        text = TextColumn.from_arrow(column)
        return text.offsets, text.data
    width = np.int64 if pa.types.is_large_string(column.type) else np.int32
    _, offsets_buf, data_buf = column.buffers()
    n = len(column)
    raw = np.frombuffer(offsets_buf, dtype=width)[column.offset:column.offset + n + 1].astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8)[int(raw[0]):int(raw[-1])] if data_buf is not None and n \
        else np.zeros(0, np.uint8)
    return raw - raw[0], data


def _dictionary(column: Any) -> tuple[np.ndarray, list[str]]:
    """``(codes, names)`` of a string column: int32 codes (``-1`` for null or empty), names in first-seen order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    encoded = pc.dictionary_encode(column)
    names = encoded.dictionary.to_pylist()
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
    if "" in names:  # an empty name is no group, like a null
        empty = names.index("")
        codes = np.where(codes == empty, -1, np.where(codes > empty, codes - 1, codes)).astype(np.int32)
        names.pop(empty)
    return codes, [str(v) for v in names]


def _write_profiles(ix: Any, folder: str, put, arrays: dict) -> None:
    """The profile column, streamed in batches of rows and checked as ``open_index`` checks it."""
    import pyarrow.parquet as pq

    from audiotree.index.trust import check_profiles
    from audiotree.io import storage
    from audiotree.io.remote_file import open_input

    source = open_input(ix.path) if storage.is_url(ix.path) else ix.path
    offsets, valid = [np.zeros(1, np.int64)], []
    dtype = None
    total = 0
    clips: list = []  # (offsets, valid) per batch of clip_blocks, when the index has the column
    try:
        pf = pq.ParquetFile(source)
        has_clips = "clip_blocks" in pf.schema_arrow.names
        with open(os.path.join(folder, "profile.data.bin"), "wb") as raw, \
                open(os.path.join(folder, "clip.data.bin"), "wb") as clip_raw:
            for batch in pf.iter_batches(batch_size=_BATCH_ROWS, columns=[
                    "profile", "readable", "frames", "sample_rate", "profile_step"]
                    + (["clip_blocks"] if has_clips else [])):
                if has_clips:
                    clips.append(_write_list(batch.column("clip_blocks"), clip_raw))
                column = batch.column("profile")
                check_profiles(ix.path, column, batch.column("frames"), batch.column("sample_rate"),
                               batch.column("profile_step"), batch.column("readable"))
                starts = column.offsets.to_numpy().astype(np.int64)
                values = column.values.slice(int(starts[0]), int(starts[-1] - starts[0])).to_numpy(zero_copy_only=False)
                dtype = values.dtype if dtype is None else dtype
                np.ascontiguousarray(values, dtype=dtype).tofile(raw)
                offsets.append(starts[1:] - starts[0] + total)
                total += int(starts[-1] - starts[0])
                valid.append(column.is_valid().to_numpy(zero_copy_only=False).astype(bool))
    finally:
        if source is not ix.path:
            source.close()
    put("profile.offsets", np.concatenate(offsets))
    put("profile.valid", np.concatenate(valid) if valid else np.zeros(0, bool))
    arrays["profile.data"] = {"dtype": np.dtype(dtype or np.float32).str, "shape": [total]}
    if not has_clips:
        os.remove(os.path.join(folder, "clip.data.bin"))
        return
    ends = np.cumsum([0] + [o[-1] for o, _ in clips]).astype(np.int64)
    put("clip.offsets", np.concatenate([np.zeros(1, np.int64)] + [o[1:] + e for (o, _), e in zip(clips, ends)]))
    put("clip.valid", np.concatenate([v for _, v in clips]) if clips else np.zeros(0, bool))
    arrays["clip.data"] = {"dtype": np.dtype(np.uint8).str, "shape": [int(ends[-1])]}


def _write_list(column: Any, raw) -> tuple[np.ndarray, np.ndarray]:
    """Appends the values of a ``list<uint8>`` column's batch to ``raw``; its ``(offsets from 0, valid)``."""
    starts = column.offsets.to_numpy().astype(np.int64)
    values = column.values.slice(int(starts[0]), int(starts[-1] - starts[0])).to_numpy(zero_copy_only=False)
    np.ascontiguousarray(values, dtype=np.uint8).tofile(raw)
    return starts - starts[0], column.is_valid().to_numpy(zero_copy_only=False).astype(bool)

"""Index rows as Arrow tables in this version's schema, and the Parquet write of an index or a part.

The build's rows come from three places: files read now (dicts from
:mod:`audiotree.index._work`, their profile already encoded, a FLAC file's
seek points an ``(K, 2)`` int64 array), the index being
updated and the part files of an interrupted build. The last two may have been
written by format 1.0, whose profiles are float32 mean squares;
:func:`current_table` re-encodes those, so a reused row is stored exactly as a
freshly read one would be (:func:`~audiotree.index.profile.encode_profile` of
the same float32 profile) and the output never depends on where a row came from.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from audiotree.index.quality import QUALITY_COLUMNS, is_quality
from audiotree.index.table_schema import BASE_COLUMNS, arrow_schema, require_pyarrow

__all__ = ["rows_table", "current_table", "write_parquet"]

ROW_GROUP = 65_536
BASE_NAMES = [name for name, _, _ in BASE_COLUMNS]


def rows_table(rows: Sequence[dict]):
    """Rows (dicts of base columns, ``profile`` an int16 array from ``encode_profile`` or None) as an Arrow table."""
    pa = require_pyarrow()
    schema = arrow_schema()
    arrays = {name: pa.array([r[name] for r in rows], type=schema.field(name).type)
              for name in BASE_NAMES if name not in ("profile", "seek_points", "clip_blocks")
              and not is_quality(name)}
    for name in QUALITY_COLUMNS:  # NaN (not defined, e.g. a mono file's channel_corr) is stored as null
        arrays[name] = pa.array([r.get(name) for r in rows], type=schema.field(name).type, from_pandas=True)
    profiles = [r["profile"] for r in rows]
    for p in profiles:
        if p is not None and np.asarray(p).dtype != np.int16:  # a float profile here would be stored truncated
            raise TypeError(f"an index row's profile must be encode_profile's int16 array, got {np.asarray(p).dtype}.")
    arrays["profile"] = _list_array(profiles, [p is None for p in profiles])
    seeks = [r.get("seek_points") for r in rows]  # (rows of container faults and segments have none)
    arrays["seek_points"] = _list_array(seeks, [p is None for p in seeks], np.int64)
    clips = [r.get("clip_blocks") for r in rows]
    arrays["clip_blocks"] = _list_array(clips, [p is None for p in clips], np.uint8)
    return pa.table([arrays[name] for name in BASE_NAMES], schema=schema)


def _list_array(values: Sequence, missing: Sequence[bool], dtype=np.int16):
    """``list<int16>`` (or of ``dtype``) of ``values`` (flat arrays; ``None`` where ``missing``)."""
    pa = require_pyarrow()
    values = [None if m else np.asarray(v, dtype=dtype).reshape(-1) for v, m in zip(values, missing)]
    lengths = np.array([0 if v is None else v.size for v in values], dtype=np.int32)
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    present = [v for v in values if v is not None]
    flat = np.concatenate(present) if present else np.zeros(0, dtype=dtype)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, type=pa.from_numpy_dtype(np.dtype(dtype))),
                                    mask=pa.array(list(missing), type=pa.bool_()))


def current_table(table, *, before_seek_points: bool = False):
    """The base columns of ``table`` (an index's or a part file's) in this version's schema.

    A format 1.0 ``list<float32>`` profile column is encoded to int16 (vectorised
    over the column); everything else is cast (Parquet names a list's child
    "element", Arrow "item": a resumed build must write the same bytes as an
    uninterrupted one). Rows from before format 1.2 (``before_seek_points``, or
    a table without the column) get :func:`_unknown_seek_points`.
    """
    pa = require_pyarrow()
    from audiotree.index.profile import encode_profile

    if before_seek_points and "seek_points" in table.column_names:  # (the reader's nulls for an older index)
        table = table.drop_columns(["seek_points"])
    if "seek_points" not in table.column_names:  # an index or part written before format 1.2
        table = table.append_column("seek_points", _unknown_seek_points(table))
    for name in QUALITY_COLUMNS:  # an index or part written before format 1.3: not measured
        if name not in table.column_names:
            kind = arrow_schema().field(name).type
            table = table.append_column(pa.field(name, kind), pa.nulls(table.num_rows, kind))
    if "clip_blocks" not in table.column_names:  # written before the column existed: not measured
        kind = arrow_schema().field("clip_blocks").type
        table = table.append_column(pa.field("clip_blocks", kind), pa.nulls(table.num_rows, kind))
    table = table.select(BASE_NAMES)
    column = table.column("profile")
    if pa.types.is_floating(column.type.value_type):
        column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        offsets = np.asarray(column.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        flat = column.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        encoded = encode_profile(np.asarray(flat.to_numpy(zero_copy_only=False), dtype=np.float32))
        column = pa.ListArray.from_arrays(pa.array((offsets - offsets[0]).astype(np.int32)),
                                          pa.array(encoded, type=pa.int16()), mask=column.is_null())
        table = table.set_column(BASE_NAMES.index("profile"), "profile", column)
    return table.cast(arrow_schema())


def _unknown_seek_points(table):
    """The ``seek_points`` of rows written before format 1.2: ``[]`` (not known) for readable FLAC rows, else null.

    No build writes an empty table (a FLAC file has a table of at least one
    point, or null), so :func:`audiotree.index._reuse.reusable` reads ``[]`` as
    "read this file again": an update gives those rows their tables, and the
    index is what a fresh build writes.
    """
    pa = require_pyarrow()
    import pyarrow.compute as pc

    flac = pc.and_(pc.equal(table.column("container"), "FLAC"), table.column("readable"))
    missing = pc.invert(pc.fill_null(flac, False)).combine_chunks() if table.num_rows else pa.array([], pa.bool_())
    offsets = pa.array(np.zeros(table.num_rows + 1, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array([], type=pa.int64()), mask=missing)


def write_parquet(table, target: str) -> None:
    """Writes ``table`` to ``target`` atomically (zstd, row groups of :data:`ROW_GROUP` rows)."""
    import pyarrow.parquet as pq

    from audiotree.fs import atomic_file

    with atomic_file(target, suffix=".parquet") as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=ROW_GROUP)

"""The segment half of an index build (:func:`audiotree.index.build_index` with ``segments=``).

``segments`` is a segment list (a CSV/TSV/JSONL/Parquet path, a
``pyarrow.Table``, a ``{column: values}`` mapping or a list of row dicts:
``path``, ``start``, ``end`` seconds, optional ``id`` and ``recording``, plus
label columns; see :mod:`audiotree.index.segments`). The index then has one
row per segment (the segment columns of :mod:`audiotree.index.table_schema`), its
labels those of the segment (a ``text`` column is free text: strings in
items); ``labels=`` still joins per-file labels to every segment of a file.
Each recording is opened and probed once however many segments it has
(:func:`audiotree.index._work.index_segments`); recordings with no segment
are left out. A segment build re-reads every recording (no rows are reused
from an existing ``out`` or an interrupted build).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Sequence

from audiotree.index.table_schema import require_pyarrow
from audiotree.io import storage

__all__ = ["ORDER", "plan", "segments_by_file", "with_segment_columns", "merge_specs"]

#: The sort keys after a build's own: a recording's segments in time order.
ORDER = [("start", "ascending"), ("end", "ascending")]


def plan(segments: Any, found: list, described: dict) -> tuple[Any, list, dict | None]:
    """``(segment table, the found files that have segments, {path: windows})``; ``segments=None``: no change."""
    from audiotree.index.segments import read_segments

    if segments is None:
        return None, found, None
    table = read_segments(segments)
    if isinstance(segments, (str, os.PathLike)):
        described["segments"] = table.where
    return (table, *segments_by_file(table, found))


def merge_specs(segment_specs: dict, specs: dict, label_source: Any, segments: Any) -> dict:
    """The label specs of the segment list and of the labels file; a column may come from one, not both."""
    clash = sorted(set(specs) & set(segment_specs))
    if clash:
        raise ValueError(f"Label column(s) {clash} are in both the labels file {label_source.path} and the "
                         f"segment list {segments.where}; rename one.")
    return {**segment_specs, **specs}


def segments_by_file(table: Any, found: list) -> tuple[list, dict]:
    """The found files that have segments, and ``{path: [(segment row, start, end), ...]}``."""
    from audiotree.index.segments import missing_recording

    listed = {p for p, _, _ in found}
    windows: dict[str, list] = {}
    columns = table.table
    channels = (columns.column("audio_channels").to_pylist() if "audio_channels" in columns.column_names
                else [None] * columns.num_rows)
    for k, (p, start, end) in enumerate(zip(columns.column("path").to_pylist(), columns.column("start").to_pylist(),
                                            columns.column("end").to_pylist())):
        if p not in listed:
            exists = storage.exists(p) if storage.is_url(p) else os.path.exists(p)
            raise missing_recording(table, k, p, exists)
        windows.setdefault(p, []).append((k, start, end) if channels[k] is None else (k, start, end, channels[k]))
    unused = len(listed) - len(windows)
    if unused:
        warnings.warn(f"{unused} indexed file(s) have no segment in {table.where}; they are left out of the index.",
                      UserWarning, stacklevel=5)
    return [f for f in found if f[0] in windows], windows


def with_segment_columns(table, rows: Sequence[dict], segments: Any, previous: Any) -> tuple[Any, dict]:
    """``table`` (the rows of a segment build, in order) with the segment columns and the segment list's labels,
    and the labels' specs (``previous``: the updated index's string labels, as
    :func:`audiotree.index.labels.label_columns` takes them); ``segments=None``: ``(table, {})``."""
    if segments is None:
        return table, {}
    pa = require_pyarrow()
    from audiotree.index.labels import append_label_columns
    from audiotree.index.segments import missing_channels, no_frames, past_end, segment_label_columns

    for r in rows:
        if r.get("past_end") is not None:
            raise past_end(segments, r["segment"], r["end"], r["past_end"], r["path"])
        if r.get("no_frames") is not None:
            raise no_frames(segments, r["segment"], r["start"], r["end"], r["no_frames"], r["path"])
        if r.get("missing_channels") is not None:
            raise missing_channels(segments, r["segment"], r["missing_channels"], r["path"])
    take = pa.array([r["segment"] for r in rows], type=pa.int64())
    source = segments.table
    for name in ("id", "recording"):
        table = table.append_column(name, source.column(name).take(take))
    if "audio_channels" in source.column_names:  # (only a list that puts a segment on some channels has it)
        table = table.append_column("audio_channels", source.column("audio_channels").take(take))
    for name in ("start", "end"):  # as read: an open end is the file's end
        table = table.append_column(name, pa.array([r[name] for r in rows], type=pa.float64()))
    columns, specs = segment_label_columns(segments, take.to_pylist(), previous)
    return append_label_columns(table, columns), specs

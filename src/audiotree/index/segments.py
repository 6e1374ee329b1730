"""Segment lists: the utterances of long recordings, read, validated and joined to an index build.

A segment list is a table with one row per segment: ``path`` (the recording;
a relative path starts from the list's own folder), ``start`` and ``end``
(seconds within the file, ``start < end``; an empty ``end`` runs to the end of the file), optionally ``id`` (unique),
``recording`` (the recording's id) and ``audio_channels`` (the file's channels the segment is on, a list of
indices: one speaker of a stereo call; empty for all), and any label columns (strings or
numbers: a transcript, a speaker, a gender). It is a CSV, TSV, JSONL or
Parquet file (``audiotree index ... --segments SEGMENTS.csv``), or, from
Python, a ``pyarrow.Table``, a ``{column: values}`` mapping or a list of row
dicts (``build_index(..., segments=...)``; the importers of
:mod:`audiotree.formats.kaldi` and :mod:`audiotree.formats.lhotse` pass one).

Bad input is refused before any audio is decoded, with a ``ValueError`` naming
the list and the line (CSV: the header is line 1; JSONL: line 1 is the first
row; Parquet and Python tables: 1-based row numbers): a missing column, an
empty path, a start or end that is not a finite number, ``end <= start``, a
negative start, an id used twice (both lines named), the same ``(path, start,
end)`` listed twice, and a recording that is not among the indexed files. After
the recordings' headers are read (once per recording, however many segments it
has), a segment ending more than :data:`END_TOLERANCE_SECONDS` past its file's
end is refused the same way (within the tolerance it is clipped to the end).

>>> table = read_segments([{"path": "/data/a.wav", "start": 0.0, "end": 1.5, "text": "hi"}])
>>> table.num_rows, table.label_names
(1, ['text'])
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Any, Mapping, Sequence

import numpy as np

from audiotree.index.table_schema import RESERVED_COLUMNS, require_pyarrow
from audiotree.validation import is_int

__all__ = ["SegmentTable", "read_segments", "segment_label_columns", "END_TOLERANCE_SECONDS"]

#: A segment may end this far past its file's end (header rounding) and is clipped; further is an error.
END_TOLERANCE_SECONDS = 0.01
_STRUCTURAL = ("path", "start", "end", "id", "recording", "audio_channels")
#: The most channels a segment can name (they travel as a bit mask).
MAX_CHANNEL = 62
_SHOWN = 3


@dataclasses.dataclass(frozen=True, eq=False)
class SegmentTable:
    """A validated segment list.

    Attributes:
      where: the list's file (or ``"segments"`` for an in-memory table), for messages.
      table: a ``pyarrow.Table`` with ``path`` (absolute or a URL), ``start``,
        ``end`` (float64), ``id`` and ``recording`` (string, null when not
        given) and the label columns.
      lines: ``(n,)`` the line (or row) number of each segment in ``where``.
      line_word: ``"line"`` or ``"row"``.
      text_columns: the label columns that are free text (transcripts).
    """

    where: str
    table: Any
    lines: np.ndarray
    line_word: str = "line"
    text_columns: tuple[str, ...] = ()

    @property
    def num_rows(self) -> int:
        return int(self.table.num_rows)

    @property
    def label_names(self) -> list[str]:
        return [n for n in self.table.column_names if n not in _STRUCTURAL]

    def at(self, row: int) -> str:
        """``"FILE line N"`` of segment ``row``."""
        return f"{self.where} {self.line_word} {int(self.lines[row])}"

    def digest(self) -> str:
        """A hash of the list's content (what decides whether an interrupted build's parts still apply)."""
        import hashlib

        import pyarrow as pa

        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.table.schema) as writer:
            writer.write_table(self.table)
        return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()[:16]


def _fail(where: str, message: str) -> ValueError:
    return ValueError(f"Segments {where}: {message}")


def _read_file(path: str, text_columns: Sequence[str]):
    """``(table, lines or the first row's line number, "line"/"row")`` of a segment list file."""
    pa = require_pyarrow()
    import pyarrow.csv
    import pyarrow.json
    import pyarrow.parquet as pq

    if not os.path.isfile(path):
        raise FileNotFoundError(f"Segments file not found: {path}.")
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext in (".csv", ".tsv"):
            table, record_lines = _read_csv(path, "\t" if ext == ".tsv" else ",", text_columns)
            return table, (record_lines if len(record_lines) == table.num_rows else 2), "line"
        if ext in (".jsonl", ".ndjson", ".json"):
            return pyarrow.json.read_json(path), 1, "line"
        if ext in (".parquet", ".pq"):
            return pq.read_table(path), 1, "row"
    except pa.ArrowInvalid as exc:
        raise _fail(path, f"cannot be read as a table: {' '.join(str(exc).split())}. Every column must hold one "
                          "type and every row the same columns.") from None
    raise _fail(path, f"unsupported extension {ext!r}; use .csv, .tsv, .jsonl or .parquet.")


_LEADING_ZERO = re.compile(r"^[+-]?0[0-9]")


def _read_csv(path: str, delimiter: str, text_columns: Sequence[str]):
    """A CSV/TSV segment list: ``(table, the line each record starts on)``.

    Every column but ``start`` and ``end`` is read as text, then a label column
    that is not declared text becomes numbers (or booleans) only when every
    value is one and none has a leading zero: ``"007"``, ``"0800"`` and ids
    stay the strings they are. A byte-order mark (Excel's "CSV UTF-8") is not
    part of the first column's name. Line numbers count a quoted field's
    line breaks and blank lines, as an editor shows them.
    """
    import csv

    pa = require_pyarrow()
    import pyarrow.csv

    header: list[str] | None = None
    starts: list[int] = []
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter=delimiter)
        consumed = 0
        try:
            for record in reader:
                line, consumed = consumed + 1, reader.line_num
                if not record:  # a blank line (the table skips it too)
                    continue
                if header is None:
                    header = record
                else:
                    starts.append(line)
        except csv.Error as exc:
            raise _fail(f"{path} line {reader.line_num}", f"is not valid CSV ({exc}).") from None
    names = header or []
    types = {name: pa.string() for name in names if name not in ("start", "end")}
    table = pyarrow.csv.read_csv(path, parse_options=pyarrow.csv.ParseOptions(delimiter=delimiter,
                                                                               newlines_in_values=True),
                                 convert_options=pyarrow.csv.ConvertOptions(column_types=types))
    for name in table.column_names:
        if name not in _STRUCTURAL and name not in text_columns:
            table = table.set_column(table.column_names.index(name), name, _typed(table.column(name)))
    return table, starts


def _typed(column: Any):
    """A label column read as text, as numbers or booleans when every value is one (see :func:`_read_csv`)."""
    pa = require_pyarrow()
    values = column.to_pylist()
    present = [v for v in values if v not in (None, "")]
    if not present:
        return pa.nulls(len(values))
    if {v.strip().lower() for v in present} <= {"true", "false"}:
        return pa.array([None if v in (None, "") else v.strip().lower() == "true" for v in values], pa.bool_())
    if any(_LEADING_ZERO.match(v.strip()) for v in present):
        return column
    filled = pa.array([None if v in (None, "") else v.strip() for v in values], pa.string())
    for kind in (pa.int64(), pa.float64()):
        try:
            return filled.cast(kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    return column


def _as_table(segments: Any):
    pa = require_pyarrow()
    if isinstance(segments, pa.Table):
        return segments
    if isinstance(segments, Mapping):
        return pa.table({k: list(v) for k, v in segments.items()})
    if isinstance(segments, Sequence) and not isinstance(segments, (str, bytes)):
        rows = list(segments)
        if not rows or not all(isinstance(r, Mapping) for r in rows):
            raise TypeError("segments must be a path, a pyarrow.Table, a {column: values} mapping or a non-empty list "
                            "of row dicts.")
        # Every key of every row (from_pylist would keep only the first row's keys, dropping later ones' labels).
        keys = list(dict.fromkeys(k for r in rows for k in r))
        return pa.table({k: [r.get(k) for r in rows] for k in keys})
    raise TypeError(f"segments must be a path, a pyarrow.Table, a mapping or a list of dicts, got "
                    f"{type(segments).__name__}.")


def _check_label_types(table: Any, where: str) -> None:
    """Every label column is a string or number column."""
    pa = require_pyarrow()
    for field in table.schema:
        if field.name in _STRUCTURAL:
            continue
        t = field.type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)
                or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_null(t)):
            raise _fail(where, f"label column {field.name!r} has type {t}; labels must be strings or numbers.")


def read_segments(segments: Any, *, where: str | None = None, lines: Sequence[int] | None = None,
                  root: str | None = None, text_columns: Sequence[str] | None = None) -> SegmentTable:
    """Reads and validates a segment list (see the module docstring).

    Args:
      segments: a CSV/TSV/JSONL/Parquet path, a ``pyarrow.Table``, a
        ``{column: values}`` mapping or a list of row dicts.
      where: the name used in messages (default: the path, or ``"segments"``).
      lines: each row's line number in ``where`` (an importer's own file);
        default: from the file's format, else 1-based row numbers.
      root: the folder relative paths start from (default: the list's folder,
        or the working directory for an in-memory table).
      text_columns: label columns of free text (strings in items, never a
        category); default: ``text`` (a transcript) when the list has it.
        String columns of many distinct values are detected as text anyway.
    """
    pa = require_pyarrow()
    from audiotree.io import storage

    if isinstance(segments, SegmentTable):
        return segments
    first, word = 1, "row"
    if isinstance(segments, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(segments))
        declared = ("text",) if text_columns is None else (
            (text_columns,) if isinstance(text_columns, str) else tuple(text_columns))
        table, lines_read, word = _read_file(path, declared)
        if isinstance(lines_read, int):
            first = lines_read
        elif lines is None:
            lines = lines_read
        where = where or path
        root = root if root is not None else os.path.dirname(path)
    else:
        table = _as_table(segments)
        where = where or "segments"
        root = root if root is not None else os.getcwd()
    numbers = np.asarray(lines, dtype=np.int64) if lines is not None else np.arange(table.num_rows) + first
    if lines is not None:
        word = "line"
    if len(numbers) != table.num_rows:
        raise ValueError(f"{where}: {len(numbers)} line numbers for {table.num_rows} segments.")
    result = SegmentTable(where=where, table=table, lines=numbers, line_word=word)
    missing = [c for c in ("path", "start", "end") if c not in table.column_names]
    if missing:
        raise _fail(where, f"has no column(s) {missing} (columns: {table.column_names}); a segment list needs "
                           "path, start and end (seconds), plus any label columns.")
    if table.num_rows == 0:
        raise _fail(where, "holds no segments.")
    clashing = sorted(set(table.column_names) & RESERVED_COLUMNS - {"path"})
    if clashing:
        raise _fail(where, f"label column(s) {clashing} clash with the index's own columns; rename them.")
    _check_label_types(table, where)
    columns: dict[str, Any] = {}
    for name in ("path", "id", "recording"):
        if name in table.column_names:
            col = table.column(name)
            if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_null(col.type)):
                col = col.cast(pa.string())
            columns[name] = col.to_pylist()
        else:
            columns[name] = [None] * table.num_rows
    starts = _seconds(result, table, "start")
    ends = _seconds(result, table, "end", open_end=True)
    paths = columns["path"]
    for i, p in enumerate(paths):
        if p is None or not str(p).strip():
            raise _fail(result.at(i), "has an empty path.")
    bad = np.flatnonzero(starts < 0)
    if bad.size:
        raise _fail(result.at(int(bad[0])), f"starts at {starts[bad[0]]} s; a start must be >= 0.")
    bad = np.flatnonzero(ends <= starts)
    if bad.size:
        i = int(bad[0])
        raise _fail(result.at(i), f"ends at {ends[i]} s, not after its start {starts[i]} s (end <= start); "
                                  f"{bad.size} segment(s) are empty or reversed. Fix or drop them.")

    def absolute(p: str) -> str:
        if storage.is_url(p):
            return p
        return os.path.normpath(os.path.join(root, os.path.expanduser(p)))

    resolved = [absolute(str(p)) for p in paths]
    seen: dict = {}
    for i, key in enumerate(columns["id"]):
        if key is None:
            continue
        if key in seen:
            raise _fail(where, f"segment id {key!r} is used twice: {result.line_word}s {int(numbers[seen[key]])} "
                               f"and {int(numbers[i])}; every segment needs its own id.")
        seen[key] = i
    channels = _channel_lists(result, table)
    spans: dict = {}
    for i, span in enumerate(zip(resolved, starts.tolist(), ends.tolist(), [None if c is None else tuple(c)
                                                                          for c in channels])):
        if span in spans:
            raise _fail(where, f"{result.line_word}s {int(numbers[spans[span]])} and {int(numbers[i])} list the same "
                               f"segment ({span[0]!r}, {span[1]} to {span[2]} s); drop one.")
        spans[span] = i
    labels = {n: table.column(n) for n in result.label_names}
    clean = pa.table({
        "path": pa.array(resolved, pa.string()), "start": pa.array(starts, pa.float64()),
        "end": pa.array(ends, pa.float64()), "id": pa.array(columns["id"], pa.string()),
        "recording": pa.array(columns["recording"], pa.string()),
        **({"audio_channels": pa.array(channels, pa.list_(pa.int64()))} if any(c is not None for c in channels)
           else {}),
        **labels,
    })
    if text_columns is None:
        texts = tuple(n for n in ("text",) if n in result.label_names)
    else:
        texts = (text_columns,) if isinstance(text_columns, str) else tuple(text_columns)
        unknown = sorted(set(texts) - set(result.label_names))
        if unknown:
            raise _fail(where, f"has no label column(s) {unknown} declared text (labels: {result.label_names}).")
    return dataclasses.replace(result, table=clean, text_columns=texts)


def _channel_lists(result: SegmentTable, table: Any) -> list:
    """Each segment's ``audio_channels`` (the file's channels it is on; ``None``: all), checked."""
    if "audio_channels" not in table.column_names:
        return [None] * table.num_rows
    out = []
    for i, value in enumerate(table.column("audio_channels").to_pylist()):
        picked = [value] if is_int(value) else value
        if isinstance(value, str):  # a CSV cell: "1", or "0 1" / "0;1"
            words = value.replace(";", " ").replace(",", " ").split()
            picked = [int(w) if w.isdigit() else w for w in words] or None
        if picked is not None and (not isinstance(picked, list) or not picked or len(set(picked)) != len(picked)
                                   or not all(is_int(c) and 0 <= c <= MAX_CHANNEL for c in picked)):
            raise _fail(result.at(i), f"audio_channels is {value!r}; it names the file's channels the segment is on "
                                      f"(distinct indices 0 to {MAX_CHANNEL}), or is empty for all of them.")
        out.append(None if picked is None else sorted(picked))
    return out


def segment_label_columns(segments: SegmentTable, rows: Sequence[int],
                          previous: Mapping[str, Any] | None = None) -> tuple[list[tuple[str, Any]], dict[str, dict]]:
    """The segment list's label columns taken at its rows ``rows`` (the index's rows, in order), and their specs.

    Typed as :func:`audiotree.index.labels.label_columns` types a labels file's
    (categories with ids, numbers, text); ``previous`` as it takes it.
    """
    pa = require_pyarrow()
    from audiotree.index.labels import LabelMatch, LabelSource, label_columns

    names = segments.label_names
    if not names:
        return [], {}
    key = "__segment__"
    table = pa.table({key: pa.array(range(segments.num_rows), pa.int64()),
                      **{n: segments.table.column(n) for n in names}})
    source = LabelSource(segments.where, key=key, missing="null", text_columns=segments.text_columns)
    matched = LabelMatch(source=source, table=table, row_of={k: k for k in range(segments.num_rows)})
    return label_columns(matched, list(rows), previous)


def _seconds(result: SegmentTable, table: Any, name: str, open_end: bool = False) -> np.ndarray:
    pa = require_pyarrow()
    col = table.column(name)
    try:
        values = col.cast(pa.float64()).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        values = []
        for v in col.to_pylist():
            try:
                values.append(float(v))
            except (TypeError, ValueError):
                values.append(None)
    out = np.array([math.nan if v is None else v for v in values], dtype=np.float64)
    empty = np.array([v is None for v in col.to_pylist()], dtype=bool)
    bad = np.flatnonzero(~np.isfinite(out) & ~(empty & open_end))
    if bad.size:
        i = int(bad[0])
        raise _fail(result.at(i), f"{name} is {col[i].as_py()!r}, not a finite number of seconds.")
    return out


def past_end(table: SegmentTable, row: int, end: float, duration: float, path: str) -> ValueError:
    """The error for segment ``row`` ending at ``end`` s in a file of ``duration`` s."""
    return _fail(table.at(row), f"ends at {end:.3f} s, past the end of '{path}' ({duration:.3f} s). The segment list "
                                "does not belong to this recording, or the recording was truncated; fix the segment "
                                "or the file.")


def no_frames(table: SegmentTable, row: int, start: float, end: float, rate: int, path: str) -> ValueError:
    """The error for segment ``row`` whose span rounds to no sample of its file (``rate`` Hz)."""
    return _fail(table.at(row), f"spans {start} to {end} s, which holds no sample of '{path}' at {rate} Hz (both "
                                "ends round to the same sample); widen the segment or drop it.")


def missing_channels(table: SegmentTable, row: int, channels: int, path: str) -> ValueError:
    """The error for segment ``row`` on channels its file (of ``channels`` channels) does not have."""
    return _fail(table.at(row), f"is on channel(s) {table.table.column('audio_channels')[row].as_py()} of '{path}', "
                                f"which has {channels} channel(s) (indices start at 0); fix the segment's channels.")


def missing_recording(table: SegmentTable, row: int, path: str, exists: bool) -> ValueError:
    """The error for segment ``row`` whose recording is not among the indexed files."""
    if not exists:
        why = "does not exist"
    else:
        why = "is not among the indexed files (add its folder to SOURCES)"
    return _fail(table.at(row), f"names the recording '{path}', which {why}. Fix the path (relative paths start from "
                                "the segment list's folder) or add the recording.")

"""Opening an index: validation, paths, filters, labels and staleness.

:func:`open_index` reads only the columns asked for (the profile column is
large and is left on disk unless requested), validates the metadata header
(a newer major version is refused) and the schema, and checks that no path
escapes the index's root. Nothing else is touched: no folder walk, no header
read. Staleness (a file whose size or modification time differs from its row)
is checked per file when it is read, under a policy (:data:`ON_STALE`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import numpy as np

from audiotree.commands import index_refresh_command
from audiotree.errors import AudioReadError
from audiotree.index.quality import is_quality
from audiotree.index.table_schema import (BASE_COLUMNS, OPTIONAL_COLUMNS, SEGMENT_COLUMNS, accepted_types, arrow_schema,
                                    decode_metadata, require_pyarrow)
from audiotree.index.trust import check_profiles, resolve_root
from audiotree.io import storage
from audiotree.io.remote_file import open_input
from audiotree.validation import check_choice

__all__ = ["CorpusIndex", "open_index", "ON_STALE", "StaleFileError", "check_on_stale"]

#: What a reader does with a file that changed since its row was made:
#: raise (default), re-read the file's header as it is now, or skip the item;
#: ``"trust"`` makes no check at all (no lookup, no request: the caller vouches
#: that the files are the ones indexed). The check is one ``stat`` per item for
#: local files and one lookup per file per process on object storage
#: (:mod:`audiotree.index.freshness`).
ON_STALE = ("raise", "reprobe", "skip", "trust")
_DEFAULT_COLUMNS = ("path", "group", "size", "mtime_ns", "sample_rate", "channels", "frames", "duration", "readable")


class StaleFileError(ValueError):
    """A file changed (or vanished) since its index row was made; the message says how to refresh."""

    def __init__(self, message: str, file_path: str | None = None):
        super().__init__(message)
        self.file_path = file_path

    def __reduce__(self):
        return (type(self), (str(self), self.file_path))


def check_on_stale(value: str) -> str:
    return check_choice(value, "on_stale", ON_STALE, renamed={"error": "raise"})


def _numpy(column) -> np.ndarray:
    """An Arrow column as NumPy: bools, floats (null -> NaN), ints (with nulls: an object
    array), else an object array of Python values.

    Read through the buffers: pyarrow's own ``to_numpy`` imports pandas (~100 MB,
    most of a second), which a dataset's start-up must not pay for.
    """
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    kind = column.type
    if column.null_count:  # (fill_null imports pandas too)
        values = column.to_pylist()
        if pa.types.is_floating(kind):
            return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        if pa.types.is_boolean(kind):
            return np.array([bool(v) for v in values], dtype=bool)
        return np.array(values, dtype=object)
    if pa.types.is_boolean(kind):
        return _from_buffer(column.cast(pa.uint8()), np.uint8).astype(bool)
    if pa.types.is_floating(kind) or pa.types.is_integer(kind):
        return _from_buffer(column, np.dtype(kind.to_pandas_dtype()))
    return np.array(column.to_pylist(), dtype=object)


def _from_buffer(column, dtype) -> np.ndarray:
    data = np.frombuffer(column.buffers()[1], dtype=dtype)
    return data[column.offset:column.offset + len(column)].copy()


def _read_failure(path: str, exc: BaseException) -> ValueError:
    return ValueError(
        f"{path}: not a readable Parquet file ({' '.join(str(exc).split())}). It may be truncated or damaged "
        f"(an interrupted copy?); rebuild it with `audiotree index SOURCES --out {path}`."
    )


def _check_paths(column, where: str) -> None:
    """Refuses stored paths that could leave the root (vectorised over the column)."""
    import pyarrow.compute as pc

    bad = pc.or_(
        pc.match_substring_regex(column, r"(^|[\\/])\.\.([\\/]|$)"),
        pc.or_(pc.match_substring_regex(column, r"^([\\/]|[A-Za-z]:)"), pc.match_substring(column, "\x00")),
    )
    bad = pc.or_(bad, pc.equal(pc.utf8_length(column), 0))
    if pc.any(bad).as_py():
        rows = np.flatnonzero(_numpy(bad))
        example = column[int(rows[0])].as_py()
        raise ValueError(
            f"{where}: {len(rows)} path(s) escape the index's root, e.g. row {int(rows[0])}: {example!r}; paths must be "
            "relative to the root without '..'. The index was edited or damaged; rebuild it."
        )


@dataclasses.dataclass(frozen=True, eq=False)
class CorpusIndex:
    """An opened index: validated metadata and the requested columns.

    Attributes:
      path: the index file.
      meta: its ``audiotree`` metadata (see :mod:`audiotree.index.table_schema`).
      root: absolute folder the stored paths are relative to, or ``None``
        when they are absolute.
      table: a ``pyarrow.Table`` of the columns read.
    """

    path: str
    meta: dict
    root: str | None
    table: Any

    # ------------------------------------------------------------- columns
    def __len__(self) -> int:
        return int(self.table.num_rows)

    @property
    def label_names(self) -> list[str]:
        return list(self.meta["labels"])

    @property
    def has_profile(self) -> bool:
        return bool(self.meta["loudness"].get("enabled"))

    @property
    def has_seek_points(self) -> bool:
        """True when the index has the ``seek_points`` column (format 1.2 on; see :mod:`audiotree.index.table_schema`)."""
        return tuple(self.meta.get("format_version") or (1, 0)) >= (1, 2)

    @property
    def has_segments(self) -> bool:
        """True for a segment index (one row per segment of a recording; see :mod:`audiotree.index.table_schema`)."""
        return "start" in self.table.column_names

    @property
    def mono(self) -> bool:
        return bool(self.meta["loudness"].get("mono", True))

    def column(self, name: str) -> np.ndarray:
        """Column ``name`` as NumPy (strings as an object array; nulls as None or NaN)."""
        if name not in self.table.column_names:
            raise KeyError(f"{self.path}: column {name!r} was not read (or does not exist); the index has "
                           f"{self.table.column_names}.")
        return _numpy(self.table.column(name))

    def paths(self) -> list[str]:
        """Every row's file as a usable path (joined to the root when there is one)."""
        stored = self.table.column("path").to_pylist()
        if self.root is None:
            return stored
        join = os.path.join
        root = self.root
        return [join(root, p) for p in stored]

    def refresh_command(self) -> str:
        """The ``audiotree index`` command line that refreshes this index (see :mod:`audiotree.commands`)."""
        return index_refresh_command(self.path, self.meta)

    def profile(self, row: int) -> np.ndarray | None:
        """Row ``row``'s loudness profile (float32 block mean squares), or ``None`` when it has none.

        Needs the ``profile`` column (``open_index(path, columns="all")``);
        :func:`audiotree.index.window_loudness` turns it into window loudness.
        """
        if "profile" not in self.table.column_names:
            raise KeyError(f"{self.path}: the profile column was not read; open the index with columns='all' or "
                           "a columns= list that includes 'profile'.")
        value = self.table.column("profile")[int(row)]
        if not value.is_valid:
            return None
        from audiotree.index.profile import decode_profile

        return decode_profile(_numpy(value.values))

    # -------------------------------------------------------------- labels
    def label_values(self, name: str) -> Any:
        """One label column per row: category ids (int32, ``-1`` for none), numbers as stored
        (an integer column with empty values reads as float64 with NaN), or for a text
        label a :class:`~audiotree.index.text.TextColumn` (strings read per row)."""
        spec = self.meta["labels"].get(name)
        if spec is None:
            raise ValueError(f"{self.path} has no label column {name!r}; its labels are {self.label_names}. "
                             "Rebuild the index with --labels naming a file that has it.")
        if spec["kind"] == "text":
            from audiotree.index.text import TextColumn

            return TextColumn.from_arrow(self.table.column(name))
        if spec["kind"] == "category" and "ids" in spec:
            ids = self.table.column(spec["ids"])
            values = _numpy(ids) if not ids.null_count else np.array(
                [-1 if v is None else v for v in ids.to_pylist()], dtype=np.int32)
            values = values.astype(np.int32, copy=False)
            if values.size and (values.min() < -1 or values.max() >= spec["size"]):
                raise ValueError(f"{self.path}: label column {spec['ids']!r} holds ids outside [-1, {spec['size']}); "
                                 "the index was edited or damaged. Rebuild it.")
            return values
        if spec["kind"] == "category":
            ids = {value: i for i, value in enumerate(spec["vocabulary"])}
            ids[None] = -1
            try:
                return np.array([ids[v] for v in self.table.column(name).to_pylist()], dtype=np.int32)
            except KeyError as exc:
                raise ValueError(f"{self.path}: label column {name!r} holds {exc.args[0]!r}, which is missing from "
                                 "its vocabulary; the index was edited or damaged. Rebuild it.") from None
        values = _numpy(self.table.column(name))
        if values.dtype == object:  # an integer column with empty values: float64, empty as NaN (as pandas does)
            values = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        return values

    def vocabulary(self, name: str) -> list:
        """A category label's values by id (``None`` at a retired id: its value left the index)."""
        spec = self.meta["labels"].get(name) or {}
        if spec.get("kind") != "category":
            raise ValueError(f"{self.path}: label column {name!r} is not a category column.")
        if "ids" not in spec:
            return list(spec["vocabulary"])
        ids = self.label_values(name)
        vocab: list = [None] * spec["size"]
        present, first = np.unique(ids, return_index=True)
        keep = present >= 0
        strings = self.table.column(name).take(first[keep]).to_pylist()
        for i, value in zip(present[keep].tolist(), strings):
            vocab[i] = value
        return vocab

    # ------------------------------------------------------------ selection
    def select(self, *, readable: bool = True, min_duration: float | None = None,
               max_duration: float | None = None) -> np.ndarray:
        """Row numbers (int64, ascending) passing the filters."""
        keep = np.ones(len(self), dtype=bool)
        if readable:
            keep &= self.column("readable").astype(bool)
        if min_duration is not None or max_duration is not None:
            duration = np.asarray(self.column("duration"), dtype=np.float64)  # None -> NaN
            if min_duration is not None:
                keep &= duration >= float(min_duration)
            if max_duration is not None:
                keep &= duration <= float(max_duration)
        return np.flatnonzero(keep)

    # ------------------------------------------------------------ staleness
    def stale_rows(self, rows: Sequence[int] | None = None) -> list[int]:
        """Rows whose file's size or modification time differs now (or that vanished); stats each file."""
        paths = self.paths()
        sizes, mtimes = self.column("size"), self.column("mtime_ns")
        out = []
        for i in (range(len(self)) if rows is None else rows):
            if stat_differs(paths[i], int(sizes[i]), int(mtimes[i])) is not None:
                out.append(int(i))
        return out


def stat_differs(path: str, size: int, mtime_ns: int) -> str | None:
    """Why ``path`` no longer matches its row, or ``None`` when it does (one lookup, never remembered).

    Datasets check through :func:`audiotree.index.freshness.stale_reason`, which
    remembers a remote file's outcome per process.
    """
    from audiotree.index.freshness import change_reason, stat_of

    return change_reason(stat_of(path), size, mtime_ns)


def stale_message(path: str, reason: str, index_path: str, command: str) -> str:
    return (
        f"'{path}' changed since the corpus index {index_path} was built ({reason}). Refresh the index (only changed "
        f"files are re-read): {command} ; or pass on_stale='reprobe' (read the file as it is now) or on_stale='skip'."
    )


def open_index(path: str | os.PathLike, *, columns: Sequence[str] | None = None,
               labels: Sequence[str] | None = None, storage_options: dict | None = None,
               root: str | os.PathLike | None = None) -> CorpusIndex:
    """Opens and validates the index at ``path``, reading ``columns``.

    Args:
      path: an index written by :func:`audiotree.index.build_index`.
      columns: the columns to read (default: the base columns a dataset needs,
        plus every label column); ``"all"`` reads everything, profile included;
        ``()`` reads the metadata alone (validated, no row read: what a
        dataset over the column store needs, see :mod:`audiotree.index.columns`).
      labels: label columns to read as well; each must be one of the index's
        labels (else a ``ValueError`` naming the index and its labels).
      storage_options: fsspec options when ``path`` is a URL (``s3://``,
        ``gs://``, ...; see :mod:`audiotree.io.storage`). A remote index is
        read with ranged requests (the footer, then the wanted columns).
      root: where the index's relative paths start, when the corpus is not
        where the index says. Without it, the index's own ``root`` must stay
        inside the index's folder (:func:`audiotree.index.trust.resolve_root`).

    Raises:
      FileNotFoundError: no such file.
      ValueError: not a Parquet file (e.g. truncated), not an audiotree index,
        a newer major version, a column of the wrong type, a path escaping
        the root, a root outside the index's folder, or a loudness profile that
        does not fit its file (wrong length, NaN, infinite or negative). Each message names the file and what to do.
    """
    require_pyarrow()
    path = os.fspath(path)
    explicit = None if root is None else os.fspath(root)
    if storage.is_url(path):
        with storage.use_storage_options(storage_options):
            try:
                handle = open_input(path)
            except AudioReadError as exc:
                if "404" not in str(exc):
                    raise
                handle = None
        if handle is None:
            raise FileNotFoundError(f"Corpus index not found: {storage.redact(path)}. Build it with `audiotree index "
                                    f"SOURCES --out {storage.redact(path)}`.")
        with handle:
            return _open_index(path, handle, columns, labels, explicit)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Corpus index not found: {path}. Build it with `audiotree index SOURCES --out {path}`.")
    return _open_index(path, path, columns, labels, explicit)


def _empty_table(num_rows: int):
    """A table of no columns and ``num_rows`` rows (``len()`` of a metadata-only index)."""
    import pyarrow as pa

    return pa.table({"_": pa.nulls(num_rows)}).drop_columns(["_"])


def _check_segment_columns(path: str, schema: Any) -> None:
    """A segment index has all four segment columns, of their types (or none of them)."""
    if "start" not in schema.names and "end" not in schema.names:
        return
    missing = [name for name, _, _ in SEGMENT_COLUMNS if name not in schema.names]
    if missing:
        raise ValueError(f"{path}: the segment index has no {missing} column(s); it was edited or damaged. Rebuild it.")
    expected = arrow_schema(segments=True)
    wrong = [f"{name!r} is {schema.field(name).type}, expected {expected.field(name).type}"
             for name, _, _ in SEGMENT_COLUMNS if not schema.field(name).type.equals(expected.field(name).type)]
    if wrong:
        raise ValueError(f"{path}: segment column {'; '.join(wrong)}; rebuild the index.")


def _open_index(path: str, source: Any, columns: Sequence[str] | None, labels: Sequence[str] | None,
                explicit_root: str | None = None) -> CorpusIndex:
    pa = require_pyarrow()
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(source)
        schema = pf.schema_arrow
    except (pa.ArrowException, OSError, AudioReadError) as exc:
        raise _read_failure(path, exc) from None
    meta, _ = decode_metadata(schema.metadata, path)
    expected_schema = arrow_schema()
    names = set(schema.names)
    for name, _kind, _nullable in BASE_COLUMNS:
        if name in OPTIONAL_COLUMNS and name not in names:
            continue
        if name not in names:
            raise ValueError(f"{path}: the index has no {name!r} column; it was edited or damaged. Rebuild it.")
        actual = schema.field(name).type
        if not any(actual.equals(kind) for kind in accepted_types(name)):  # (1.0's float32 profiles are read too)
            raise ValueError(f"{path}: column {name!r} has type {actual}, expected {expected_schema.field(name).type}; "
                             "rebuild the index.")
    _check_segment_columns(path, schema)
    for name, spec in meta["labels"].items():
        for column in (name, spec.get("ids", name)):
            if column not in names:
                raise ValueError(f"{path}: label column {column!r} is listed in the metadata but missing; rebuild "
                                 "the index.")
    missing = [name for name in (labels or ()) if name not in meta["labels"] and not is_quality(name)]
    if missing:
        raise ValueError(
            f"{path} has no label column(s) {missing}; its labels are {list(meta['labels'])}. Rebuild the index "
            "with --labels naming a file that has them."
        )
    if columns is not None and not isinstance(columns, str) and len(columns) == 0:
        # Metadata only: what a dataset over the column store needs (no row is read).
        root = resolve_root(path, meta.get("root"), explicit_root)
        return CorpusIndex(path=path, meta=meta, root=root, table=_empty_table(pf.metadata.num_rows))
    if columns == "all":
        wanted = list(schema.names) + sorted(OPTIONAL_COLUMNS - names)
    else:
        wanted = list(dict.fromkeys(list(columns or _DEFAULT_COLUMNS) + ([] if columns else list(meta["labels"]))
                                    + list(labels or ())))
        unknown = [c for c in wanted if c not in names and c not in OPTIONAL_COLUMNS]
        if unknown:
            raise ValueError(f"{path}: no column(s) {unknown}; the index has {schema.names}.")
        if "path" not in wanted:
            wanted.insert(0, "path")
        # A segment row is its window: its bounds are read whatever the columns asked for.
        if "start" in schema.names:
            wanted += [name for name, _, _ in SEGMENT_COLUMNS if name not in wanted]
            if "audio_channels" in schema.names and "audio_channels" not in wanted:  # (segments on some channels)
                wanted.append("audio_channels")
        # A category label is read with its ids.
        wanted = list(dict.fromkeys(wanted + [meta["labels"][c]["ids"] for c in wanted
                                              if "ids" in meta["labels"].get(c, {})]))
    absent = [c for c in wanted if c not in names]  # optional columns an older index lacks: all null
    try:
        table = pf.read(columns=[c for c in wanted if c in names])
    except (pa.ArrowException, OSError, AudioReadError) as exc:
        raise _read_failure(path, exc) from None
    for name in absent:
        table = table.append_column(expected_schema.field(name), pa.nulls(table.num_rows, expected_schema.field(name).type))
    root = resolve_root(path, meta.get("root"), explicit_root)
    if root is not None:
        _check_paths(table.column("path"), path)
    if "profile" in table.column_names:
        needed = [c for c in ("readable", "frames", "sample_rate", "profile_step") if c not in table.column_names]
        facts = pf.read(columns=needed) if needed else table
        column = lambda name: (table if name in table.column_names else facts).column(name)  # noqa: E731
        check_profiles(path, table.column("profile"), column("frames"), column("sample_rate"),
                       column("profile_step"), column("readable"))
    return CorpusIndex(path=path, meta=meta, root=root, table=table)

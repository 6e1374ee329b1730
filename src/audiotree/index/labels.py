"""Per-file labels: read a CSV, JSONL or Parquet table and join it to the index.

A labels table has one row per file and a key column naming the file:

* ``match="path"`` (default): the key is a path; a relative one is taken
  relative to ``root`` (default: the labels file's own folder);
* ``match="relative"``: the key is the file's path relative to the source
  folder it was found under (``speech=data/speech`` -> ``spk1/a.wav``);
* ``match="stem"``: the key is the file name without its extension.

Every other column is a label. String columns become categories: their
vocabulary is stored in the index and a value's id is its position there
(sorted on a fresh build; an incremental build keeps the old ids and appends new
values), so ids are stable and pass through ``jit``, workers and
``AudioTree.batch`` as integers. Integer, float and boolean columns pass
through as numbers.

Bad input raises ``ValueError`` naming the labels file and the column or key:
a missing key column, empty or duplicate keys, a column of mixed types (JSONL
numbers in some rows and strings in others; a CSV column is typed by its values,
so one with any non-number is a string column), a column of an unsupported
type (lists, structs, dates), a label named like an index column, and (unless
``missing="null"``) indexed files with no label row.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import warnings
from typing import Any, Mapping, Sequence

from audiotree.index.schema import RESERVED_COLUMNS, require_pyarrow

__all__ = ["LabelSource", "read_labels", "join_labels", "as_label_source", "label_columns", "check_label_types"]

_MATCHES = ("path", "relative", "stem")
_MISSING = ("error", "null")
_SHOWN = 3


@dataclasses.dataclass(frozen=True)
class LabelSource:
    """Where a build's labels come from and how rows find their files.

    Attributes:
      path: a ``.csv``, ``.jsonl`` (``.ndjson``) or ``.parquet`` file.
      key: the column naming the file.
      match: ``"path"``, ``"relative"`` or ``"stem"`` (see the module docstring).
      root: folder that relative ``path`` keys start from (default: the labels
        file's folder).
      missing: ``"error"`` when an indexed file has no label row, or
        ``"null"`` to leave its labels empty.

    >>> LabelSource("meta/speakers.csv", key="utterance", match="stem").match
    'stem'
    >>> LabelSource("labels.csv", match="basename")
    Traceback (most recent call last):
    ValueError: labels match must be one of ('path', 'relative', 'stem'), got 'basename'.
    """

    path: str
    key: str = "path"
    match: str = "path"
    root: str | None = None
    missing: str = "error"

    def __post_init__(self) -> None:
        if self.match not in _MATCHES:
            raise ValueError(f"labels match must be one of {_MATCHES}, got {self.match!r}.")
        if self.missing not in _MISSING:
            raise ValueError(f"labels missing must be one of {_MISSING}, got {self.missing!r}.")
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"labels key must be a column name, got {self.key!r}.")


def as_label_source(labels: Any) -> LabelSource | None:
    if labels is None or isinstance(labels, LabelSource):
        return labels
    if isinstance(labels, (str, os.PathLike)):
        return LabelSource(os.fspath(labels))
    raise TypeError(f"labels must be a path or a LabelSource, got {type(labels).__name__}.")


def _fail(path: str, message: str) -> ValueError:
    return ValueError(f"Labels file {path}: {message}")


def read_labels(source: LabelSource):
    """The labels table (pyarrow), validated; see the module docstring for the errors."""
    pa = require_pyarrow()
    import pyarrow.csv
    import pyarrow.json
    import pyarrow.parquet as pq

    path = source.path
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Labels file not found: {path}.")
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext in (".csv", ".tsv"):
            options = pyarrow.csv.ParseOptions(delimiter="\t" if ext == ".tsv" else ",")
            # Keys are names, never numbers: "007" must stay "007".
            convert = pyarrow.csv.ConvertOptions(column_types={source.key: pa.string()})
            table = pyarrow.csv.read_csv(path, parse_options=options, convert_options=convert)
        elif ext in (".jsonl", ".ndjson", ".json"):
            table = pyarrow.json.read_json(path)
        elif ext in (".parquet", ".pq"):
            table = pq.read_table(path)
        else:
            raise _fail(path, f"unsupported extension {ext!r}; use .csv, .tsv, .jsonl or .parquet.")
    except pa.ArrowInvalid as exc:
        # pyarrow names the column and row, e.g. "Column(/speaker) changed from number to string in row 3".
        raise _fail(path, f"cannot be read as a table of labels: {' '.join(str(exc).split())}. Every column must "
                          "hold one type (all numbers or all strings) and every row the same columns.") from None
    if source.key not in table.column_names:
        raise _fail(path, f"has no key column {source.key!r} (columns: {table.column_names}); pass the column "
                          "that names the files as the labels key.")
    clashing = sorted(set(table.column_names) & RESERVED_COLUMNS - {source.key})
    if clashing:
        raise _fail(path, f"label column(s) {clashing} clash with the index's own columns; rename them.")
    check_label_types(table, path, skip=(source.key,))
    keys = table.column(source.key)
    if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)):
        keys = keys.cast(pa.string())
    values = keys.to_pylist()
    empty = [i for i, k in enumerate(values) if k is None or not str(k).strip()]
    if empty:
        raise _fail(path, f"{len(empty)} row(s) have an empty key {source.key!r} (first at row {empty[0] + 1}).")
    counts = collections.Counter(values)
    dupes = [k for k, n in counts.items() if n > 1]
    if dupes:
        shown = ", ".join(repr(k) for k in dupes[:_SHOWN])
        raise _fail(path, f"duplicate key(s) in column {source.key!r}: {shown}"
                          + (f" and {len(dupes) - _SHOWN} more" if len(dupes) > _SHOWN else "")
                          + "; each file may have one row.")
    return table.set_column(table.column_names.index(source.key), source.key, keys)


def _norm(path: str) -> str:
    return os.path.normcase(os.path.normpath(os.path.abspath(path)))


def _file_key(source: LabelSource, path: str, source_root: str) -> str:
    if source.match == "path":
        return _norm(path)
    if source.match == "relative":
        return os.path.relpath(os.path.abspath(path), os.path.abspath(source_root)).replace(os.sep, "/")
    return os.path.splitext(os.path.basename(path))[0]


def _label_key(source: LabelSource, key: str, root: str) -> str:
    if source.match == "path":
        return _norm(os.path.join(root, os.path.expanduser(key)))
    if source.match == "relative":
        return os.path.normpath(key).replace(os.sep, "/")
    return key


def join_labels(
    source: LabelSource,
    files: Sequence[str],
    source_roots: Sequence[str],
    previous: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, dict]]:
    """Joins the labels to ``files`` (absolute paths, each found under ``source_roots[i]``).

    Returns ``(columns, specs)``: ``{label: pyarrow array aligned with files}``
    and ``{label: {"kind": ...}}`` for the index metadata. ``previous`` holds
    the label specs of the index being updated, whose category ids are kept.
    """
    pa = require_pyarrow()
    table = read_labels(source)
    root = source.root if source.root is not None else os.path.dirname(os.path.abspath(source.path))
    label_keys = [_label_key(source, k, root) for k in table.column(source.key).to_pylist()]
    by_key: dict[str, int] = {}
    for row, key in enumerate(label_keys):
        if key in by_key:  # two spellings of one path (a/b.wav and a/./b.wav)
            raise _fail(source.path, f"rows {by_key[key] + 1} and {row + 1} name the same file ({key!r}).")
        by_key[key] = row
    file_keys = [_file_key(source, f, r) for f, r in zip(files, source_roots)]
    if source.match == "stem":
        seen: dict[str, str] = {}
        for f, k in zip(files, file_keys):
            if k in seen and k in by_key:
                raise _fail(source.path, f"match='stem' is ambiguous: {seen[k]!r} and {f!r} both have stem {k!r}; "
                                         "use match='relative' or 'path'.")
            seen[k] = f
    rows = [by_key.get(k) for k in file_keys]
    missing = [f for f, r in zip(files, rows) if r is None]
    if missing and source.missing == "error":
        shown = ", ".join(repr(f) for f in missing[:_SHOWN])
        raise _fail(source.path, f"no row for {len(missing)} indexed file(s): {shown}"
                                 + (f" and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else "")
                                 + f" (matching by {source.match} on column {source.key!r}). Add rows for them, "
                                 "fix the key column or match, or pass missing='null' (--labels-missing null).")
    unused = len(by_key) - len({r for r in rows if r is not None})
    if unused:
        warnings.warn(f"Labels file {source.path}: {unused} row(s) match no indexed file.", UserWarning, stacklevel=3)
    return label_columns(table, rows, previous, skip=(source.key,))


def check_label_types(table: Any, path: str, skip: Sequence[str] = ()) -> None:
    """Every column of ``table`` but ``skip`` is a string or number column; ValueError naming ``path``."""
    pa = require_pyarrow()
    for field in table.schema:
        if field.name in skip:
            continue
        t = field.type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)
                or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_null(t)):
            raise _fail(path, f"label column {field.name!r} has type {t}; labels must be strings or numbers.")


def label_columns(table: Any, rows: Sequence[int | None], previous: Mapping[str, Any] | None = None, *,
                  skip: Sequence[str] = ()) -> tuple[dict[str, Any], dict[str, dict]]:
    """The label columns of ``table`` (all but ``skip``) taken at ``rows`` (``None``: empty), and their specs."""
    pa = require_pyarrow()
    take = pa.array(rows, type=pa.int64())
    columns: dict[str, Any] = {}
    specs: dict[str, dict] = {}
    previous = previous or {}
    for name in table.column_names:
        if name in skip:
            continue
        col = table.column(name).combine_chunks().take(take)
        if pa.types.is_null(col.type):
            col = col.cast(pa.float64())
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            col = col.cast(pa.string())
            old = previous.get(name, {})
            vocab = list(old.get("vocabulary", [])) if old.get("kind") == "category" else []
            known = set(vocab)
            vocab += sorted({v for v in col.to_pylist() if v is not None and v not in known})
            specs[name] = {"kind": "category", "vocabulary": vocab}
        else:
            specs[name] = {"kind": "numeric"}
        columns[name] = col
    return columns, specs

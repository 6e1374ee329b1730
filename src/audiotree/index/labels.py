"""Per-file labels: read a CSV, JSONL or Parquet table and join it to the index.

A labels table has one row per file and a key column naming the file:

* ``match="path"`` (default): the key is a path; a relative one is taken
  relative to ``root`` (default: the labels file's own folder);
* ``match="relative"``: the key is the file's path relative to the source
  folder it was found under (``speech=data/speech`` -> ``spk1/a.wav``);
* ``match="stem"``: the key is the file name without its extension.

Keys and file names are compared after Unicode NFC normalisation, so a CSV
written on Linux (NFC) joins the decomposed (NFD) names macOS keeps on disk,
and the reverse. The table is read, checked and joined before any audio is
decoded: a bad labels file costs nothing.

Every other column is a label of one of three kinds:

* **numeric**: integer, float and boolean columns pass through as numbers. A
  CSV column is numeric when every value is a plain number (``7``, ``-2.5``,
  ``1e-3``); identifiers that only look numeric stay strings: a column holding
  ``007`` or ``07`` (a leading zero), or an integer beyond 64 bits, is a string
  column, so ``"007"``, ``"07"`` and ``"7"`` stay three values.
  ``numeric_columns`` declares columns numeric (``"007"`` then reads as 7).
* **category**: a string column of few distinct values (speakers, classes).
  Its values reach items as int32 ids: the id of a value is its position in
  the column's vocabulary, sorted on a fresh build (an incremental build keeps
  the old ids and appends new values). The ids are stored in the index's data,
  in the int32 column ``<name>#id`` beside the string column, never in the file
  footer; an id whose value left the index is retired (``None`` in
  :meth:`~audiotree.index.CorpusIndex.vocabulary`) and never reused.
* **text**: free text (transcripts) reaches items and batches as Python
  strings (a list in a batch). A string column is text when named in
  ``text_columns``; when it is named ``text``, ``transcript``, ``sentence``,
  ``normalized_text`` or ``txt`` (:data:`TEXT_NAMES`), whatever the size of
  the set, so a dev set of 200 transcripts and a train set of a million agree;
  or when it holds more than :data:`TEXT_MIN_DISTINCT` distinct values of
  which more than half are distinct (a transcript column, not a speaker column).

Bad input raises ``ValueError`` naming the labels file and the column or key:
a missing key column, a duplicated header column, empty or duplicate keys, a
column of mixed types (JSONL numbers in some rows and strings in others), a
column of an unsupported type (lists, structs, dates), a label named like an
index column, a declared numeric column holding a non-number, and (unless
``missing="null"``) indexed files with no label row: the message shows how
three keys resolved beside three unmatched files, and suggests the
``match`` that would join them.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import os
import unicodedata
import warnings
from typing import Any, Mapping, Sequence

from audiotree.index.table_schema import RESERVED_COLUMNS, ids_column, require_pyarrow
from audiotree.validation import check_choice
from audiotree.io.byte_cache import memoized

__all__ = ["LabelSource", "LabelMatch", "TEXT_MIN_DISTINCT", "TEXT_NAMES", "read_labels", "match_labels",
           "label_columns", "raw_label_columns", "typed_label_columns", "is_text_name",
           "append_label_columns", "as_label_source", "label_source_from"]

_MATCHES = ("path", "relative", "stem")
_MISSING = ("raise", "null")
_SHOWN = 3
#: A string column with more distinct values than this, more than half of them distinct, is text.
TEXT_MIN_DISTINCT = 256
#: Names of string labels that are text whatever their values look like (transcripts).
TEXT_NAMES = ("text", "transcript", "sentence", "normalized_text", "txt")
# The largest labels field (bytes) the CSV and JSON readers take: one block holds a whole field.
_MAX_FIELD = 1 << 30
_INT = r"^[+-]?(0|[1-9][0-9]*)$"
_FLOAT = r"^[+-]?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$|^[+-]?(inf|nan)$"
_BOOL = ("true", "false", "True", "False", "TRUE", "FALSE")


def _names(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    if not all(isinstance(v, str) and v for v in items):
        raise ValueError(f"{what} must be column names, got {value!r}.")
    return tuple(dict.fromkeys(items))


@dataclasses.dataclass(frozen=True)
class LabelSource:
    """Where a build's labels come from and how rows find their files.

    Attributes:
      path: a ``.csv``, ``.tsv``, ``.jsonl`` (``.ndjson``) or ``.parquet`` file.
      key: the column naming the file.
      match: ``"path"``, ``"relative"`` or ``"stem"`` (see the module docstring).
      root: folder that relative ``path`` keys start from (default: the labels
        file's folder).
      missing: ``"raise"`` when an indexed file has no label row, or
        ``"null"`` to leave its labels empty.
      text_columns: columns that are free text (strings in items), whatever
        their values look like.
      numeric_columns: columns that are numbers, whatever their values look
        like (``"007"`` reads as 7).

    >>> LabelSource("meta/speakers.csv", key="utterance", match="stem").match
    'stem'
    >>> LabelSource("labels.csv", text_columns="text").text_columns
    ('text',)
    >>> LabelSource("labels.csv", match="basename")
    Traceback (most recent call last):
    ValueError: labels match must be one of ('path', 'relative', 'stem'), got 'basename'.
    """

    path: str
    key: str = "path"
    match: str = "path"
    root: str | None = None
    missing: str = "raise"
    text_columns: Sequence[str] = ()
    numeric_columns: Sequence[str] = ()

    def __post_init__(self) -> None:
        if self.match not in _MATCHES:
            raise ValueError(f"labels match must be one of {_MATCHES}, got {self.match!r}.")
        check_choice(self.missing, "labels missing", _MISSING, renamed={"error": "raise"})
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"labels key must be a column name, got {self.key!r}.")
        object.__setattr__(self, "text_columns", _names(self.text_columns, "text_columns"))
        object.__setattr__(self, "numeric_columns", _names(self.numeric_columns, "numeric_columns"))
        both = sorted(set(self.text_columns) & set(self.numeric_columns))
        if both:
            raise ValueError(f"column(s) {both} are declared both text and numeric; choose one.")
        if self.key in self.text_columns or self.key in self.numeric_columns:
            raise ValueError(f"the key column {self.key!r} names files; it cannot be declared text or numeric.")


def as_label_source(labels: Any) -> LabelSource | None:
    if labels is None or isinstance(labels, LabelSource):
        return labels
    if isinstance(labels, (str, os.PathLike)):
        return LabelSource(os.fspath(labels))
    raise TypeError(f"labels must be a path or a LabelSource, got {type(labels).__name__}.")


def label_source_from(labels: Any, **options: Any) -> LabelSource | None:
    """``build_index``'s ``labels=`` and its ``labels_*``/``*_columns`` keywords as one :class:`LabelSource`.

    ``options`` are the :class:`LabelSource` fields (``key``, ``match``, ...);
    ``None`` means not given.
    """
    given = {k: v for k, v in options.items() if v is not None}
    if labels is None:
        if given:
            raise ValueError(f"{sorted(given)} need labels= (the labels file).")
        return None
    if isinstance(labels, LabelSource):
        if given:
            raise ValueError(f"labels= is a LabelSource; give {sorted(given)} on it, not also as keywords.")
        return labels
    if isinstance(labels, (str, os.PathLike)):
        return LabelSource(os.fspath(labels), **given)
    raise TypeError(f"labels must be a path or a LabelSource, got {type(labels).__name__}.")


def _fail(path: str, message: str) -> ValueError:
    return ValueError(f"Labels file {path}: {message}")


def _csv_header(path: str, delimiter: str) -> list[str]:
    csv.field_size_limit(_MAX_FIELD)
    with open(path, newline="", encoding="utf-8-sig") as f:
        try:
            return next(csv.reader(f, delimiter=delimiter), [])
        except (csv.Error, UnicodeDecodeError) as exc:
            raise _fail(path, f"its header line cannot be read ({exc}).") from None


def _check_header(path: str, names: Sequence[str]) -> None:
    counts = collections.Counter(names)
    dupes = [n for n, c in counts.items() if c > 1]
    if dupes:
        raise _fail(path, f"column {dupes[0]!r} appears {counts[dupes[0]]} times in the header"
                          + (f" (and {dupes[1:]})" if len(dupes) > 1 else "") + "; every column needs its own name.")


_MAX_JSON_DEPTH = 32
_DEPTH_CHUNK = 1 << 26


def _json_depth(path: str) -> int:
    """The deepest nesting of brackets outside strings in a JSON Lines file (vectorised, 64 MB at a time).

    pyarrow's JSON reader recurses without a bound and crashes the process on a
    deep enough document, so the depth is checked before it reads.
    """
    import numpy as np

    deepest = 0
    with open(path, "rb") as f:
        rest = b""
        while True:
            block = f.read(_DEPTH_CHUNK)
            data = rest + block
            cut = data.rfind(b"\n") + 1 if block else len(data)
            data, rest = data[:cut], data[cut:]
            if data:
                # Drop escaped backslashes, then escaped quotes: the quotes left open and close strings.
                plain = np.frombuffer(data.replace(b"\\\\", b"").replace(b'\\"', b""), dtype=np.uint8)
                quotes = np.cumsum(plain == ord('"'), dtype=np.int64)
                outside = quotes % 2 == 0
                step = (np.isin(plain, (ord("["), ord("{"))).astype(np.int64)
                        - np.isin(plain, (ord("]"), ord("}"))).astype(np.int64)) * outside
                # Every line of JSON Lines starts at depth 0; a newline resets what the previous line left.
                depth = np.cumsum(step)
                newline = plain == ord("\n")
                if newline.any():
                    marks = np.where(newline, np.arange(len(plain)), 0)
                    last = np.maximum.accumulate(marks)
                    depth = depth - np.where(np.logical_or.accumulate(newline), depth[last], 0)
                deepest = max(deepest, int(depth.max(initial=0)))
            if not block:
                return deepest


def _read_table(source: LabelSource):
    pa = require_pyarrow()
    import pyarrow.csv
    import pyarrow.json
    import pyarrow.parquet as pq

    path = source.path
    ext = os.path.splitext(path)[1].lower()
    # One block must hold the largest field; a block as large as the file (bounded) always does.
    block = int(min(max(os.path.getsize(path) + 1, 1 << 20), _MAX_FIELD))
    try:
        if ext in (".csv", ".tsv"):
            delimiter = "\t" if ext == ".tsv" else ","
            names = _csv_header(path, delimiter)
            _check_header(path, names)
            # Every column is read as text first: "007" must stay "007" (typed below).
            convert = pyarrow.csv.ConvertOptions(column_types={n: pa.string() for n in names})
            return pyarrow.csv.read_csv(path, read_options=pyarrow.csv.ReadOptions(block_size=block),
                                        parse_options=pyarrow.csv.ParseOptions(delimiter=delimiter),
                                        convert_options=convert)
        if ext in (".jsonl", ".ndjson", ".json"):
            if _json_depth(path) > _MAX_JSON_DEPTH:
                raise _fail(path, f"holds JSON nested more than {_MAX_JSON_DEPTH} levels deep; labels are flat "
                                  "columns of strings or numbers.")
            return pyarrow.json.read_json(path, read_options=pyarrow.json.ReadOptions(block_size=block))
        if ext in (".parquet", ".pq"):
            names = pq.read_schema(path).names
            _check_header(path, names)
            return pq.read_table(path)
    except pa.ArrowInvalid as exc:
        text = " ".join(str(exc).split())
        if "straddl" in text:
            raise _fail(path, f"a field is larger than {_MAX_FIELD >> 20} MB, the largest a labels field may be; "
                              "keep large data (audio, embeddings) in files of their own.") from None
        # pyarrow names the column and row, e.g. "Column(/speaker) changed from number to string in row 3".
        raise _fail(path, f"cannot be read as a table of labels: {text}. Every column must hold one type (all "
                          "numbers or all strings) and every row the same columns.") from None
    except RecursionError:
        raise _fail(path, "is nested too deeply to read; labels are flat columns of strings or numbers.") from None
    raise _fail(path, f"unsupported extension {ext!r}; use .csv, .tsv, .jsonl or .parquet.")


def _all_match(column, pattern: str) -> bool:
    import pyarrow.compute as pc

    present = pc.drop_null(column)
    present = present.filter(pc.not_equal(present, ""))
    return len(present) > 0 and bool(pc.all(pc.match_substring_regex(present, pattern)).as_py())


def _typed_csv_column(path: str, name: str, column, declared_numeric: bool):
    """A CSV column read as text, as the numbers it holds (see the module docstring), or left as text."""
    pa = require_pyarrow()
    import pyarrow.compute as pc

    blank = pc.equal(column, "")
    nulled = pc.if_else(blank, pa.scalar(None, pa.string()), column)
    if _all_match(column, _INT):
        try:
            return nulled.cast(pa.int64())
        except (pa.ArrowInvalid, OverflowError):
            if not declared_numeric:
                return column  # an integer beyond 64 bits is an identifier
    if declared_numeric or _all_match(column, _FLOAT):
        try:
            return nulled.cast(pa.float64())
        except pa.ArrowInvalid:
            values = nulled.to_pylist()
            row = next(i for i, v in enumerate(values) if v is not None and not _is_float(v))
            raise _fail(path, f"column {name!r} is declared numeric but row {row + 2} holds {values[row]!r}.") from None
    if _all_match(column, "^(" + "|".join(_BOOL) + ")$"):
        return pc.equal(pc.utf8_lower(nulled), "true")
    return column


def _is_float(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def _big_json_integers(source: LabelSource, name: str, column):
    """A JSONL float column that held integers beyond 64 bits, as their exact decimal strings (else None)."""
    pa = require_pyarrow()
    import pyarrow.compute as pc
    import pyarrow.json

    present = pc.drop_null(column)
    if not len(present) or not pc.any(pc.greater_equal(pc.abs(present), 2.0 ** 63)).as_py():
        return None
    schema = pa.schema([(name, pa.decimal128(38, 0))])
    try:
        exact = pyarrow.json.read_json(source.path, parse_options=pyarrow.json.ParseOptions(explicit_schema=schema,
                                                                                             unexpected_field_behavior="ignore"))
    except pa.ArrowInvalid:
        return None  # real floats (1.5e30): numbers after all
    return exact.column(name).cast(pa.string())


def read_labels(source: LabelSource):
    """The labels table (pyarrow), validated and typed; see the module docstring for the rules and errors."""
    pa = require_pyarrow()

    path = source.path
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Labels file not found: {path}.")
    table = _read_table(source)
    names = table.column_names
    if source.key not in names:
        raise _fail(path, f"has no key column {source.key!r} (columns: {names[:20]}"
                          + (f" and {len(names) - 20} more" if len(names) > 20 else "")
                          + "); pass the column that names the files as the labels key.")
    present = set(names)
    clashing = sorted(present & RESERVED_COLUMNS - {source.key})
    clashing += sorted(n for n in names if n.endswith("#id") and n[:-3] in present)
    if clashing:
        raise _fail(path, f"label column(s) {clashing} clash with the index's own columns; rename them.")
    undeclared = sorted((set(source.text_columns) | set(source.numeric_columns)) - present)
    if undeclared:
        raise _fail(path, f"has no column(s) {undeclared} declared text or numeric (columns: {names[:20]}).")
    is_csv = os.path.splitext(path)[1].lower() in (".csv", ".tsv")
    columns = []
    for i, name in enumerate(names):
        col = table.column(i)
        t = col.type
        if name == source.key:
            col = col if pa.types.is_string(t) else col.cast(pa.string())
        elif name in source.text_columns:
            if pa.types.is_nested(t) or pa.types.is_temporal(t) or pa.types.is_binary(t):
                raise _fail(path, f"column {name!r} is declared text but holds {t}.")
            col = col.cast(pa.string())
        elif is_csv:
            col = _typed_csv_column(path, name, col, name in source.numeric_columns)
        else:
            if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)
                    or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_null(t)):
                raise _fail(path, f"label column {name!r} has type {t}; labels must be strings or numbers.")
            if pa.types.is_floating(t) and name not in source.numeric_columns:
                col = _big_json_integers(source, name, col) or col
            if name in source.numeric_columns and not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
                try:
                    col = col.cast(pa.float64())
                except pa.ArrowInvalid:
                    raise _fail(path, f"column {name!r} is declared numeric but holds non-numbers.") from None
        columns.append(col)
    table = pa.Table.from_arrays(columns, names=names)
    values = table.column(names.index(source.key)).to_pylist()
    empty = [i for i, k in enumerate(values) if k is None or not str(k).strip()]
    if empty:
        raise _fail(path, f"{len(empty)} row(s) have an empty key {source.key!r} (first at row {empty[0] + 1}).")
    counts = collections.Counter(unicodedata.normalize("NFC", k) for k in values)
    dupes = [k for k, n in counts.items() if n > 1]
    if dupes:
        shown = ", ".join(repr(k) for k in dupes[:_SHOWN])
        raise _fail(path, f"duplicate key(s) in column {source.key!r}: {shown}"
                          + (f" and {len(dupes) - _SHOWN} more" if len(dupes) > _SHOWN else "")
                          + "; each file may have one row.")
    return table


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


@memoized("real_folders", max_entries=65_536)
def _real_folder(folder: str) -> str:
    return os.path.realpath(folder)


def _norm(path: str) -> str:
    """A local path as one spelling: absolute, its folder's symlinks resolved (a corpus reached through a
    symlinked folder joins a labels file naming the real one). URLs and member URLs keep their text."""
    if "://" in path:  # a URL, or a member URL (its local container made absolute)
        from audiotree.io.members import absolute

        return _nfc(absolute(path))
    folder, name = os.path.split(os.path.normpath(os.path.abspath(path)))
    return _nfc(os.path.normcase(os.path.join(_real_folder(folder), name)))


def _file_key(match: str, path: str, source_root: str) -> str:
    if match == "path":
        return _norm(path)
    if match == "relative":
        return _nfc(os.path.relpath(os.path.abspath(path), os.path.abspath(source_root)).replace(os.sep, "/"))
    return _nfc(os.path.splitext(os.path.basename(path))[0])


def _label_key(match: str, key: str, root: str) -> str:
    if match == "path":
        return _norm(key if "://" in key else os.path.join(root, os.path.expanduser(key)))
    if match == "relative":
        return _nfc(os.path.normpath(key).replace(os.sep, "/"))
    return _nfc(key)


@dataclasses.dataclass(frozen=True, eq=False)
class LabelMatch:
    """A labels table joined to files: ``row_of[file]`` is its table row (``None``: no row)."""

    source: LabelSource
    table: Any
    row_of: Mapping[str, int | None]


def _resolve(source: LabelSource, match: str, keys: Sequence[str], root: str,
             files: Sequence[str], source_roots: Sequence[str]) -> tuple[dict[str, int], list[str]]:
    by_key: dict[str, int] = {}
    for row, key in enumerate(keys):
        resolved = _label_key(match, key, root)
        if resolved in by_key and match == source.match:  # two spellings of one path (a/b.wav and a/./b.wav)
            raise _fail(source.path, f"rows {by_key[resolved] + 1} and {row + 1} name the same file ({resolved!r}).")
        by_key.setdefault(resolved, row)
    return by_key, [_file_key(match, f, r) for f, r in zip(files, source_roots)]


def match_labels(source: LabelSource, files: Sequence[str], source_roots: Sequence[str]) -> LabelMatch:
    """Reads and checks the labels and finds each file's row, before anything is decoded.

    ``files`` are absolute paths (or URLs), each found under ``source_roots[i]``.
    """
    table = read_labels(source)
    _real_folder.cache.clear()  # folders resolved afresh for each build (a symlink may have moved)
    root = source.root if source.root is not None else os.path.dirname(os.path.abspath(source.path))
    keys = table.column(source.key).to_pylist()
    by_key, file_keys = _resolve(source, source.match, keys, root, files, source_roots)
    if source.match == "stem":
        seen: dict[str, str] = {}
        for f, k in zip(files, file_keys):
            if k in seen and k in by_key:
                raise _fail(source.path, f"match='stem' is ambiguous: {seen[k]!r} and {f!r} both have stem {k!r}; "
                                         "use match='relative' or 'path'.")
            seen[k] = f
    rows = [by_key.get(k) for k in file_keys]
    missing = [f for f, r in zip(files, rows) if r is None]
    if missing and source.missing == "raise":
        raise _fail(source.path, _mismatch(source, keys, root, files, source_roots, by_key, file_keys,
                                                 missing))
    unused = len(by_key) - len({r for r in rows if r is not None})
    if unused:
        warnings.warn(f"Labels file {source.path}: {unused} row(s) match no indexed file.", UserWarning, stacklevel=3)
    return LabelMatch(source=source, table=table, row_of=dict(zip(files, rows)))


def _shown(values: Sequence[str]) -> str:
    return ", ".join(repr(v) for v in values[:_SHOWN]) + (f" and {len(values) - _SHOWN} more"
                                                          if len(values) > _SHOWN else "")


def _mismatch(source: LabelSource, keys, root, files, source_roots, by_key, file_keys, missing) -> str:
    """Why files found no row: three resolved keys (unmatched ones first) beside three files, and the likely match."""
    matched = len(files) - len(missing)
    best, best_count = None, matched
    for match in _MATCHES:
        if match == source.match:
            continue
        other, other_files = _resolve(source, match, keys, root, files, source_roots)
        count = sum(1 for k in other_files if k in other)
        if count > best_count:
            best, best_count = match, count
    used = set(file_keys)
    keys_shown = [k for k in by_key if k not in used] or list(by_key)
    hint = (f" --labels-match {best} (labels_match={best!r}) joins {best_count} of {len(files)} file(s)."
            if best is not None else "")
    return (f"no row for {len(missing)} of {len(files)} indexed file(s) (matching by {source.match} on column "
            f"{source.key!r}). Keys resolved to: {_shown(keys_shown)}; the unmatched files are: "
            f"{_shown(missing)}.{hint} Add rows for them, fix the key column or match, or pass missing='null' "
            "(--labels-missing null).")


def raw_label_columns(matched: LabelMatch, files: Sequence[str]) -> list[tuple[str, Any]]:
    """The labels table's columns at the rows of ``files`` (in order; null where a file has no row), untyped."""
    pa = require_pyarrow()

    source, table = matched.source, matched.table
    take = pa.array([matched.row_of.get(f) for f in files], type=pa.int64())
    out = []
    for i, name in enumerate(table.column_names):
        if name != source.key:
            out.append((name, table.column(i).combine_chunks().take(take)))
    return out


def is_text_name(name: str) -> bool:
    """Whether a string label named ``name`` is text by default (see :data:`TEXT_NAMES`).

    >>> is_text_name("transcript"), is_text_name("speaker")
    (True, False)
    """
    return name in TEXT_NAMES


def typed_label_columns(raw: Sequence[tuple[str, Any]], *, text_columns: Sequence[str] = (),
                        previous: Mapping[str, list] | None = None) -> tuple[list[tuple[str, Any]], dict[str, dict]]:
    """Label columns (``[(name, aligned pyarrow array)]``) typed as the module docstring says, and their specs.

    A string column is text when named in ``text_columns`` or :data:`TEXT_NAMES`,
    when it was text in the index being updated, or when it looks like text
    (many distinct values); else a category. Numbers stay numbers.
    """
    pa = require_pyarrow()
    import pyarrow.compute as pc

    previous = previous or {}
    columns: list[tuple[str, Any]] = []
    specs: dict[str, dict] = {}
    for name, col in raw:
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if pa.types.is_null(col.type):
            col = col.cast(pa.float64())
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            specs[name] = {"kind": "numeric"}
            columns.append((name, col))
            continue
        col = col.cast(pa.string())
        old = previous.get(name)
        distinct = pc.unique(pc.drop_null(col))
        was_text = name in previous and old is None
        if name in text_columns or is_text_name(name) or was_text or (
                name not in previous and _looks_like_text(col, distinct)):
            specs[name] = {"kind": "text"}
            columns.append((name, col))
            continue
        vocab = list(old or [])
        known = {v for v in vocab if v is not None}
        vocab += sorted(v for v in distinct.to_pylist() if v not in known)
        ids = pc.index_in(col, options=pc.SetLookupOptions(pa.array(vocab, type=pa.string()), skip_nulls=True))
        ids = pc.fill_null(ids, -1).cast(pa.int32())
        specs[name] = {"kind": "category", "ids": ids_column(name), "size": len(vocab)}
        columns += [(name, col), (ids_column(name), ids)]
    return columns, specs


def label_columns(matched: LabelMatch, files: Sequence[str],
                  previous: Mapping[str, list] | None = None) -> tuple[list[tuple[str, Any]], dict[str, dict]]:
    """The label columns of the index rows ``files`` (in order), and their specs for the metadata.

    Returns ``([(column name, pyarrow array aligned with files)], {label: spec})``:
    a category label gives its string column and its ``<name>#id`` int32 ids.
    ``previous`` describes the string labels of the index being updated:
    ``{label: vocabulary}`` (``[value or None]``, whose ids are kept) for a
    category, ``{label: None}`` for text. A label keeps its kind across updates
    unless it is text now (declared, or by its name).
    """
    return typed_label_columns(raw_label_columns(matched, files), text_columns=matched.source.text_columns,
                               previous=previous)


def append_label_columns(table: Any, columns: Sequence[tuple[str, Any]]) -> Any:
    """``table`` with ``columns`` (``[(name, array)]``, as :func:`label_columns` gives them) appended.

    One new table rather than one append per column: 16,000 label columns must
    not cost 16,000 copies of the schema.
    """
    pa = require_pyarrow()
    fields = list(table.schema) + [pa.field(name, col.type, nullable=True) for name, col in columns]
    return pa.Table.from_arrays(table.columns + [col for _, col in columns], schema=pa.schema(fields))


def _looks_like_text(col, distinct) -> bool:
    present = len(col) - col.null_count
    return len(distinct) > TEXT_MIN_DISTINCT and 2 * len(distinct) > present

"""What tar shards and Parquet files bring to an index build: sidecar labels, faults, row order.

* Sidecar labels (a shard's ``key.json`` / ``key.txt`` / ``key.cls``; a Parquet
  file's other columns; :mod:`audiotree.discovery.containers`) become label
  columns through the same join as a labels file
  (:func:`audiotree.index.labels.match_labels` and :func:`~audiotree.index.labels.label_columns`), so they are typed the same way:
  text by name (``text``, ``txt``, ...) or as declared in ``text_columns``,
  other strings as categories with a vocabulary, numbers as numbers. A field
  named like an index column (``duration``, ``path``, ...) is stored as
  ``sidecar_<name>``. Labels merge per row (:func:`merge_label_columns`): a
  labels file's value wins where the file has a row for the item, and the
  sidecar fills the rows it does not cover.
* A fault met listing a shard (a corrupt header, a duplicate key) becomes an
  unreadable row for the shard, its error naming the shard and the member.
* :func:`order_column` sorts a container's rows by their position in it
  (rather than by member name), so a contiguous slice of the index touches
  few shards.
"""

from __future__ import annotations

from typing import Any, Sequence

from audiotree.index.table_schema import RESERVED_COLUMNS, require_pyarrow

__all__ = ["sidecar_columns", "merge_label_columns", "problem_rows", "order_column", "SIDECAR_PREFIX"]

#: Prefix of a sidecar field whose name is an index column's.
SIDECAR_PREFIX = "sidecar_"


def order_column(paths: Sequence[str]) -> Any:
    """A string column that sorts member URLs by (container, position) and plain paths by path."""
    pa = require_pyarrow()
    from audiotree.io.members import is_member, order_key

    def key(p: str) -> str:
        if not is_member(p):
            return p
        container, a, b, name = order_key(p)
        return f"{container}\x00{a:020d}\x00{b:020d}\x00{name}"

    return pa.array([key(p) for p in paths], type=pa.string())


def sidecar_columns(labels: dict, abs_paths: Sequence[str], taken: set[str],
                    numeric_columns: Sequence[str] = ()) -> list[tuple[str, Any]]:
    """Raw label columns (aligned with ``abs_paths``) from sidecar values; ``taken`` names are skipped.

    A field named like an index column is renamed ``sidecar_<name>``; a field
    declared in ``numeric_columns`` is read as float64 (a value that is not a
    number is an error naming the field). Typed later with the labels file's
    columns (:func:`audiotree.index.labels.typed_label_columns`).
    """
    pa = require_pyarrow()

    from audiotree.discovery.containers import label_rows

    out = []
    for name, values in label_rows(labels, list(abs_paths)).items():
        target = SIDECAR_PREFIX + name if name in RESERVED_COLUMNS else name
        if target in taken:
            continue
        if target in numeric_columns:
            try:
                out.append((target, pa.array([None if v is None else float(v) for v in values], type=pa.float64())))
            except (TypeError, ValueError):
                bad = next(v for v in values if v is not None and not _is_number(v))
                raise ValueError(f"Sidecar field {name!r} is declared numeric but holds {bad!r}.") from None
            continue
        try:
            out.append((target, pa.array(values)))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            out.append((target, pa.array([None if v is None else str(v) for v in values], type=pa.string())))
    return out


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def merge_label_columns(first: Sequence[tuple[str, Any]], has_row: Any,
                        second: Sequence[tuple[str, Any]]) -> tuple[list[tuple[str, Any]], Any, Any]:
    """Two sources' raw columns as one set, merged per row: ``first`` where ``has_row`` (bool per row), else ``second``.

    A column in one source only is kept as it is. Where the two hold different
    types, numbers of both kinds become float64 and anything else strings.
    Returns ``(columns, rows first filled, rows second filled)``: bool arrays,
    a row counted for a source when it took at least one value from it.
    """
    pa = require_pyarrow()
    import pyarrow.compute as pc
    import numpy as np

    n = len(has_row)
    mask = pa.array(np.asarray(has_row, dtype=bool))
    second_by = dict(second)
    first_filled = np.asarray(has_row, dtype=bool).copy()
    second_filled = np.zeros(n, dtype=bool)
    out = []
    for name, col in first:
        other = second_by.pop(name, None)
        if other is None:
            out.append((name, col))
            continue
        col, other = _common_type(col, other)
        out.append((name, pc.if_else(mask, col, other)))
        second_filled |= ~first_filled & other.is_valid().to_numpy(zero_copy_only=False)
    for name, col in second_by.items():
        out.append((name, col))
        second_filled |= col.is_valid().to_numpy(zero_copy_only=False)
    return out, first_filled, second_filled


def _common_type(a: Any, b: Any) -> tuple[Any, Any]:
    pa = require_pyarrow()

    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if isinstance(b, pa.ChunkedArray):
        b = b.combine_chunks()
    if a.type == b.type:
        return a, b
    if pa.types.is_null(a.type):
        return a.cast(b.type), b
    if pa.types.is_null(b.type):
        return a, b.cast(a.type)
    numeric = (pa.types.is_integer, pa.types.is_floating)
    if any(f(a.type) for f in numeric) and any(f(b.type) for f in numeric):
        return a.cast(pa.float64()), b.cast(pa.float64())
    return a.cast(pa.string()), b.cast(pa.string())


def problem_rows(problems: Sequence[Any], group_of: dict[str, Any]) -> list[dict[str, Any]]:
    """One unreadable row per shard with listing faults (the messages joined), in shard order."""
    from audiotree.io.members import member_stat

    by_shard: dict[str, list[str]] = {}
    for exc in problems:
        by_shard.setdefault(exc.file_path, []).append(" ".join(str(exc).split()))
    rows = []
    for shard, messages in by_shard.items():
        try:
            size, mtime = member_stat(shard)
        except (OSError, Exception):
            size, mtime = -1, -1
        rows.append({
            "path": shard, "group": group_of.get(shard), "size": size, "mtime_ns": mtime, "container": "TAR",
            "codec": None, "sample_rate": None, "channels": None, "frames": None, "duration": None,
            "readable": False, "error": " | ".join(messages), "error_kind": "permanent", "profile_step": None,
            "profile": None,
        })
    return rows

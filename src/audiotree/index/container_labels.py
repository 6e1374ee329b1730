"""What tar shards and Parquet files bring to an index build: sidecar labels, faults, row order.

* Sidecar labels (a shard's ``key.json`` / ``key.txt`` / ``key.cls``; a Parquet
  file's other columns; :mod:`audiotree.sources.containers`) become label
  columns through the same join as a labels file
  (:func:`audiotree.index.labels.match_labels` and :func:`~audiotree.index.labels.label_columns`), so they are typed the same way:
  text as categories with a vocabulary, numbers as numbers. A field named like
  an index column (``duration``, ``path``, ...) is stored as ``sidecar_<name>``;
  a labels file's column of the same name wins over a sidecar's.
* A fault met listing a shard (a corrupt header, a duplicate key) becomes an
  unreadable row for the shard, its error naming the shard and the member.
* :func:`order_column` sorts a container's rows by their position in it
  (rather than by member name), so a contiguous slice of the index touches
  few shards.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Sequence

from audiotree.index.schema import RESERVED_COLUMNS, require_pyarrow

__all__ = ["join_sidecar_labels", "problem_rows", "order_column", "SIDECAR_PREFIX"]

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


def join_sidecar_labels(labels: dict, abs_paths: Sequence[str], taken: set[str],
                        previous: Any) -> tuple[list[tuple[str, Any]], dict[str, dict]]:
    """Label columns (aligned with ``abs_paths``) and their specs from sidecar values; ``taken`` names are skipped.

    ``previous`` is the updated index's string labels, as
    :func:`audiotree.index.labels.label_columns` takes them.
    """
    pa = require_pyarrow()
    import pyarrow.parquet as pq

    from audiotree.index.labels import LabelSource, label_columns, match_labels
    from audiotree.sources.containers import label_rows

    columns = label_rows(labels, list(abs_paths))
    renamed = {}
    for name, values in columns.items():
        target = SIDECAR_PREFIX + name if name in RESERVED_COLUMNS or name == "__row__" else name
        if target not in taken:
            renamed[target] = values
    if not renamed:
        return [], {}
    table = {"__row__": pa.array([str(i) for i in range(len(abs_paths))], type=pa.string())}
    for name, values in renamed.items():
        try:
            table[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            table[name] = pa.array([None if v is None else str(v) for v in values], type=pa.string())
    # Rows are keyed by their position: the "stem" of file "i" is "i".
    keys = [str(i) for i in range(len(abs_paths))]
    with tempfile.TemporaryDirectory(prefix="audiotree-sidecars-") as tmp:
        path = os.path.join(tmp, "sidecars.parquet")
        pq.write_table(pa.table(table), path)
        matched = match_labels(LabelSource(path, key="__row__", match="stem", missing="null"), keys, [""] * len(keys))
    return label_columns(matched, keys, previous)


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

"""Each Parquet row's audio cell range, found once at index time and kept in the row's path.

Discovery names a Parquet row ``parquet://COLUMN?row_group=G&row=R::FILE``.
Where the row group's audio chunk stores its values verbatim (uncompressed,
as Hugging Face ``datasets`` writes it), the build reads that chunk once, in
the building process (:func:`audiotree.io.parquet_audio.group_cells`), and
the index stores each row as
``parquet://COLUMN?row_group=G&row=R&offset=O&size=N::FILE``: a reader then
takes one ranged read of the cell, like a tar member's, and no process reads a
row group to find its rows. A row whose cell cannot be located (a compressed
chunk, a null cell, a page failing its CRC, a group that cannot be read) keeps
the plain form and is read as before. The discovered form stays the row's
identity inside the build (labels, reuse): :func:`audiotree.io.members.without_cell`
gives it back.

>>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
>>> from audiotree.io.members import parquet_url
>>> path = os.path.join(tempfile.mkdtemp(), "d.parquet")
>>> pq.write_table(pa.table({"audio": [b"RIFF one", None]}), path, compression="none", use_dictionary=False)
>>> found = with_cells([parquet_url(path, "audio", 0, 0), parquet_url(path, "audio", 0, 1), "/data/a.wav"])
>>> [url.split("::")[0] for url in found.values()]
['parquet://audio?row_group=0&row=0&offset=24&size=8']
"""

from __future__ import annotations

import concurrent.futures
from typing import Iterable

from audiotree.errors import AudioReadError
from audiotree.io import storage
from audiotree.io.members import is_member, parquet_url, parse

__all__ = ["with_cells", "with_cells_in", "LOCATE_THREADS"]

#: Row groups of remote files located at once: each is one ranged read of a group's audio chunk, held in
#: memory (with pyarrow's decoded copy) until its rows are found, so this bounds the build's extra memory too.
LOCATE_THREADS = 4


def with_cells(paths: Iterable[str]) -> dict[str, str]:
    """``{path: the same row with its cell range}`` for the Parquet rows of ``paths`` whose cells are located.

    Rows that already record a range, other paths, and rows that cannot be
    located are left out. Each row group is read once; groups of remote
    files are read by several threads at once (with the storage options in
    effect here).
    """
    groups: dict[tuple[str, str, int], list[tuple[int, str]]] = {}
    for path in paths:
        if not (is_member(path) and path.startswith("parquet://")):
            continue
        try:
            ref = parse(path)
        except ValueError:
            continue
        if ref.cell is None:
            groups.setdefault((ref.container, ref.name, ref.offset), []).append((ref.size, path))
    if not groups:
        return {}
    options = storage.merged_options(None)

    def cells(key: tuple[str, str, int]):
        from audiotree.io.parquet_audio import group_cells

        try:
            return storage.call_with_storage_options(options, group_cells, *key)
        except (AudioReadError, OSError):
            return None  # the rows keep their plain form; reading them reports the fault

    keys = list(groups)
    if any(storage.is_url(k[0]) for k in keys) and len(keys) > 1:
        with concurrent.futures.ThreadPoolExecutor(min(LOCATE_THREADS, len(keys))) as pool:
            located = list(pool.map(cells, keys))
    else:
        located = [cells(k) for k in keys]
    out: dict[str, str] = {}
    for (container, column, group), spans in zip(keys, located):
        if spans is None:
            continue
        for row, path in groups[(container, column, group)]:
            span = spans[row] if row < len(spans) else None
            if span is not None:
                out[path] = parquet_url(container, column, group, row, span)
    return out


def with_cells_in(table, stored, stored_to_abs: dict):
    """``table`` (index rows kept from an earlier build) with its Parquet rows' paths given their cell ranges.

    ``stored_to_abs`` maps a stored path to the discovered one, ``stored`` the reverse (with a root).
    """
    paths = table.column("path").to_pylist()
    found = [stored_to_abs.get(p) for p in paths]
    cells = with_cells(p for p in found if p is not None)
    if not cells:
        return table
    import pyarrow as pa

    renamed = [stored(cells[a]) if a in cells else p for p, a in zip(paths, found)]
    at = table.column_names.index("path")
    return table.set_column(at, table.field(at), pa.array(renamed, type=table.field(at).type))

"""Parquet files with the encoded audio inside: one row per item, read through its row group.

The Hugging Face layout: an ``audio`` column of ``{bytes: binary, path: string}``
structs (``datasets.Audio(decode=False)``, what ``Dataset.to_parquet`` writes),
beside text and number columns. A plain ``binary`` column works too. A cell
with no bytes but a ``path`` (``datasets`` writes ``{"bytes": null, "path":
...}`` for audio it did not embed) is read from that file
(:func:`linked_file`: relative to the Parquet file's folder or URL).

Where the audio bytes are stored verbatim (uncompressed, as Hugging Face
``datasets`` writes them), one row is one ranged read of its own bytes
(:func:`cell_span`, :mod:`audiotree.io.parquet_cells`): the row group's audio
chunk is read once per process to find where its cells sit, or once at index
time (:func:`group_cells`), the index then recording each row's range in its
member URL (read with no locating at all). A compressed
chunk is read through pyarrow's ``ParquetFile.read_row_group`` (one column of
one row group, never the whole file); the last such row group is kept (one
per process), so a pass over neighbouring rows reads each group once. The
footer is read once per process and file. Remote files go through ranged
reads (:mod:`audiotree.io.remote_file`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

from audiotree.errors import AudioReadError
from audiotree.io import storage
from audiotree.io.byte_cache import BoundedCache

__all__ = ["ParquetAudioFile", "describe_file", "read_cell", "cell_bytes", "read_labels", "cell_span", "group_cells",
           "linked_file", "forget", "has_metadata_key", "DEFAULT_AUDIO_COLUMN", "EmptyCell"]

#: The audio column looked for when none is named.
DEFAULT_AUDIO_COLUMN = "audio"

# Per process: open footers, the last row group read whole, and path-only cells' names per row group.
_FILES = BoundedCache("parquet_footers", max_entries=16)
_GROUP = BoundedCache("parquet_row_group", max_entries=1)
_LINKS = BoundedCache("parquet_linked_names", max_entries=64)


class EmptyCell(AudioReadError):
    """A row whose audio cell holds no bytes (a null cell, or a ``{"bytes": null, "path": ...}`` struct)."""


@dataclasses.dataclass(frozen=True)
class ParquetAudioFile:
    """What discovery needs of one Parquet file: rows per row group, and its label columns."""

    path: str
    column: str
    rows_per_group: tuple[int, ...]
    label_columns: tuple[str, ...]


def _empty(url: str) -> "EmptyCell":
    shown = storage.redact(url)
    return EmptyCell(f"Failed to read audio file '{shown}': the audio cell is empty (null) and names no file. Fill or "
                     "drop the row, or use on_read_error=\"skip\".", shown)


def _fail(path: str, what: str) -> AudioReadError:
    shown = storage.redact(path)
    return AudioReadError(f"Failed to read audio file '{shown}': {what}", shown)


def _file_key(path: str) -> tuple:
    # A rewritten local file gets a new key (its footer is read again).
    import json

    version = None if storage.is_url(path) else storage.stat(path)
    # Options may nest (``client_kwargs``: a dict): their JSON text is the hashable form.
    return (path, version, json.dumps(storage.merged_options(None), sort_keys=True, default=repr))


def _open_entry(path: str) -> tuple[tuple, Any, int]:
    """``(key, ParquetFile, file size)`` for a path or URL (cached per process: the footer is read once)."""
    import pyarrow.parquet as pq

    key = _file_key(path)
    cached = _FILES.get(key)
    if cached is not None:
        return (key, *cached)
    if storage.is_url(path):
        from audiotree.io.remote_file import open_input

        source = open_input(path)
        size = source.size
    else:
        source = storage.local_path(path)
        size = key[1][0]
    try:
        # Page CRCs (where the writer recorded them) are checked on every read through pyarrow.
        opened = pq.ParquetFile(source, page_checksum_verification=True)
    except Exception as exc:
        if not isinstance(source, str):
            source.close()
        raise _fail(path, f"not a readable Parquet file ({type(exc).__name__}: {exc}). Check that it is complete, "
                          "or use on_read_error=\"skip\".") from exc
    _FILES.put(key, (opened, size))
    return key, opened, size


def _open_file(path: str) -> Any:
    """A ``pyarrow.parquet.ParquetFile`` for a path or URL (cached per process: the footer is read once)."""
    return _open_entry(path)[1]


def _audio_type_ok(arrow_type: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return True
    return pa.types.is_struct(arrow_type) and arrow_type.get_field_index("bytes") >= 0


def describe_file(path: str, column: str | None = None) -> ParquetAudioFile | None:
    """The rows and label columns of a Parquet file with audio in ``column``; ``None`` if it has no such column.

    Raises:
      AudioReadError: the file is not Parquet, or ``column`` has a type that cannot hold audio.
    """
    opened = _open_file(path)
    schema = opened.schema_arrow
    name = column or DEFAULT_AUDIO_COLUMN
    if schema.get_field_index(name) < 0:
        return None
    arrow_type = schema.field(name).type
    if not _audio_type_ok(arrow_type):
        raise _fail(path, f"column '{name}' has type {arrow_type}, not audio bytes (binary, or a struct with a "
                          "'bytes' field as Hugging Face datasets writes); name the audio column with audio_column= "
                          "(--audio-column).")
    meta = opened.metadata
    rows = tuple(meta.row_group(g).num_rows for g in range(meta.num_row_groups))
    labels = tuple(n for n in schema.names if n != name)
    return ParquetAudioFile(path, name, rows, labels)


def has_metadata_key(path: str, key: bytes) -> bool:
    """Whether the Parquet file at ``path`` carries ``key`` in its footer's metadata.

    A glob or brace pattern is never one file (``False``); a file that cannot be
    opened as Parquet answers ``True``, so the caller's own open reports it.
    """
    if any(ch in path.split("://", 1)[-1] for ch in "*?[{"):
        return False
    try:
        return key in (_open_file(path).schema_arrow.metadata or {})
    except (AudioReadError, OSError):
        return True


def cell_bytes(value: Any) -> tuple[bytes | None, str | None]:
    """``(bytes, name)`` of one audio cell (a ``{bytes, path}`` dict or raw bytes)."""
    if isinstance(value, dict):
        return value.get("bytes"), value.get("path")
    return value, None


def _fetcher(path: str):
    from audiotree.io.byte_reads import read_bytes

    options = storage.merged_options(None)
    return lambda a, b: read_bytes(path, a, b, storage_options=options)


def cell_span(url: str, ref: Any) -> tuple[int, int] | None:
    """``(offset, size)`` in the file of the audio bytes of the row a ``parquet://`` URL names, when stored verbatim.

    ``None`` when the row group's audio chunk is compressed (read the row with
    :func:`read_cell`). The first call for a row group reads its audio chunk
    once per process (see :mod:`audiotree.io.parquet_cells`); later rows of
    that group cost nothing here.

    Raises:
      AudioReadError: the row group or row does not exist, the cell is null, or the chunk cannot be read.

    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> from audiotree.io.members import parquet_url, parse
    >>> path = os.path.join(tempfile.mkdtemp(), "a.parquet")
    >>> pq.write_table(pa.table({"audio": [b"RIFF and more"]}), path, compression="none", use_dictionary=False)
    >>> url = parquet_url(path, "audio", 0, 0)
    >>> offset, size = cell_span(url, parse(url))
    >>> with open(path, "rb") as f:
    ...     _ = f.seek(offset)
    ...     f.read(size)
    b'RIFF and more'
    """
    from audiotree.io import parquet_cells

    path, column, group, row = ref.container, ref.name, ref.offset, ref.size
    key, opened, size = _open_entry(path)
    meta = opened.metadata
    if group >= meta.num_row_groups:
        raise _fail(url, f"the file has {meta.num_row_groups} row groups, no row group {group}. The file was "
                         "rewritten since it was listed; rebuild the index, or use on_read_error=\"skip\".")
    rows = meta.row_group(group).num_rows
    if row >= rows:
        raise _fail(url, f"row group {group} has {rows} rows, no row {row}; the file was rewritten since it was "
                         "listed. Rebuild the index, or use on_read_error=\"skip\".")
    spans = _locate(key, opened, column, group, size, path, url)
    if spans is None:
        return None
    offset, nbytes = (int(x) for x in spans[row])
    if (offset, nbytes) == parquet_cells.NULL:
        raise _empty(url)
    if (offset, nbytes) == parquet_cells.BAD_CHECKSUM:
        raise _fail(url, f"the page holding the audio cell of row {row} of row group {group} fails the CRC32 checksum "
                         "its writer recorded: the file is corrupt. Re-create or re-download it, or use "
                         "on_read_error=\"skip\".")
    return offset, nbytes


def _locate(key: tuple, opened: Any, column: str, group: int, size: int, path: str, named: str):
    """:func:`audiotree.io.parquet_cells.locate` of row group ``group``; a failure is an AudioReadError naming
    ``named`` (the row's URL, or the file)."""
    from audiotree.io import parquet_cells

    try:
        return parquet_cells.locate(key, opened, column, group, size=size, fetch=_fetcher(path))
    except AudioReadError:
        raise
    except Exception as exc:
        raise _fail(named, f"reading the audio of row group {group} failed ({type(exc).__name__}: {exc}). The file "
                           "may be corrupt; re-create it, or use on_read_error=\"skip\".") from exc


def group_cells(path: str, column: str, group: int) -> list[tuple[int, int] | None] | None:
    """Per row of row group ``group``, the ``(offset, size)`` of its audio bytes in the file, or ``None`` for that row.

    What the index records in each row's URL (:func:`audiotree.io.members.parquet_url`'s ``cell``): one read of the
    group's audio chunk, here and never again by a reader. A row is ``None`` when its cell is null or on a page
    failing its CRC (a read of the row then reports it); the whole answer is ``None`` when the chunk is compressed
    or its values are not stored verbatim (rows are then read through pyarrow).

    Raises:
      AudioReadError: the file or the group cannot be read (names the file).

    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> path = os.path.join(tempfile.mkdtemp(), "g.parquet")
    >>> pq.write_table(pa.table({"audio": [b"RIFF one", None]}), path, compression="none", use_dictionary=False)
    >>> cells = group_cells(path, "audio", 0)
    >>> with open(path, "rb") as f:
    ...     _ = f.seek(cells[0][0])
    ...     f.read(cells[0][1]), cells[1]
    (b'RIFF one', None)
    """
    key, opened, size = _open_entry(path)
    spans = _locate(key, opened, column, group, size, path, path)
    if spans is None:
        return None
    return [None if int(o) < 0 else (int(o), int(n)) for o, n in spans.tolist()]


def read_cell(url: str, ref: Any) -> bytes:
    """The audio bytes of the row a ``parquet://`` member URL names (see :mod:`audiotree.io.members`).

    Raises:
      AudioReadError: the file, row group or row does not exist, or the cell is null or not bytes.
    """
    path, column, group, row = ref.container, ref.name, ref.offset, ref.size
    key = f"{path}\x00{column}\x00{group}"
    cached = _GROUP.get(key)
    if cached is None:
        opened = _open_file(path)
        if group >= opened.metadata.num_row_groups:
            raise _fail(url, f"the file has {opened.metadata.num_row_groups} row groups, no row group {group}. The "
                             "file was rewritten since it was listed; rebuild the index, or use "
                             "on_read_error=\"skip\".")
        try:
            cached = opened.read_row_group(group, columns=[column]).column(0).combine_chunks()
        except Exception as exc:
            raise _fail(url, f"reading row group {group} failed ({type(exc).__name__}: {exc}). The file may be "
                             "corrupt; re-create it, or use on_read_error=\"skip\".") from exc
        _GROUP.put(key, cached)
    if row >= len(cached):
        raise _fail(url, f"row group {group} has {len(cached)} rows, no row {row}; the file was rewritten since it "
                         "was listed. Rebuild the index, or use on_read_error=\"skip\".")
    data, _ = cell_bytes(cached[row].as_py())
    if data is None:
        raise _empty(url)
    if not isinstance(data, (bytes, bytearray)):
        raise _fail(url, f"the audio cell holds {type(data).__name__}, not bytes.")
    return bytes(data)


def _resolve_link(container: str, name: str) -> str:
    """``name`` (a cell's ``path``) as a file: absolute paths and URLs as is, else from the Parquet file's folder."""
    import posixpath

    if storage.is_url(name) or os.path.isabs(name):
        return name
    if storage.is_url(container):
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(container)  # a query (a signed URL's) belongs to the Parquet file, not to its folder
        path = posixpath.normpath(posixpath.join(posixpath.dirname(parts.path), name))
        return urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    folder = os.path.dirname(os.fspath(storage.local_path(container)))
    return os.path.normpath(os.path.join(folder, os.path.expanduser(name)))


def linked_file(url: str, ref: Any) -> str | None:
    """The file a path-only cell names (``{"bytes": null, "path": P}``, as ``datasets`` writes for unembedded audio).

    ``P`` is resolved against the Parquet file's folder (an absolute path or a
    URL as is; for a remote Parquet file, against its URL's folder). ``None``
    when the column has no ``path`` field or the row's ``path`` is empty. The
    row group's ``path`` values are read once per process (a small string
    column; the audio bytes are not read).

    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> from audiotree.io.members import parquet_url, parse
    >>> folder = tempfile.mkdtemp()
    >>> cells = pa.array([{"bytes": None, "path": "clips/a.flac"}], pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    >>> pq.write_table(pa.table({"audio": cells}), os.path.join(folder, "d.parquet"))
    >>> url = parquet_url(os.path.join(folder, "d.parquet"), "audio", 0, 0)
    >>> linked_file(url, parse(url)) == os.path.join(folder, "clips", "a.flac")
    True
    """
    import pyarrow as pa

    path, column, group, row = ref.container, ref.name, ref.offset, ref.size
    key, opened, _ = _open_entry(path)
    arrow_type = opened.schema_arrow.field(column).type
    if not pa.types.is_struct(arrow_type) or arrow_type.get_field_index("path") < 0:
        return None
    full = (key, column, group)
    names = _LINKS.get(full)
    if names is None:
        try:
            names = opened.read_row_group(group, columns=[f"{column}.path"]).column(0).combine_chunks()
            names = names.field("path").to_pylist() if pa.types.is_struct(names.type) else names.to_pylist()
        except Exception as exc:
            raise _fail(url, f"reading the path column of row group {group} failed ({type(exc).__name__}: {exc}). "
                             "The file may be corrupt; re-create it, or use on_read_error=\"skip\".") from exc
        _LINKS.put(full, names)
    name = names[row] if row < len(names) else None
    if not name:
        return None
    return _resolve_link(path, name)


def read_labels(path: str, column: str, label_columns: Sequence[str]) -> Any:
    """The label columns of a Parquet file as an Arrow table (one row per audio row), skipping the audio."""
    opened = _open_file(path)
    if not label_columns:
        return None
    try:
        return opened.read(columns=list(label_columns))
    except OSError as exc:  # a page that fails its checksum, a cut file
        raise _fail(path, f"reading its label columns failed ({exc}). The file may be corrupt; re-create it, or use "
                          "on_read_error=\"skip\".") from exc


def forget() -> None:
    """Drops the cached footers and row group (tests, and code that rewrites files it read)."""
    from audiotree.io import parquet_cells

    for cache in (_FILES, _GROUP, _LINKS):
        cache.clear()
    parquet_cells.forget()


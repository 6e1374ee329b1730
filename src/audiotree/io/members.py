"""Audio inside containers: a tar shard's member or a Parquet row's audio cell, read in place.

An item inside a container is named by a *member URL* (a locator):

``tar://MEMBER::SHARD``
    fsspec's spelling: member ``MEMBER`` of the tar at ``SHARD`` (a path or
    any URL). The member's position is found by reading the shard's headers
    (once per process and shard).
``tar://MEMBER?offset=O&size=N::SHARD``
    the same member with its byte range in the shard: what discovery and the
    corpus index record, so a read needs no listing.
``parquet://COLUMN?row_group=G&row=R::FILE``
    row ``R`` of row group ``G`` of the Parquet file ``FILE``, audio in
    ``COLUMN`` (a ``{bytes, path}`` struct, as Hugging Face ``datasets``
    writes it, or plain binary).
``parquet://COLUMN?row_group=G&row=R&offset=O&size=N::FILE``
    the same row with its audio cell's byte range in the file: what the
    corpus index records where the cell is stored verbatim, so a read is one
    ranged read of the cell, like a tar member's (nothing locates the row).
``parquet://COLUMN?row_group=G&row=R&offset=O&size=N&format=EXT::FILE``
    the same, with the cell's audio format as a file extension (``flac``,
    ``mp3``, ``ogg``, ``opus``, ``wav``, ``aiff``), which the index build sniffs from the
    cell's first bytes: :func:`format_name` then gives ``COLUMN.EXT``, so a cell
    is planned and read by its seek table like a tar member named so. Only
    with a recorded range; a URL without ``format=`` (an index written before)
    reads as it always did. :func:`without_cell` and :func:`unrecorded` drop it
    with the range.

A tar member is contiguous bytes, so :func:`open_member` returns a file object
over exactly ``[offset, offset + size)`` of the shard: a local file, or a remote
shard read with the ranged, read-ahead requests of
:mod:`audiotree.io.remote_file`. Decoders seek in it as in a file, so an
excerpt costs what it costs from an unpacked file. A Parquet cell with a
recorded range is read the same way. Without one, a verbatim cell is found by
reading its row group's audio column once per process
(:mod:`audiotree.io.parquet_cells`), and a compressed one is read through its
row group (one column of one row group, never the whole file) and decoded from
memory; the last row group read is kept per process, so neighbouring rows cost
no second read.

Every fault is an :class:`~audiotree.errors.AudioReadError` naming the member
URL (so the shard and member, or the file and row): a member that runs past
the end of its shard, a missing member, a null or non-binary cell.

>>> parse("tar://a/utt1.flac?offset=1536&size=20480::s3://bucket/train-000001.tar")
MemberRef(kind='tar', container='s3://bucket/train-000001.tar', name='a/utt1.flac', offset=1536, size=20480, cell=None, format='')
>>> parse("parquet://audio?row_group=2&row=5&offset=4096&size=900::d.parquet").cell
(4096, 900)
>>> format_name("parquet://audio?row_group=2&row=5&offset=4096&size=900&format=flac::d.parquet")
'audio.flac'
>>> parse("tar://a::b.wav?offset=512&size=100::shard.tar").name
'a::b.wav'
>>> tar_url("shard.tar", "utt1.flac", 512, 100)
'tar://utt1.flac?offset=512&size=100::shard.tar'
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import time
from typing import Any, Mapping

from audiotree.errors import AudioReadError
from audiotree.io import storage
from audiotree.io.byte_cache import BoundedCache
from audiotree.io.byte_range import MemberInput, RemoteSpan

__all__ = ["MemberRef", "is_member", "parse", "tar_url", "parquet_url", "open_member", "recorded_span", "member_stat",
           "format_name", "with_format", "order_key", "container_of", "absolute", "without_cell", "unrecorded",
           "MemberInput", "RemoteSpan"]

# The recorded forms first: their query (``?offset=O&size=N::``, ``?row_group=G&row=R::``) marks where the
# container starts, so a member or column name holding ``::`` (``a::b.wav``) is not split there. Without it
# the name ends at the first ``::``, as fsspec splits a chained URL.
_RANGED = re.compile(r"^(?P<kind>tar)://(?P<inner>.*?\?offset=\d+&size=\d+)::(?P<container>.+)$", re.S)
_ROWED = re.compile(r"^(?P<kind>parquet)://(?P<inner>[^?]*\?row_group=\d+&row=\d+"
                    r"(?:&offset=\d+&size=\d+(?:&format=[a-z0-9]+)?)?)::(?P<container>.+)$", re.S)
_LOCATOR = re.compile(r"^(?P<kind>tar|parquet)://(?P<inner>.*?)::(?P<container>.+)$", re.S)
_TAR_RANGE = re.compile(r"^(?P<name>.*)\?offset=(?P<offset>\d+)&size=(?P<size>\d+)$", re.S)
_PARQUET_ROW = re.compile(r"^(?P<column>[^?]*)\?row_group=(?P<group>\d+)&row=(?P<row>\d+)"
                          r"(?:&offset=(?P<offset>\d+)&size=(?P<size>\d+)(?:&format=(?P<format>[a-z0-9]+))?)?$")
#: A cell's format as the URL spells it: a lower-case file extension.
_FORMAT = re.compile(r"^[a-z0-9]+$")


def _match(path: str) -> "re.Match[str] | None":
    return _RANGED.match(path) or _ROWED.match(path) or _LOCATOR.match(path)


@dataclasses.dataclass(frozen=True)
class MemberRef:
    """A parsed member URL (see the module docstring); ``offset``/``size`` are ``-1`` when not recorded.

    For Parquet, ``name`` is the audio column, ``offset`` the row group and ``size`` the row in it, and
    ``cell`` the ``(offset, size)`` of the row's audio bytes in the file when the URL records them, and
    ``format`` the cell's format (a file extension, ``""`` when not recorded; always ``""`` for a tar member).
    """

    kind: str
    container: str
    name: str
    offset: int = -1
    size: int = -1
    cell: tuple[int, int] | None = None
    format: str = ""


def is_member(path: Any) -> bool:
    """Whether ``path`` is a member URL (``tar://...::...`` or ``parquet://...::...``).

    >>> is_member("tar://a.flac::shard.tar"), is_member("s3://b/a.flac")
    (True, False)
    """
    return isinstance(path, str) and path.startswith(("tar://", "parquet://")) and "::" in path


def parse(path: str) -> MemberRef:
    """The parts of a member URL; ``ValueError`` names a malformed one."""
    m = _match(path)
    if m is None:
        raise ValueError(f"Not a member URL: {path!r}; expected tar://MEMBER::SHARD or "
                         "parquet://COLUMN?row_group=G&row=R::FILE.")
    kind, inner, container = m.group("kind"), m.group("inner"), m.group("container")
    if kind == "tar":
        r = _TAR_RANGE.match(inner)
        if r is None:
            return MemberRef("tar", container, inner)
        return MemberRef("tar", container, r.group("name"), int(r.group("offset")), int(r.group("size")))
    r = _PARQUET_ROW.match(inner)
    if r is None:
        raise ValueError(f"Malformed Parquet row URL {path!r}; expected parquet://COLUMN?row_group=G&row=R::FILE "
                         "(or ...&row=R&offset=O&size=N::FILE, as an index records it).")
    cell = None if r.group("offset") is None else (int(r.group("offset")), int(r.group("size")))
    return MemberRef("parquet", container, r.group("column"), int(r.group("group")), int(r.group("row")), cell,
                     r.group("format") or "")


def tar_url(shard: str, name: str, offset: int, size: int) -> str:
    """The member URL of ``name`` at bytes ``[offset, offset + size)`` of ``shard``."""
    return f"tar://{name}?offset={int(offset)}&size={int(size)}::{shard}"


def parquet_url(path: str, column: str, row_group: int, row: int, cell: tuple[int, int] | None = None,
                format: str = "") -> str:
    """The member URL of row ``row`` of row group ``row_group`` of ``path``, audio in ``column``.

    ``cell``: the ``(offset, size)`` of the row's audio bytes in the file, recorded in the URL (what the index
    stores where the cell is verbatim), so a read of the row is one ranged read. ``format``: the cell's format as
    a lower-case file extension (``"flac"``), recorded after the range (only with one).

    >>> parquet_url("d.parquet", "audio", 0, 3), parquet_url("d.parquet", "audio", 0, 3, (4096, 900))
    ('parquet://audio?row_group=0&row=3::d.parquet', 'parquet://audio?row_group=0&row=3&offset=4096&size=900::d.parquet')
    >>> parquet_url("d.parquet", "audio", 0, 3, (4096, 900), "flac")
    'parquet://audio?row_group=0&row=3&offset=4096&size=900&format=flac::d.parquet'
    """
    span = "" if cell is None else f"&offset={int(cell[0])}&size={int(cell[1])}"
    if format:
        if cell is None or not _FORMAT.match(format):
            raise ValueError(f"A Parquet row URL records a format ({format!r}) only as a lower-case extension after "
                             "its cell's range.")
        span += f"&format={format}"
    return f"parquet://{column}?row_group={int(row_group)}&row={int(row)}{span}::{path}"


def with_format(path: str, format: str) -> str:
    """A Parquet row URL with a recorded cell range given the cell's ``format`` (an extension, ``""``: none).

    Any other path (a tar member, a file, a row without a range) is returned unchanged.

    >>> with_format("parquet://audio?row_group=0&row=3&offset=4096&size=900::d.parquet", "mp3")
    'parquet://audio?row_group=0&row=3&offset=4096&size=900&format=mp3::d.parquet'
    >>> with_format("tar://a.wav?offset=512&size=100::s.tar", "flac")
    'tar://a.wav?offset=512&size=100::s.tar'
    """
    if not (isinstance(path, str) and path.startswith("parquet://") and is_member(path)):
        return path
    ref = parse(path)
    if ref.cell is None:
        return path
    return parquet_url(ref.container, ref.name, ref.offset, ref.size, ref.cell, format)


def without_cell(path: str) -> str:
    """``path`` without a Parquet row's recorded cell range (and format): the row as discovery names it (other
    paths unchanged).

    >>> without_cell("parquet://audio?row_group=0&row=3&offset=4096&size=900::d.parquet")
    'parquet://audio?row_group=0&row=3::d.parquet'
    """
    if not (isinstance(path, str) and path.startswith("parquet://") and is_member(path)):
        return path
    ref = parse(path)
    return path if ref.cell is None else parquet_url(ref.container, ref.name, ref.offset, ref.size)


def unrecorded(path: str) -> str:
    """``path`` without any byte range an index recorded in it: a tar member named for a listing of its shard,
    a Parquet row for a lookup in its file (other paths unchanged). What a file changed since it was indexed is
    read by (``on_stale="reprobe"``): the recorded range belongs to the old file.

    >>> unrecorded("tar://a.wav?offset=512&size=100::s.tar"), unrecorded("parquet://audio?row_group=0&row=3&offset=4096&size=900::d.parquet")
    ('tar://a.wav::s.tar', 'parquet://audio?row_group=0&row=3::d.parquet')
    """
    if not is_member(path):
        return path
    ref = parse(path)
    if ref.kind == "tar":
        return path if ref.offset < 0 else f"tar://{ref.name}::{ref.container}"
    return without_cell(path)


def absolute(path: str) -> str:
    """``path`` with a local container (or a local file) made absolute; URLs unchanged."""
    if not is_member(path):
        return path if storage.is_url(path) else os.path.normpath(os.path.abspath(path))
    m = _match(path)
    container = m.group("container")
    if storage.is_url(container):
        return path
    return path[:m.start("container")] + os.path.normpath(os.path.abspath(storage.local_path(container)))


def container_of(path: str) -> str | None:
    """The shard or Parquet file holding ``path``, or ``None`` for a plain file."""
    return parse(path).container if is_member(path) else None


def format_name(path: str) -> str:
    """The name whose extension tells the audio format: the member's name for a tar member.

    A Parquet cell whose URL records its format is ``COLUMN.EXT``; one without
    has no name here (its format is sniffed from its bytes when it is read).

    >>> format_name("tar://a/u1.mp3?offset=0&size=9::s.tar"), format_name("parquet://a?row_group=0&row=1::d.parquet")
    ('a/u1.mp3', '')
    """
    if not is_member(path):
        return path
    ref = parse(path)
    if ref.kind == "tar":
        return ref.name
    return f"{ref.name}.{ref.format}" if ref.format else ""


def order_key(path: str) -> tuple:
    """Sort key that keeps a container's items together and in their order in it.

    Plain files sort by path; a container's members sort after its path, by
    position (byte offset, or row group and row). So a contiguous slice of a
    sorted list touches few shards.
    """
    if not is_member(path):
        return (path, -1, -1, "")
    ref = parse(path)
    return (ref.container, ref.offset, ref.size if ref.kind == "parquet" else 0, ref.name)


# ---------------------------------------------------------------------------
# Tar members
# ---------------------------------------------------------------------------

#: Shard listings of ``tar://MEMBER::SHARD`` URLs (no recorded range), per process.
_LISTINGS = BoundedCache("tar_listings", max_entries=64)
#: Remote shards' (size, mtime) per process, for staleness checks; refreshed after this many seconds.
_STAT_TTL = 30.0
_STATS = BoundedCache("container_stats", max_entries=4096)


def _member_range(ref: MemberRef) -> tuple[int, int]:
    if ref.offset >= 0:
        return ref.offset, ref.size
    table = _LISTINGS.get(ref.container)
    if table is None:
        from audiotree.io.tar_shards import list_shard

        listing = list_shard(ref.container)
        table = {m.name: (m.offset, m.size) for m in listing.members}
        table.update(listing.refused)  # a sparse member or a hard link to nothing: its own fault
        _LISTINGS.put(ref.container, table)
    found = table.get(ref.name) or table.get(ref.name.lstrip("/"))
    if isinstance(found, AudioReadError):
        shown = storage.redact(f"tar://{ref.name}::{ref.container}")
        raise AudioReadError(str(found), shown)
    if found is None:
        raise AudioReadError(
            f"Failed to read audio file 'tar://{ref.name}::{storage.redact(ref.container)}': the shard has no member "
            f"'{ref.name}'. Check the member name (`tar tf` lists them), or use on_read_error=\"skip\".",
            storage.redact(f"tar://{ref.name}::{ref.container}"))
    return found


def _open_range(path: str, container: str, offset: int, size: int, what: str) -> MemberInput:
    """Bytes ``[offset, offset + size)`` of ``container`` as a member input (``what`` names the container)."""
    if storage.is_url(container):
        return MemberInput(path, RemoteSpan(container, offset, offset + size), offset, size)
    local = storage.local_path(container)
    try:
        fd = os.open(local, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise AudioReadError(f"Failed to read audio file '{path}': cannot open its {what} ({exc}). Check the path "
                             "(was it moved or deleted?), or use on_read_error=\"skip\".", path) from exc
    total = os.fstat(fd).st_size
    if offset + size > total:  # known before any decoding: the container is cut off inside this member
        os.close(fd)
        raise AudioReadError(
            f"Failed to read audio file '{path}': the member's {size} bytes run past the end of the {what} (it ends "
            f"at byte {offset + size}, the {what} has {total} bytes); the {what} is truncated. Re-create or "
            "re-download it, or use on_read_error=\"skip\".", path)
    return MemberInput(path, fd, offset, size)


def _open_tar_member(path: str, ref: MemberRef) -> MemberInput:
    offset, size = _member_range(ref)
    return _open_range(path, ref.container, offset, size, "shard")


# ---------------------------------------------------------------------------
# Parquet cells
# ---------------------------------------------------------------------------


def _open_parquet_cell(path: str, ref: MemberRef) -> MemberInput:
    from audiotree.io.parquet_audio import EmptyCell, cell_span, linked_file, read_cell

    if ref.cell is not None:  # recorded in the index: one ranged read of the cell, nothing located
        return _open_range(path, ref.container, ref.cell[0], ref.cell[1], "Parquet file")
    try:
        span = cell_span(path, ref)
        if span is not None:  # stored verbatim: a ranged read of the cell, like a tar member
            return _open_range(path, ref.container, span[0], span[1], "Parquet file")
        data = read_cell(path, ref)
    except EmptyCell:
        linked = linked_file(path, ref)
        if linked is None:
            raise
        return _open_linked(path, linked)
    return MemberInput(path, io.BytesIO(data), 0, len(data))


def _open_linked(path: str, linked: str) -> MemberInput:
    """The whole file a path-only Parquet cell names, as the member's input (errors name both)."""
    try:
        size = storage.stat(linked)[0]
    except (OSError, AudioReadError) as exc:
        raise AudioReadError(
            f"Failed to read audio file '{path}': the cell holds no bytes and names the file '{storage.redact(linked)}' "
            f"(a relative path starts from the Parquet file's folder), which cannot be read ({exc}). Put the file "
            "there, embed the audio (datasets' embed_table_storage / push_to_hub), or use on_read_error=\"skip\".",
            path) from exc
    return _open_range(path, linked, 0, size, "linked audio file")


# ---------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------


def recorded_span(path: str) -> tuple[str, int, int] | None:
    """``(container, offset, size)`` of a member URL that records its byte range, else ``None``.

    The recorded forms are ``tar://NAME?offset=O&size=N::SHARD`` and a Parquet
    row with its cell's range (``parquet://COLUMN?row_group=G&row=R&offset=O&size=N::FILE``);
    ``None`` for a member found by listing its shard and a Parquet row without a range.

    >>> recorded_span(tar_url("/d/s.tar", "a.wav", 512, 100))
    ('/d/s.tar', 512, 100)
    >>> recorded_span(parquet_url("/d/p.parquet", "audio", 0, 1, (4, 9))), recorded_span(parquet_url("/d/p.parquet", "audio", 0, 1))
    (('/d/p.parquet', 4, 9), None)
    """
    ref = parse(path)
    if ref.kind == "parquet":
        return None if ref.cell is None else (ref.container, *ref.cell)
    if ref.offset < 0:
        return None
    return ref.container, ref.offset, ref.size


def open_member(path: str) -> MemberInput:
    """An open file object over the audio bytes a member URL names (local or remote container).

    Raises:
      AudioReadError: the container or member cannot be read; names the member URL.
    """
    try:
        ref = parse(path)
    except ValueError as exc:
        raise AudioReadError(str(exc), path) from exc
    if ref.kind == "tar":
        return _open_tar_member(path, ref)
    return _open_parquet_cell(path, ref)


def _container_stat(container: str) -> tuple[int, int]:
    if not storage.is_url(container):
        return storage.stat(container)
    now = time.monotonic()
    hit = _STATS.get(container)
    if hit is not None and now - hit[0] < _STAT_TTL:
        return hit[1]
    value = storage.stat(container)
    _STATS.put(container, (now, value))
    return value


def member_stat(path: str, *, storage_options: Mapping[str, Any] | None = None) -> tuple[int, int]:
    """``(size, modification time in ns)`` that identify the item's version: what the corpus index records.

    A tar member's size is its byte count and its time the shard's; a Parquet
    row takes the file's size and time (a rewrite of the file marks its rows
    stale). A remote container's stat is cached per process for a few seconds,
    so a read of many members costs no metadata request each. A plain path or
    URL is passed to :func:`audiotree.io.storage.stat`.

    Raises ``OSError`` for a missing local container, :class:`AudioReadError` for a URL.
    """
    if not is_member(path):
        return storage.stat(path, storage_options=storage_options)
    ref = parse(path)
    with storage.use_storage_options(storage_options):
        size, mtime = _container_stat(ref.container)
        if ref.kind == "tar":
            return (_member_range(ref)[1], mtime)
    return size, mtime


def local_container(path: str) -> str | None:
    """The local container file of a member URL, for callers that check it exists (``None`` for a URL)."""
    container = container_of(path)
    if container is None or storage.is_url(container):
        return None
    return os.fspath(storage.local_path(container))

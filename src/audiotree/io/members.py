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

A tar member is contiguous bytes, so :func:`open_member` returns a file object
over exactly ``[offset, offset + size)`` of the shard: a local file, or a remote
shard read with the ranged, read-ahead requests of
:mod:`audiotree.io.remote_file`. Decoders seek in it as in a file, so an
excerpt costs what it costs from an unpacked file. A Parquet cell is read
through its row group (one column of one row group, never the whole file) and
decoded from memory; the last row group read is kept per process, so
neighbouring rows cost no second read.

Every fault is an :class:`~audiotree.errors.AudioReadError` naming the member
URL (so the shard and member, or the file and row): a member that runs past
the end of its shard, a missing member, a null or non-binary cell.

>>> parse("tar://a/utt1.flac?offset=1536&size=20480::s3://bucket/train-000001.tar")
MemberRef(kind='tar', container='s3://bucket/train-000001.tar', name='a/utt1.flac', offset=1536, size=20480)
>>> tar_url("shard.tar", "utt1.flac", 512, 100)
'tar://utt1.flac?offset=512&size=100::shard.tar'
"""

from __future__ import annotations

import collections
import dataclasses
import io
import os
import re
import threading
import time
from typing import Any, Mapping

from audiotree.errors import AudioReadError
from audiotree.io import storage

__all__ = ["MemberRef", "is_member", "parse", "tar_url", "parquet_url", "open_member", "member_stat",
           "format_name", "order_key", "container_of", "absolute", "MemberInput", "RemoteSpan"]

_LOCATOR = re.compile(r"^(?P<kind>tar|parquet)://(?P<inner>.*?)::(?P<container>.+)$", re.S)
_TAR_RANGE = re.compile(r"^(?P<name>.*)\?offset=(?P<offset>\d+)&size=(?P<size>\d+)$", re.S)
_PARQUET_ROW = re.compile(r"^(?P<column>[^?]*)\?row_group=(?P<group>\d+)&row=(?P<row>\d+)$")


@dataclasses.dataclass(frozen=True)
class MemberRef:
    """A parsed member URL (see the module docstring); ``offset``/``size`` are ``-1`` when not recorded.

    For Parquet, ``name`` is the audio column, ``offset`` the row group and ``size`` the row in it.
    """

    kind: str
    container: str
    name: str
    offset: int = -1
    size: int = -1


def is_member(path: Any) -> bool:
    """Whether ``path`` is a member URL (``tar://...::...`` or ``parquet://...::...``).

    >>> is_member("tar://a.flac::shard.tar"), is_member("s3://b/a.flac")
    (True, False)
    """
    return isinstance(path, str) and path.startswith(("tar://", "parquet://")) and "::" in path


def parse(path: str) -> MemberRef:
    """The parts of a member URL; ``ValueError`` names a malformed one."""
    m = _LOCATOR.match(path)
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
        raise ValueError(f"Malformed Parquet row URL {path!r}; expected parquet://COLUMN?row_group=G&row=R::FILE.")
    return MemberRef("parquet", container, r.group("column"), int(r.group("group")), int(r.group("row")))


def tar_url(shard: str, name: str, offset: int, size: int) -> str:
    """The member URL of ``name`` at bytes ``[offset, offset + size)`` of ``shard``."""
    return f"tar://{name}?offset={int(offset)}&size={int(size)}::{shard}"


def parquet_url(path: str, column: str, row_group: int, row: int) -> str:
    """The member URL of row ``row`` of row group ``row_group`` of ``path``, audio in ``column``."""
    return f"parquet://{column}?row_group={int(row_group)}&row={int(row)}::{path}"


def absolute(path: str) -> str:
    """``path`` with a local container (or a local file) made absolute; URLs unchanged."""
    if not is_member(path):
        return path if storage.is_url(path) else os.path.normpath(os.path.abspath(path))
    m = _LOCATOR.match(path)
    container = m.group("container")
    if storage.is_url(container):
        return path
    return path[:m.start("container")] + os.path.normpath(os.path.abspath(storage.local_path(container)))


def container_of(path: str) -> str | None:
    """The shard or Parquet file holding ``path``, or ``None`` for a plain file."""
    return parse(path).container if is_member(path) else None


def format_name(path: str) -> str:
    """The name whose extension tells the audio format: the member's name for a tar member.

    A Parquet cell has no name here (its format is sniffed from its bytes, or
    taken from the cell's ``path`` field when it is read).
    """
    if not is_member(path):
        return path
    ref = parse(path)
    return ref.name if ref.kind == "tar" else ""


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
_LISTINGS: "collections.OrderedDict[str, dict[str, tuple[int, int]]]" = collections.OrderedDict()
_LISTINGS_MAX = 64
#: Remote shards' (size, mtime) per process, for staleness checks; refreshed after this many seconds.
_STAT_TTL = 30.0
_STATS: "collections.OrderedDict[str, tuple[float, tuple[int, int]]]" = collections.OrderedDict()
_LOCK = threading.Lock()


def _member_range(ref: MemberRef) -> tuple[int, int]:
    if ref.offset >= 0:
        return ref.offset, ref.size
    with _LOCK:
        table = _LISTINGS.get(ref.container)
    if table is None:
        from audiotree.io.tar_shards import list_shard

        listing = list_shard(ref.container)
        table = {m.name: (m.offset, m.size) for m in listing.members}
        with _LOCK:
            _LISTINGS[ref.container] = table
            while len(_LISTINGS) > _LISTINGS_MAX:
                _LISTINGS.popitem(last=False)
    found = table.get(ref.name) or table.get(ref.name.lstrip("/"))
    if found is None:
        raise AudioReadError(
            f"Failed to read audio file 'tar://{ref.name}::{storage.redact(ref.container)}': the shard has no member "
            f"'{ref.name}'. Check the member name (`tar tf` lists them), or use on_read_error=\"skip\".",
            storage.redact(f"tar://{ref.name}::{ref.container}"))
    return found


#: Remote member reads: the first fetch of a member (its header), the bytes kept before a seek target (a FLAC
#: or MP3 decoder's seek steps back a little after its first probe), and the smallest read-ahead.
HEAD_FETCH = 32 * 1024
SEEK_BACK = 32 * 1024
MIN_FETCH = 32 * 1024
MAX_FETCH = 8 * 1024 * 1024


class RemoteSpan:
    """Ranged reads of bytes ``[lo, hi)`` of a remote object, tuned for one member's excerpt.

    One cached span. A read that continues it fetches the missing bytes plus a
    read-ahead that doubles each time (32 KiB to 8 MiB): a whole-member decode
    costs O(log size) requests. A read elsewhere (a seek) fetches from
    :data:`SEEK_BACK` before it to the announced excerpt's end (:meth:`expect`),
    so a decoder's seek probes and the excerpt come in one request. Every fetch
    goes through :func:`audiotree.io.storage.retry`; ``requests`` and
    ``bytes_fetched`` count them.
    """

    def __init__(self, url: str, lo: int, hi: int, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url, self.lo, self.hi = url, int(lo), int(hi)
        self._fs = storage.filesystem(url, storage_options)
        self._options = storage_options
        self.start = self.end = self.lo
        self.data = b""
        self.window = MIN_FETCH
        self.expected = 0
        self.requests = 0
        self.bytes_fetched = 0
        self.closed = False

    def _get(self, a: int, b: int) -> bytes:
        self.requests += 1
        data = storage.retry(lambda: self._fs.cat_file(self.url, start=a, end=b), self.url, "read", self._options)
        self.bytes_fetched += len(data)
        return data

    def read(self, pos: int, n: int) -> bytes:
        """Bytes ``[pos, pos + n)`` (absolute positions inside ``[lo, hi)``); short only where the object ends."""
        end = pos + n
        if not (self.start <= pos and end <= self.end):
            if self.start <= pos <= self.end and self.end > self.start:  # continues the span
                self.window = min(self.window * 2, MAX_FETCH)
                stop = min(self.hi, max(end, self.end + self.window))
                got = self._get(self.end, stop)
                keep = max(self.start, pos - SEEK_BACK)  # a decoder may step back a little
                self.data = self.data[keep - self.start:] + got
                self.start = keep
            else:
                self.window = MIN_FETCH
                first = self.start == self.end == self.lo and not self.data
                if self.expected:
                    a = max(self.lo, pos - SEEK_BACK)
                    # The first probe lands near (often a little before) the target: margin of 1/8.
                    stop = min(self.hi, max(end, pos + self.expected + self.expected // 8) + 16384)
                    self.expected = 0
                else:
                    a = pos
                    stop = min(self.hi, max(end, pos + (HEAD_FETCH if first else MIN_FETCH)))
                self.data = self._get(a, stop)
                self.start = a
            self.end = self.start + len(self.data)
        return self.data[pos - self.start:end - self.start]

    def close(self) -> None:
        self.data = b""
        self.closed = True


class MemberInput:
    """A read-only, seekable file object over bytes ``[offset, offset + size)`` of a shard.

    It is what the decoders receive for a tar member (like
    :class:`~audiotree.io.remote_file.RemoteInput` for a remote file): positions
    are relative to the member, reads stop at its end, and a read that comes
    back short before the member's end (the shard is cut off) records an
    :class:`AudioReadError` in :attr:`failure` naming the member URL. ``file``
    is a local file's descriptor (read with ``pread``), a :class:`RemoteSpan`,
    or an in-memory ``io.BytesIO`` (a Parquet cell).
    """

    __slots__ = ("url", "size", "failure", "_file", "_base", "_pos", "_local")

    #: Decoders may announce an excerpt before a seek (see decode.AudioFile.read): RemoteSpan keeps bytes
    #: before the target, so a probing seek does not waste the announcement.
    probe_tolerant = True

    def __init__(self, url: str, file: Any, offset: int, size: int) -> None:
        self.url = url
        self.size = int(size)
        self.failure: AudioReadError | None = None
        self._file = file
        self._base = int(offset)
        self._pos = 0
        self._local = isinstance(file, int)

    def __repr__(self) -> str:
        return f"<member {storage.redact(self.url)}>"

    def _short(self, got: int, wanted: int) -> AudioReadError:
        shown = storage.redact(self.url)
        return AudioReadError(
            f"Failed to read audio file '{shown}': the member's {self.size} bytes run past the end of the shard "
            f"(a read at byte {self._base + self._pos} of the shard returned {got} of {wanted} bytes); the shard is "
            "truncated. Re-create or re-download it, or use on_read_error=\"skip\".", shown)

    def _fetch(self, n: int) -> bytes:
        at = self._base + self._pos
        if isinstance(self._file, int):
            return os.pread(self._file, n, at)
        if isinstance(self._file, RemoteSpan):
            return self._file.read(at, n)
        self._file.seek(at)
        return self._file.read(n)

    def read(self, n: int = -1) -> bytes:
        if self.failure is not None:
            raise self.failure
        left = self.size - self._pos
        n = left if n is None or n < 0 else min(int(n), left)
        if n <= 0:
            return b""
        try:
            data = self._fetch(n)
        except AudioReadError as exc:
            self.failure = exc
            raise
        except Exception as exc:
            self.failure = storage.remote_error(self.url, exc, "read")
            raise self.failure from exc
        if len(data) < n:
            self.failure = self._short(len(data), n)
            raise self.failure
        self._pos += len(data)
        return data

    def readinto(self, buffer) -> int:
        if self._local and self.failure is None:  # the hot path (a decoder callback): one pread, no copy
            n = len(buffer)
            left = self.size - self._pos
            if n > left:
                if left <= 0:
                    return 0
                buffer, n = memoryview(buffer)[:left], left
            got = os.preadv(self._file, (buffer,), self._base + self._pos)
            if got < n:
                self.failure = self._short(got, n)
                return 0
            self._pos += got
            return got
        try:
            data = self.read(len(buffer))
        except AudioReadError:
            return 0
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:
            self._pos = offset if offset > 0 else 0
        else:
            pos = (self._pos if whence == 1 else self.size) + offset
            self._pos = pos if pos > 0 else 0
        return self._pos

    def tell(self) -> int:
        return self._pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def expect(self, nbytes: int) -> None:
        """Announces the excerpt's size: the next seek's fetch brings it whole (remote members)."""
        if isinstance(self._file, RemoteSpan):
            self._file.expected = max(0, min(int(nbytes), MAX_FETCH))

    def prefetch_head(self) -> None:
        """Fetches the member's first bytes (its header) now, in one ranged read (remote members)."""
        if isinstance(self._file, RemoteSpan) and self.size:
            self._file.read(self._base, min(self.size, HEAD_FETCH))

    def check(self) -> None:
        if self.failure is not None:
            raise self.failure

    @property
    def closed(self) -> bool:
        if isinstance(self._file, int):
            return self._file < 0
        return bool(getattr(self._file, "closed", False))

    def close(self) -> None:
        if isinstance(self._file, int):
            if self._file >= 0:
                os.close(self._file)
                self._file = -1
        else:
            self._file.close()

    def __enter__(self) -> MemberInput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def bytes_fetched(self) -> int:
        return int(getattr(self._file, "bytes_fetched", 0))


def _open_tar_member(path: str, ref: MemberRef) -> MemberInput:
    offset, size = _member_range(ref)
    if storage.is_url(ref.container):
        return MemberInput(path, RemoteSpan(ref.container, offset, offset + size), offset, size)
    shard = storage.local_path(ref.container)
    try:
        fd = os.open(shard, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise AudioReadError(f"Failed to read audio file '{path}': cannot open its shard ({exc}). Check the path "
                             "(was the shard moved or deleted?), or use on_read_error=\"skip\".", path) from exc
    shard_size = os.fstat(fd).st_size
    if offset + size > shard_size:  # known before any decoding: the shard is cut off inside this member
        os.close(fd)
        raise AudioReadError(
            f"Failed to read audio file '{path}': the member's {size} bytes run past the end of the shard (it ends "
            f"at byte {offset + size}, the shard has {shard_size} bytes); the shard is truncated. Re-create or "
            "re-download it, or use on_read_error=\"skip\".", path)
    return MemberInput(path, fd, offset, size)


# ---------------------------------------------------------------------------
# Parquet cells
# ---------------------------------------------------------------------------


def _open_parquet_cell(path: str, ref: MemberRef) -> MemberInput:
    from audiotree.io.parquet_audio import read_cell

    data = read_cell(path, ref)
    return MemberInput(path, io.BytesIO(data), 0, len(data))


# ---------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------


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
    with _LOCK:
        hit = _STATS.get(container)
    if hit is not None and now - hit[0] < _STAT_TTL:
        return hit[1]
    value = storage.stat(container)
    with _LOCK:
        _STATS[container] = (now, value)
        while len(_STATS) > 4096:
            _STATS.popitem(last=False)
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

"""A file object over a byte range of a local or remote file: what decoders get for a tar member.

:class:`MemberInput` presents bytes ``[offset, offset + size)`` of a file as a
whole seekable file (positions relative to the range, reads stopping at its
end); :class:`RemoteSpan` fetches a remote range by ranged requests with a
read-ahead tuned for one audio excerpt. :mod:`audiotree.io.members` opens tar
members and Parquet cells with them; :mod:`audiotree.io.tar_shards` reads a
remote shard's headers through them.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from audiotree.errors import AudioReadError
from audiotree.io.input_file import ReadOnlyInput
from audiotree.io import byte_reads, storage

__all__ = ["MemberInput", "RemoteSpan", "span_reads", "HEAD_FETCH", "SEEK_BACK", "MIN_FETCH", "MAX_FETCH"]

#: Remote member reads: the first fetch of a member (its header), the bytes kept before a seek target (a FLAC
#: or MP3 decoder's seek steps back a little after its first probe), and the smallest read-ahead.
HEAD_FETCH = 32 * 1024
SEEK_BACK = 32 * 1024
MIN_FETCH = 32 * 1024
MAX_FETCH = 8 * 1024 * 1024


def span_reads(ranges: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """The fetches of a :class:`RemoteSpan` over a member of ``size`` bytes whose decoder reads ``ranges``
    (positions in the member): its first fetch (:data:`HEAD_FETCH`), and around each range the bytes a seek
    fetches with it (:data:`SEEK_BACK` before, an eighth more and 16 KiB after). What a read-ahead plans for a
    member, so that the span's requests find their bytes.

    >>> span_reads([(0, 8192), (100_000, 180_000)], 1_000_000)
    [(0, 32768), (67232, 206384)]
    """
    out = [(0, min(size, HEAD_FETCH))]
    for lo, hi in ranges:
        out.append((max(0, lo - SEEK_BACK), min(size, hi + (hi - lo) // 8 + 16384)))
    out.sort()
    merged = [list(out[0])]
    for lo, hi in out[1:]:
        if lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


class RemoteSpan:
    """Ranged reads of bytes ``[lo, hi)`` of a remote object, tuned for one member's excerpt.

    One cached span. A read that continues it fetches the missing bytes plus a
    read-ahead that doubles each time (``fetch``, 32 KiB, up to 8 MiB; the first
    fetch is ``head``): a whole-member decode
    costs O(log size) requests. A read elsewhere (a seek) fetches from
    :data:`SEEK_BACK` before it to the announced excerpt's end (:meth:`expect`),
    so a decoder's seek probes and the excerpt come in one request. Every fetch
    goes through :func:`audiotree.io.storage.retry`; ``requests`` and
    ``bytes_fetched`` count them.
    """

    def __init__(self, url: str, lo: int, hi: int, storage_options: Mapping[str, Any] | None = None, *,
                 head: int = HEAD_FETCH, fetch: int = MIN_FETCH) -> None:
        self.url, self.lo, self.hi = url, int(lo), int(hi)
        self.head, self.min_fetch = int(head), int(fetch)
        # The options in effect now (a loader's scope), for reads made later outside it.
        self._options = storage.merged_options(storage_options)
        self.start = self.end = self.lo
        self.data = b""
        self.window = self.min_fetch
        self.expected = 0
        self.requests = 0
        self.bytes_fetched = 0
        self.closed = False

    def _get(self, a: int, b: int) -> bytes:
        self.requests += 1
        data = byte_reads.read_bytes(self.url, a, b, storage_options=self._options)
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
                self.window = self.min_fetch
                first = self.start == self.end == self.lo and not self.data
                if self.expected:
                    a = max(self.lo, pos - SEEK_BACK)
                    # The first probe lands near (often a little before) the target: margin of 1/8.
                    stop = min(self.hi, max(end, pos + self.expected + self.expected // 8) + 16384)
                    self.expected = 0
                else:
                    a = pos
                    stop = min(self.hi, max(end, pos + (self.head if first else self.min_fetch)))
                self.data = self._get(a, stop)
                self.start = a
            self.end = self.start + len(self.data)
        return self.data[pos - self.start:end - self.start]

    def close(self) -> None:
        self.data = b""
        self.closed = True


class MemberInput(ReadOnlyInput):
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
        return super().readinto(buffer)

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:
            self._pos = offset if offset > 0 else 0
        else:
            pos = (self._pos if whence == 1 else self.size) + offset
            self._pos = pos if pos > 0 else 0
        return self._pos

    def tell(self) -> int:
        return self._pos

    def expect(self, nbytes: int) -> None:
        """Announces the excerpt's size: the next seek's fetch brings it whole (remote members)."""
        if isinstance(self._file, RemoteSpan):
            self._file.expected = max(0, min(int(nbytes), MAX_FETCH))

    def prefetch_head(self) -> None:
        """Fetches the member's first bytes (its header) now, in one ranged read (remote members)."""
        if isinstance(self._file, RemoteSpan) and self.size:
            self._file.read(self._base, min(self.size, HEAD_FETCH))

    @property
    def local(self) -> bool:
        """Whether the bytes are a local file's or in memory (reading them all costs no request)."""
        return not isinstance(self._file, RemoteSpan)

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

    @property
    def bytes_fetched(self) -> int:
        return int(getattr(self._file, "bytes_fetched", 0))

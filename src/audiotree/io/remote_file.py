"""Seekable reads of one remote object: :func:`open_input` and the ``"audiotree"`` read-ahead cache.

A remote file is opened as an fsspec file object whose cache
(:class:`ReadaheadCache`, built on first use so that importing this module
never imports fsspec) fetches the bytes asked for plus a small window (64
KiB); each read that continues the previous one grows the window by 1.5x (up
to 8 MiB). Header reads and a FLAC decoder's seek probes stay small, while a
long sequential excerpt read needs only a few requests and overshoots by at
most half of what it has read. libsndfile reads file objects 8 KiB at a
time, so a plain block cache would cost one request per 8 KiB. Every request
goes through :func:`audiotree.io.storage.retry`; a server that ignores
``Range`` is detected, warned about once per host, and coped with.

The paths, options, errors and object operations are in
:mod:`audiotree.io.storage`.

>>> open_input("/data/a.wav")  # a local path is returned as it is
'/data/a.wav'
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import warnings
from typing import Any, Callable, Mapping

from audiotree.errors import AudioReadError
from audiotree.io.input_file import ReadOnlyInput
from audiotree.io.ranged_get import HEAD_NEED, Answer, first_bytes_and_size, get_range, planned_size
from audiotree.io.storage import (
    filesystem,
    is_url,
    local_path,
    object_info,
    redact,
    remote_error,
    retry,
)

__all__ = ["RemoteInput", "open_input", "first_read", "ReadaheadCache", "MIN_WINDOW", "MAX_WINDOW"]

#: Read-ahead window bounds (bytes) of :class:`ReadaheadCache`.
MIN_WINDOW = 64 * 1024
MAX_WINDOW = 8 * 1024 * 1024

_RANGE_WARNED: set[str] = set()
#: Bytes the opening GET of :func:`open_input` asks for (see :func:`first_read`).
_HEAD_BYTES: contextvars.ContextVar[int] = contextvars.ContextVar("audiotree_head_bytes", default=MIN_WINDOW)


@contextlib.contextmanager
def first_read(nbytes: int):
    """Within this block, :func:`open_input` fetches ``nbytes`` (at least :data:`MIN_WINDOW`, at most
    :data:`MAX_WINDOW`) with its opening request instead of :data:`MIN_WINDOW`.

    Why: a reader that knows it will decode a whole small object (an
    ``AudioWriter`` item, whose size its manifest implies) gets it in the one
    request that also carries the size, instead of a header window and then the
    rest. Asking for more than the object holds costs nothing: the answer stops
    at its end.

    >>> with first_read(1 << 20):
    ...     _HEAD_BYTES.get()
    1048576
    """
    token = _HEAD_BYTES.set(max(MIN_WINDOW, min(int(nbytes), MAX_WINDOW)))
    try:
        yield
    finally:
        _HEAD_BYTES.reset(token)


def _fsspec_base_cache():
    from fsspec.caching import BaseCache

    return BaseCache


def _make_cache_class():
    BaseCache = _fsspec_base_cache()

    class ReadaheadCache(BaseCache):
        """An fsspec cache with an adaptive read-ahead window, retries and a no-Range fallback.

        A read that starts outside the cached span fetches ``[start, end +
        MIN_WINDOW)``; a read that continues the cached span fetches the
        missing part plus a window 1.5x the previous one (at most
        ``MAX_WINDOW``). So seek probes cost little and a sequential read of
        ``n`` bytes costs O(log n) requests and at most ~1.5 n bytes.
        """

        name = "audiotree"

        def __init__(self, blocksize: int, fetcher: Callable[[int, int], bytes], size: int, **kwargs: Any) -> None:
            self._url = kwargs.pop("url", "")
            super().__init__(blocksize, fetcher, size)
            self.cache = b""
            self.start = 0
            self.end = 0
            self.window = max(int(blocksize or 0), MIN_WINDOW)
            self.min_window = self.window
            self.expected = 0  # bytes the caller announced for its next read (see RemoteInput.expect)
            self.full = False

        def seed(self, start: int, data: bytes) -> None:
            """Holds ``data`` (bytes ``start..``, already fetched elsewhere) as the cached span."""
            self.cache, self.start, self.end = data, start, start + len(data)
            self.total_requested_bytes += len(data)

        def _get(self, start: int, end: int, need: int) -> bytes:
            # ``need``: where the caller's read ends (``end`` adds the window): bytes the read-ahead holds up to
            # ``need`` serve it without a request.
            answer = retry(lambda: self.fetcher(start, end, need), self._url, "read")
            if not isinstance(answer, Answer):  # a plain fetcher (bytes)
                return answer
            if answer.start == start or not answer.whole:
                return answer.part(start, end)
            # The server ignored Range and sent the whole object: keep it all.
            host = self._url.split("/")[2] if "://" in self._url else self._url
            if host not in _RANGE_WARNED:
                _RANGE_WARNED.add(host)
                warnings.warn(
                    f"The server for {redact(self._url)} ignores HTTP Range requests and sends whole objects; "
                    "audiotree downloads each such file completely once per open. Serve the files from storage "
                    "that honours Range (S3, GCS, most web servers) to read excerpts only.",
                    UserWarning, stacklevel=2,
                )
            data = answer.data
            self.cache, self.start, self.end, self.full = data, 0, len(data), True
            self.total_requested_bytes += len(data)
            return data

        def span(self, start: int, end: int) -> bytes:
            """Bytes ``[start, end)`` of the object (clipped at its end), from the cache or fetched."""
            return self._fetch(start, end)

        def _fetch(self, start: int | None, end: int | None) -> bytes:
            if start is None:
                start = 0
            if end is None or end > self.size:
                end = self.size
            if start >= end:
                return b""
            if self.start <= start and end <= self.end:
                self.hit_count += 1
                return self.cache[start - self.start : end - self.start]
            self.miss_count += 1
            if self.start <= start < self.end:
                # Sequential continuation: keep the tail, grow the window.
                self.window = min(int(self.window * 1.5), MAX_WINDOW)
                stop = min(self.size, end + self.window)
                part = self.cache[start - self.start :]
                fetched = self._get(self.end, stop, end)
                if self.full:
                    return self.cache[start:end]
                self.cache = part + fetched
            else:
                self.window = self.min_window
                # An announced read (a whole excerpt) comes in one request.
                stop = min(self.size, max(end, start + self.expected) + self.window)
                self.expected = 0
                fetched = self._get(start, stop, end)
                if self.full:
                    return self.cache[start:end]
                self.cache = fetched
            self.start = start
            self.end = start + len(self.cache)
            self.total_requested_bytes += len(fetched)
            return self.cache[: end - start]

    return ReadaheadCache


_cache_class = None


def _register_cache():
    global _cache_class
    if _cache_class is None:
        from fsspec.caching import caches, register_cache

        cls = _make_cache_class()
        if cls.name not in caches:
            register_cache(cls)
        _cache_class = caches[cls.name]
    return _cache_class


def __getattr__(name: str):
    # ``ReadaheadCache`` subclasses fsspec's BaseCache, so it is built on first
    # use: importing this module must not import fsspec (local fast path).
    if name == "ReadaheadCache":
        return _register_cache()
    raise AttributeError(name)


class RemoteInput(ReadOnlyInput):
    """An open remote object: a seekable binary file object plus its size and URL.

    ``read``/``seek``/``tell`` delegate to the fsspec file; the object is what
    soundfile and PyAV receive. Close it (or use it as a context manager).
    """

    __slots__ = ("url", "size", "failure", "_file")

    def __init__(self, url: str, file: Any, size: int) -> None:
        self.url = url
        self.size = size
        #: The storage error a read hit, if any. Decoders call ``readinto``
        #: from C callbacks that cannot raise (cffi would print the error and
        #: report a short read), so the error is kept here, reads after it
        #: return nothing, and the caller raises it (:meth:`check`).
        self.failure: AudioReadError | None = None
        self._file = file

    def read(self, n: int = -1) -> bytes:
        if self.failure is not None:
            raise self.failure
        try:
            return self._file.read(n)
        except AudioReadError as exc:
            self.failure = exc
            raise
        except Exception as exc:
            self.failure = remote_error(self.url, exc, "read")
            raise self.failure from exc

    def readinto(self, buffer) -> int:
        """Fills ``buffer``: straight from the cached span when it holds the bytes (decoders read a few bytes per
        call, hundreds of times per excerpt: this path is one slice), else through :meth:`read`."""
        file = self._file
        if self.failure is None and isinstance(file, _RangedFile) and not file.closed:
            cache, loc = file.cache, file.loc
            stop = min(file.size, loc + len(buffer))
            if cache.start <= loc and stop <= cache.end:
                count = stop - loc
                buffer[:count] = memoryview(cache.cache)[loc - cache.start:stop - cache.start]
                file.loc = stop
                return count
        return super().readinto(buffer)

    def expect(self, nbytes: int) -> None:
        """Announces that the next read starting at a new position will consume about ``nbytes``.

        The cache then fetches them in one request instead of growing its
        window over several (each request pays the storage's latency).
        """
        cache = getattr(self._file, "cache", None)
        if cache is not None and hasattr(cache, "expected"):
            cache.expected = max(0, min(int(nbytes), MAX_WINDOW))

    def prefetch_head(self) -> None:
        """Fetches the first read-ahead window (the header) now, into the cache.

        Why: soundfile opens a file object under a process-wide lock
        (``SoundFile._sf_error_lock``), so a header read made from inside its
        open serialises every reader thread behind one network round trip.
        Fetched here, before the decoder opens, the header costs the same
        single request but threads overlap it. A storage error is raised here,
        naming the URL.
        """
        cache = getattr(self._file, "cache", None)
        if cache is None or not hasattr(cache, "expected") or self.size == 0 or cache.end > cache.start:
            return
        # Asked for HEAD_NEED bytes, the cache requests a window more (and takes as much as a planned block holds):
        # a header that goes on past them is read on, as any read is.
        cache._fetch(0, min(self.size, HEAD_NEED))

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    @property
    def closed(self) -> bool:
        return bool(getattr(self._file, "closed", False))

    def close(self) -> None:
        self._file.close()

    @property
    def bytes_fetched(self) -> int:
        """Bytes this handle fetched from the server so far (from its cache)."""
        return int(getattr(getattr(self._file, "cache", None), "total_requested_bytes", 0))



class _RangedFile:
    """A seekable binary file over a :class:`ReadaheadCache` of an object of ``size`` bytes."""

    def __init__(self, cache: Any, size: int) -> None:
        self.cache, self.size, self.loc, self.closed = cache, size, 0, False

    def read(self, n: int = -1) -> bytes:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        stop = self.size if n is None or n < 0 else min(self.size, self.loc + int(n))
        out = self.cache.span(self.loc, stop) if stop > self.loc else b""
        self.loc += len(out)
        return out

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.loc, 2: self.size}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if base + offset < 0:
            raise ValueError("Seek before start of file")
        self.loc = base + offset
        return self.loc

    def tell(self) -> int:
        return self.loc

    def close(self) -> None:
        self.closed = True
        self.cache.cache = b""


def open_input(path: str | os.PathLike, *, storage_options: Mapping[str, Any] | None = None) -> str | RemoteInput:
    """A local path (returned as ``str``, untouched) or an open :class:`RemoteInput` for a URL.

    The remote file is opened with :class:`ReadaheadCache`; one metadata call
    (size) and no data is fetched until the decoder reads.

    Raises:
        AudioReadError: the object is missing, forbidden, or the storage keeps failing.
        ImportError / ValueError: the protocol is not available (see :func:`filesystem`).
    """
    path = os.fsdecode(path)
    if not is_url(path):
        return local_path(path)
    fs = filesystem(path, storage_options)
    cache = _register_cache()
    size, first = planned_size(path), None  # the read-ahead knows it from the index: no request for it
    if size is None:
        head = retry(lambda: first_bytes_and_size(fs, path, _HEAD_BYTES.get()), path, "open", storage_options)
        if head is not None:
            size, first = head
        else:
            size = int(retry(lambda: object_info(fs, path), path, "open", storage_options)["size"])

    def fetch(start: int, stop: int, need: int | None = None) -> Answer:
        return get_range(fs, path, start, stop, size=size, need=need)

    file = _RangedFile(cache(MIN_WINDOW, fetch, size, url=path), size)
    remote = RemoteInput(path, file, size)
    if first is not None:
        file.cache.seed(0, first)
    try:
        remote.prefetch_head()
    except BaseException:
        remote.close()
        raise
    return remote


"""One ranged GET of a remote object, its answer checked against the request.

A ``Range: bytes=a-b`` request may be answered with anything: HTTP allows a
server or a proxy to send ``200`` and the whole object instead, and a cache in
between may send a ``206`` for another range. fsspec's ``cat_file`` returns
whatever body came back, so bytes from elsewhere in the object would be taken
for the range: shifted audio, a tar member or a Parquet cell from the wrong
place. :func:`get_range` makes the request itself (s3fs, gcsfs and HTTP) and
checks the status and the ``Content-Range`` start, end and length against what
was asked:

- ``206`` for exactly the range (clipped at the object's end): the bytes;
- ``200``: the whole object. Its length must be ``size`` when the caller knows
  it; the range is then sliced out of it (:meth:`Answer.part`), never taken as
  the range;
- ``416``: the object is shorter than ``a`` (an empty answer);
- anything else raises :class:`~audiotree.io.storage.WrongRange`, which
  :func:`audiotree.io.storage.retry` retries and then reports as an
  :class:`~audiotree.errors.AudioReadError` naming the request.

Other backends (local, ``memory://``, the rest of fsspec) are read with
``cat_file``; an answer longer than the range is refused the same way.

This module is the byte layer's one ranged GET per backend (``_s3``, ``_gcs``,
``_http``, ``cat_file`` for the rest) and the only code that calls a backend's
private request method. An S3 GET goes by the object's presigned URL on a plain
HTTP session where that fits (:mod:`audiotree.io.signed_get`: a tenth of the
client CPU), else, and whenever the signed answer is unusable, by ``_call_s3``. Every request it makes is counted in
:mod:`audiotree.io.byte_counters` under its backend's name, with the wall time
the calling thread waited on it.

>>> check_answer("u", 206, "bytes 10-19/100", b"x" * 10, 10, 20)
Answer(data=b'xxxxxxxxxx', start=10, total=100)
>>> check_answer("u", 206, "bytes 0-9/100", b"x" * 10, 10, 20)
Traceback (most recent call last):
...
audiotree.io.storage.WrongRange: GET u bytes=10-19 was answered with 206 and Content-Range 'bytes 0-9/100'
>>> check_answer("u", 200, "", b"0123456789", 2, 5).part(2, 5)
b'234'
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, NamedTuple

from audiotree.io import byte_counters, signed_get, storage

__all__ = ["HEAD_NEED", "Answer", "get_range", "get_whole", "check_answer", "read_range", "first_bytes_and_size", "fetch_range", "planned_size",
           "fetched_size", "hold_bytes_in", "stop_holding_in"]

_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.I)


class Answer(NamedTuple):
    """What a ranged GET brought: ``data`` holds bytes ``[start, start + len(data))`` of an object of ``total``
    bytes (``None`` when the answer did not say)."""

    data: bytes
    start: int
    total: int | None

    def part(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of the object, as far as this answer holds them."""
        lo = max(0, start - self.start)
        return self.data[lo:max(lo, stop - self.start)]

    @property
    def whole(self) -> bool:
        """Whether the answer is the whole object (a ``200``)."""
        return self.start == 0 and self.total is not None and len(self.data) == self.total


#: The bytes an object's opening read must hold before its decoder opens: a WAV or AIFF header with its usual
#: chunks. The reader asks for them (and takes as much more as the read-ahead holds); the read-ahead plans no more
#: of an uncompressed file's start (:func:`audiotree.io.read_ahead.excerpt_ranges`). A longer header is read on,
#: as any read is.
HEAD_NEED = 8 * 1024


def check_answer(url: str, status: int, content_range: str | None, data: bytes, start: int, stop: int, *,
                 size: int | None = None) -> Answer:
    """The :class:`Answer` to ``GET url`` with ``Range: bytes=start-(stop-1)``, or
    :class:`~audiotree.io.storage.WrongRange` when the status, ``Content-Range`` or body is not that range (or
    the whole object, of ``size`` bytes when given)."""
    asked = f"GET {url} bytes={start}-{stop - 1}"
    content_range = (content_range or "").strip()
    if status == 206:
        match = _CONTENT_RANGE.match(content_range)
        if match is not None:
            first, last = int(match.group(1)), int(match.group(2))
            total = None if match.group(3) == "*" else int(match.group(3))
            end = stop if total is None else min(stop, total)
            if first == start and last == end - 1 and len(data) == last - first + 1:
                return Answer(data, start, total)
        raise storage.WrongRange(f"{asked} was answered with 206 and Content-Range {content_range!r}"
                                 + (f" and {len(data)} bytes" if match is not None and match.group(1) == str(start)
                                    else ""))
    if status == 200:
        if content_range:
            match = _CONTENT_RANGE.match(content_range)
            if match is None or int(match.group(1)) != 0 or int(match.group(2)) != len(data) - 1:
                raise storage.WrongRange(f"{asked} was answered with 200 and Content-Range {content_range!r}")
        if size is not None and len(data) != size:
            raise storage.WrongRange(f"{asked} was answered with 200 and {len(data)} bytes, but the object is "
                                     f"{size} bytes")
        if not data and size is None:  # a middlebox's empty 200 is not an empty object (that answers 416)
            raise storage.WrongRange(f"{asked} was answered with 200 and no bytes")
        return Answer(data, 0, len(data))
    raise storage.WrongRange(f"{asked} was answered with HTTP {status}")


async def _s3(fs: Any, url: str, start: int, stop: int, size: int | None) -> Answer:
    signed = await signed_get.signed_url(fs, url)  # the object's presigned URL; None: presigning does not fit
    if signed is not None:
        try:  # a plain HTTP GET: a tenth of the client CPU of _call_s3's (botocore's hooks, signing, parsing)
            async with signed.session().get(signed.signed, headers={"Range": f"bytes={start}-{stop - 1}"},
                                            **signed.options) as r:
                status, content_range, data = r.status, r.headers.get("Content-Range"), await r.read()
        except Exception as exc:
            signed.failed(exc)  # re-raises a transient fault (naming url); else the usual way below
        else:
            if signed.usable(status):  # else (403, a redirect, ...) the usual way below, which reports as before
                if status == 416:
                    return Answer(b"", start, None)
                return check_answer(url, status, content_range, data, start, stop, size=size)
    bucket, key, version = fs.split_path(url)
    extra = {"VersionId": version} if version else {}
    try:
        resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{stop - 1}", **extra)
    except OSError as exc:
        if storage.http_status(exc) == 416 or "not satisfiable" in str(exc).lower():
            return Answer(b"", start, None)  # the object is shorter than ``start``
        raise
    try:
        data = await resp["Body"].read()
    finally:
        resp["Body"].close()
    status = resp.get("ResponseMetadata", {}).get("HTTPStatusCode", 206 if resp.get("ContentRange") else 200)
    return check_answer(url, int(status), resp.get("ContentRange"), data, start, stop, size=size)


async def _gcs(fs: Any, url: str, start: int, stop: int, size: int | None) -> Answer:
    try:  # fs.url keeps a generation the URL names
        status, headers, _, data = await fs._request("GET", fs.url(url), headers={"Range": f"bytes={start}-{stop - 1}"})
    except Exception as exc:
        if storage.http_status(exc) == 416:
            return Answer(b"", start, None)
        raise
    return check_answer(url, int(status), headers.get("Content-Range"), data, start, stop, size=size)


async def _http(fs: Any, url: str, start: int, stop: int, size: int | None) -> Answer:
    kw = dict(fs.kwargs)
    headers = dict(kw.pop("headers", None) or {})
    headers["Range"] = f"bytes={start}-{stop - 1}"
    session = await fs.set_session()
    async with session.get(fs.encode_url(url), headers=headers, **kw) as r:
        if r.status == 416:
            return Answer(b"", start, None)
        if r.status == 404:
            raise FileNotFoundError(url)
        r.raise_for_status()
        data = await r.read()
        status, content_range = r.status, r.headers.get("Content-Range")
    return check_answer(url, status, content_range, data, start, stop, size=size)


def _is_s3(fs: Any) -> bool:
    return callable(getattr(fs, "_call_s3", None)) and callable(getattr(fs, "split_path", None))


def _backend(fs: Any):
    module = type(fs).__module__
    if _is_s3(fs):
        return _s3
    if module.startswith("gcsfs") and callable(getattr(fs, "_request", None)):
        return _gcs
    if module.startswith("fsspec.implementations.http") and callable(getattr(fs, "set_session", None)):
        return _http
    return None


async def fetch_range(fs: Any, url: str, start: int, stop: int, *, size: int | None = None) -> Answer:
    """:func:`get_range` as a coroutine on ``fs``'s own event loop (the read-ahead's many requests in flight,
    :mod:`audiotree.io.read_ahead`); counted the same way. Backends without an async client are refused."""
    backend = _backend(fs)
    if backend is None:
        raise TypeError(f"{type(fs).__name__} has no async ranged GET here; {url} is read by get_range.")
    got = 0
    try:
        answer = await backend(fs, url, start, stop, size)
        got = len(answer.data)
        return answer
    finally:
        byte_counters.count_request(byte_counters.backend_of(url), got)


#: Where bytes fetched ahead are kept (the read-ahead's stores register here, :mod:`audiotree.io.read_ahead`):
#: objects with ``take(url, start, stop, need)``, ``size_of(url)`` and ``total_of(url)``. Per process: a forked
#: child starts without.
_holders: list = []


def hold_bytes_in(holder: Any) -> None:
    """Has :func:`get_range` (and :func:`planned_size`) ask ``holder`` before making a request."""
    if holder not in _holders:
        _holders.append(holder)


def stop_holding_in(holder: Any) -> None:
    """Undoes :func:`hold_bytes_in`."""
    if holder in _holders:
        _holders.remove(holder)


def _held(url: str, start: int, stop: int, need: int | None, view: bool = False) -> bytes | memoryview | None:
    holders = list(_holders)
    for holder in holders:
        data = holder.take(url, start, stop, need, view=view)
        if data is not None:
            byte_counters.count_cache("read_ahead", hit=True)
            return data
    if holders:  # a read the read-ahead did not foresee: the caller's own request (read_stats().cache_misses)
        byte_counters.count_cache("read_ahead", hit=False)
    return None


def planned_size(url: str) -> int | None:
    """The size of ``url`` as the read-ahead planned it (from a corpus index), or ``None``."""
    return _first_size("size_of", url)


def fetched_size(url: str) -> int | None:
    """The size of ``url`` as the answer to a read-ahead's GET of it gave it (its ``Content-Range``), or ``None``:
    what a caller served from held bytes checks, instead of asking the storage again."""
    return _first_size("total_of", url)


def _first_size(lookup: str, url: str) -> int | None:
    for holder in list(_holders):
        size = getattr(holder, lookup)(url)
        if size is not None:
            return size
    return None


def get_range(fs: Any, url: str, start: int, stop: int, *, size: int | None = None, need: int | None = None,
              view: bool = False) -> Answer:
    """One GET of bytes ``[start, stop)`` of ``url`` on ``fs``, checked (see the module text); not retried.

    ``size``, the object's length when the caller knows it, is what a ``200``
    answer must hold. Bytes the read-ahead holds are taken from it instead
    (no request): all of ``[start, stop)``, or, for a caller that asks for more
    than it needs, as far as a block holds them past ``need``. With ``view``, held bytes may come as a read-only
    ``memoryview`` of the read-ahead's block (no copy: for a caller that copies them anyway).
    """
    if stop <= start:
        return Answer(b"", start, None)
    held = _held(url, start, stop, need, view)
    if held is not None:
        return Answer(held, start, size)
    backend = _backend(fs)
    name = byte_counters.backend_of(url)
    got = 0
    began = time.perf_counter()
    try:
        if backend is None:
            data = fs.cat_file(url, start=start, end=stop)
            got = len(data)
            if len(data) > stop - start:
                raise storage.WrongRange(f"GET {url} bytes={start}-{stop - 1} brought {len(data)} bytes")
            return Answer(data, start, None)
        from fsspec.asyn import sync

        answer = sync(fs.loop, backend, fs, url, start, stop, size)
        got = len(answer.data)
        return answer
    finally:  # a failed request is a request too (a retry is counted once per try)
        byte_counters.count_request(name, got, wait_seconds=time.perf_counter() - began)


def get_whole(fs: Any, url: str) -> bytes:
    """The whole object ``url`` in one GET (counted like a ranged one); not retried."""
    got = 0
    began = time.perf_counter()
    try:
        data = fs.cat_file(url)
        got = len(data)
        return data
    finally:
        byte_counters.count_request(byte_counters.backend_of(url), got, wait_seconds=time.perf_counter() - began)


def first_bytes_and_size(fs: Any, url: str, nbytes: int) -> tuple[int, bytes] | None:
    """``(the object's size, its first nbytes)`` from one checked ranged GET, where the backend's answer carries
    the size (S3, by ``Content-Range``); ``None`` otherwise (then a metadata request gives the size).

    Why: a HEAD for the size followed by a GET for the header costs two round
    trips per opened file; on S3 the GET's ``Content-Range`` carries the size,
    so one does. Empty objects (which have no byte range), a versioned URL and
    odd answers give ``None``.
    """
    if not _is_s3(fs):
        return None
    _, key, version = fs.split_path(url)
    if not key or version:
        return None
    answer = get_range(fs, url, 0, nbytes)
    if answer.total is None:
        return None  # 416 (an empty object) or no size given: let the HEAD path decide
    data = answer.part(0, nbytes)
    if len(data) < min(answer.total, nbytes):
        return None  # a short or odd answer: let the HEAD path decide
    return answer.total, data


def read_range(fs: Any, url: str, start: int, stop: int, storage_options: Any = None, *, what: str = "read",
               size: int | None = None) -> bytes:
    """Bytes ``[start, stop)`` of ``url`` (short only where the object ends): :func:`get_range` retried by
    :func:`audiotree.io.storage.retry`.

    >>> storage.filesystem("memory://").pipe("memory://doc/ranged/a.bin", b"0123456789")
    >>> read_range(storage.filesystem("memory://"), "memory://doc/ranged/a.bin", 3, 6)
    b'345'
    """
    answer = storage.retry(lambda: get_range(fs, url, start, stop, size=size), url, what, storage_options)
    return answer.part(start, stop)


def _forget_holders_after_fork() -> None:
    _holders.clear()  # their blocks are futures of the parent's IO loop


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_holders_after_fork)

"""An S3 ranged GET by a presigned URL: one plain HTTP request, at the client CPU cost of an ``https://`` read.

Why: a ranged GET through s3fs (``_call_s3("get_object")``, aiobotocore) costs
1.2 to 2.4 ms of client CPU per request (measured against moto, 100 KB ranges,
16 in flight): botocore's event hooks, the user-agent string, endpoint
resolution, signing and parsing the answer's headers, every time. A training
job makes about one request per item, so that was the largest CPU cost of
reading from S3. The same GET by a presigned URL with a ``Range`` header on a
plain aiohttp session costs what an HTTP read costs (0.28 ms there,
``benchmarks/s3_get_cpu.py``); the URL is signed once per object (0.13 ms)
and reused.

How: :func:`signed_url` signs ``get_object`` for the object (its version
and the filesystem's ``RequestPayer``/``ExpectedBucketOwner`` included) with
the filesystem's own client (``generate_presigned_url``), keeps the URL per
process in a :class:`~audiotree.io.byte_cache.BoundedCache` keyed by the
filesystem object and the ``s3://`` URL, signed for
:data:`SIGNED_FOR` seconds and reused for at most :data:`REUSE_FOR`, and
gives a session of its own per event loop (fsspec's IO loop). The GET itself
is ``_s3`` in :mod:`audiotree.io.ranged_get` (the byte layer's one ranged GET
per backend), which checks the answer as any other and tells the
:class:`Signed` it got whether the answer was usable.

Never wrong, never refused: ``None`` means "make this request the usual way"
(``_call_s3``), which reports errors as before. That is the answer for

- a filesystem presigning does not fit: SSE-C keys (they must travel as
  headers), other request parameters that would not be in the URL, a proxy or
  client certificate in the client's settings or a proxy variable
  (``HTTPS_PROXY``, ``NO_PROXY``: read once per process) that covers the
  endpoint (TLS verification follows botocore's: ``client_kwargs["verify"]``,
  else ``AWS_CA_BUNDLE``);
- any answer the signed GET cannot use: 403 (an expired URL or temporary
  credentials), 301/307/400 (another region), anything but 2xx, 404 or 416.
  The cached URL is dropped; a URL that never served an answer is replaced by
  "the usual way" for this object (for its bucket after a redirect or a 400)
  for :data:`REUSE_FOR` seconds, so a bucket where presigning fails does not
  pay two requests a read;
- a client fault that is not transient (a TLS or URL error), or signing that
  fails (no credentials: the usual way reports it as before).

Transient faults (a reset connection, a body cut short, a timeout) are
raised as they are, so :func:`audiotree.io.storage.retry` classifies and
retries them as before.

No secret in messages: a signed URL's query is a credential. Nothing here
logs it or puts it in an exception: an aiohttp error whose text names the
request has the signed URL replaced by the ``s3://`` URL before it is raised
(and is not raised at all, the usual way taken instead, if its text still
holds the signature).

Per process: a forked child keeps the URLs (they are strings) but never
touches the sessions it inherited (their sockets and the loop's selector are
shared with the parent); it opens its own. :func:`close_sessions` closes this
process's sessions on their loop; :mod:`audiotree.io.loop_shutdown` calls it
before it stops the IO loop at exit.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import threading
import time
import weakref
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from audiotree.io import loop_shutdown, storage
from audiotree.io.byte_cache import BoundedCache

__all__ = ["SIGNED_FOR", "REUSE_FOR", "Signed", "signed_url", "close_sessions", "forget", "signed_gets"]

#: Seconds a presigned URL is valid for.
SIGNED_FOR = 3600
#: Seconds a presigned URL is reused for (at most half its validity, so a URL in use never expires mid-epoch).
REUSE_FOR = SIGNED_FOR // 2

# Parameters of GetObject a presigned URL carries in its query (in every signature version); any other
# parameter the filesystem adds to its requests means the usual way.
_IN_QUERY = frozenset({"VersionId", "RequestPayer", "ExpectedBucketOwner", "ResponseCacheControl",
                       "ResponseContentDisposition", "ResponseContentEncoding", "ResponseContentLanguage",
                       "ResponseContentType", "ResponseExpires", "PartNumber"})
# What an unsigned URL (an anonymous filesystem) can carry: query parameters proper, no x-amz- header.
_UNSIGNED_IN_QUERY = frozenset(p for p in _IN_QUERY if p not in ("RequestPayer", "ExpectedBucketOwner"))
_SIGNATURE_PARAMS = ("X-Amz-Signature", "Signature")

_USUAL_WAY = ""  # the cached "sign nothing for this object, use _call_s3"

# (id(fs), s3:// url) -> [signed url or _USUAL_WAY, made at (monotonic), answers served, weakref to fs]. Keyed by
# the filesystem object, not its options: two filesystems with equal options may reach different endpoints (the
# AWS variables are not options). Lookups stay out of the byte layer's cache counts (they are not reads).
_urls = BoundedCache("s3_signed_urls", max_entries=16_384, counted=False)
_lock = threading.Lock()
_usual_buckets: dict = {}  # (id(fs), bucket) -> (until when (monotonic) its GETs go the usual way, weakref to fs)
_sessions: dict = {}  # event loop -> aiohttp.ClientSession of this process
_inherited: list = []  # sessions of a forked parent: kept (never closed, never collected) in the child
_counts = {"signed": 0, "usual": 0, "fallbacks": 0}


def signed_gets() -> dict[str, int]:
    """This process's counts: GETs answered by a signed URL (``signed``), GETs made the usual way because
    presigning does not fit (``usual``), signed GETs whose answer was unusable and made again the usual way
    (``fallbacks``)."""
    return dict(_counts)


def forget(fs: Any = None, url: str | None = None) -> None:
    """Drops the signed URL of ``url`` on ``fs`` (all of them when called without arguments)."""
    if fs is None:
        _urls.clear()
        _usual_buckets.clear()
    else:
        _urls.pop((id(fs), url))


def _request_params(fs: Any, version: str | None) -> dict | None:
    """The GetObject parameters besides Bucket and Key the filesystem sends, or None when one cannot be in a URL."""
    params = dict(getattr(fs, "s3_additional_kwargs", None) or {})
    params.update(getattr(fs, "req_kw", None) or {})
    if params.get("RequestPayer", "") is None:  # s3fs: an explicit None disables the request-wide default
        params.pop("RequestPayer")
    if version:
        params["VersionId"] = version
    if any(name.startswith("SSECustomer") for name in params):
        return None  # SSE-C: the key must travel as a header, never in a URL
    return params


def _client_fits(fs: Any) -> bool:
    """Whether a plain session reaches the bucket as the filesystem's client does (no proxy or client certificate
    of its own in the client's settings)."""
    config_kwargs = getattr(fs, "config_kwargs", None) or {}
    return not (config_kwargs.get("proxies") or config_kwargs.get("client_cert") or config_kwargs.get("proxies_config"))


_contexts: dict = {}  # CA bundle path -> ssl.SSLContext (a context costs milliseconds to make)


def _tls(fs: Any) -> Any:
    """The TLS verification botocore applies: ``client_kwargs["verify"]`` (False, or a CA bundle), else
    ``AWS_CA_BUNDLE``, else the default (``True``: aiohttp's own)."""
    verify = (getattr(fs, "client_kwargs", None) or {}).get("verify")
    if verify is None:
        verify = os.environ.get("AWS_CA_BUNDLE") or True
    if verify is False or verify is True:
        return verify
    context = _contexts.get(verify)
    if context is None:
        import ssl

        context = _contexts[verify] = ssl.create_default_context(cafile=str(verify))
    return context


async def _sign(fs: Any, bucket: str, key: str, params: dict) -> str:
    """A presigned GetObject URL of the object, or ``_USUAL_WAY`` when the URL would need headers."""
    await fs.set_session()
    client = await fs.get_s3(bucket)
    getting = frozenset(client.meta.service_model.operation_model("GetObject").input_shape.members)
    params = {k: v for k, v in params.items() if k in getting}  # what _call_s3 would send for get_object
    if set(params) - _IN_QUERY:
        return _USUAL_WAY  # a parameter that travels as a header (a condition, a checksum mode)
    signed = await client.generate_presigned_url("get_object", Params=dict(Bucket=bucket, Key=key, **params),
                                                 ExpiresIn=SIGNED_FOR)
    if _through_proxy(signed):
        return _USUAL_WAY  # botocore's proxy handling (and its settings) stays in charge
    query = parse_qs(urlsplit(signed).query)
    if any(name in query for name in _SIGNATURE_PARAMS):
        if query.get("X-Amz-SignedHeaders", ["host"])[0].lower() != "host":
            return _USUAL_WAY  # SigV4 signed headers the request would have to send
        return signed
    return signed if set(params) <= _UNSIGNED_IN_QUERY else _USUAL_WAY  # unsigned: headers would be lost


_proxy_env: list = []  # [the proxy variables (HTTPS_PROXY, NO_PROXY, ...)], read once per process


def _through_proxy(signed: str) -> bool:
    """Whether the proxy variables send a request for ``signed`` through a proxy (read once: a lookup per request
    was most of a request's CPU)."""
    import urllib.request

    if not _proxy_env:
        _proxy_env.append(urllib.request.getproxies_environment())
    proxies = _proxy_env[0]
    parts = urlsplit(signed)
    if not proxies or (parts.scheme not in proxies and "all" not in proxies):
        return False
    return not urllib.request.proxy_bypass_environment(parts.hostname or "", proxies)


async def _entry(fs: Any, url: str) -> list:
    key = (id(fs), url)
    entry = _urls.get(key)
    if entry is not None and time.monotonic() - entry[1] < REUSE_FOR and entry[3]() is fs:
        return entry
    bucket, name, version = fs.split_path(url)
    mark = _usual_buckets.get((id(fs), bucket)) if _usual_buckets else None
    if mark is not None and mark[0] > time.monotonic() and mark[1]() is fs:
        return [_USUAL_WAY, 0.0, 0, mark[1]]  # (not kept: the bucket's mark says until when)
    params = _request_params(fs, version) if name and _client_fits(fs) else None
    signed = _USUAL_WAY
    if params is not None:
        try:
            signed = await _sign(fs, bucket, name, params)
        except Exception:  # no credentials, a parameter botocore refuses: the usual way says so, as before
            signed = _USUAL_WAY
    entry = [signed, time.monotonic(), 0, weakref.ref(fs)]
    _urls.put(key, entry)
    return entry


def _session():
    """This process's aiohttp session on the running loop (made on first use)."""
    loop = asyncio.get_running_loop()
    session = _sessions.get(loop)
    if session is None or session.closed:
        import aiohttp

        loop_shutdown.install()  # the session is closed before the IO loop stops at exit
        with _lock:
            session = _sessions.get(loop)
            if session is None or session.closed:
                # Raw bytes as botocore gives them: no transparent decompression (a stored gzip object's
                # range is its stored bytes). No proxy (a URL a proxy variable covers goes the usual way).
                session = aiohttp.ClientSession(auto_decompress=False, trust_env=False,
                                                headers={"Accept-Encoding": "identity"})
                _sessions[loop] = session
    return session


def _timeout(fs: Any):
    import aiohttp

    config = getattr(fs, "config_kwargs", None) or {}
    return aiohttp.ClientTimeout(total=None, sock_connect=config.get("connect_timeout", getattr(fs, "connect_timeout", 5)),
                                 sock_read=config.get("read_timeout", getattr(fs, "read_timeout", 15)))


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")
_SIGNED_MARKS = ("Signature=", "X-Amz-Credential=", "X-Amz-Security-Token=", "AWSAccessKeyId=")


def _scrubbed(exc: BaseException, signed: str, url: str) -> bool:
    """Replaces every URL that is the signed one (in any of its spellings: a client may re-encode its query) by
    ``url`` in the texts of ``exc`` and its causes; whether none holds a signature or credential now."""
    query = parse_qs(urlsplit(signed).query)
    secrets = [v for name in _SIGNATURE_PARAMS for v in query.get(name, ()) if v]
    if not secrets:
        return True  # an unsigned URL: nothing to hide

    def signed_like(text: str) -> bool:
        return any(mark in text for mark in _SIGNED_MARKS) or any(v in unquote(text) for v in secrets)

    cur: BaseException | None = exc
    for _ in range(8):
        if cur is None:
            break
        if any(signed_like(str(a)) for a in cur.args):
            try:
                cur.args = tuple(_URL_IN_TEXT.sub(lambda m: url if signed_like(m.group(0)) else m.group(0), str(a))
                                 if signed_like(str(a)) else a for a in cur.args)
            except (AttributeError, TypeError):
                pass
        if signed_like(str(cur)):
            return False
        cur = cur.__cause__ or cur.__context__
    return True


class Signed:
    """What :func:`signed_url` gives the GET in :mod:`audiotree.io.ranged_get`: the URL to request and the
    request options (``session``, then ``get(url, headers=..., **options)``), and what to do with its outcome."""

    __slots__ = ("fs", "url", "entry", "options")

    def __init__(self, fs: Any, url: str, entry: list) -> None:
        self.fs, self.url, self.entry = fs, url, entry
        self.options = {"allow_redirects": False, "timeout": _timeout(fs), "ssl": _tls(fs)}

    @property
    def signed(self) -> str:
        """The presigned URL (a credential: never put it in a message)."""
        return self.entry[0]

    def session(self):
        """This process's aiohttp session on the running loop."""
        return _session()

    def usable(self, status: int) -> bool:
        """Whether an answer with ``status`` is the object's (2xx or 416); False: make the GET the usual way.
        Raises ``FileNotFoundError`` naming the ``s3://`` URL for a 404."""
        if status == 404:
            raise FileNotFoundError(errno.ENOENT, "No such object (HTTP 404)", self.url)
        if not (200 <= status < 300 or status == 416):
            _unusable(self.fs, self.url, self.entry, status)
            return False
        self.entry[2] += 1
        _counts["signed"] += 1
        return True

    def failed(self, exc: Exception) -> None:
        """The signed GET raised ``exc``: re-raises a transient fault (its texts naming the ``s3://`` URL, never
        the signed one); returns for any other (make the GET the usual way)."""
        if storage.is_transient(exc) and _scrubbed(exc, self.signed, self.url):
            raise exc
        _unusable(self.fs, self.url, self.entry, 0)  # a TLS or URL fault: the bucket's, not the object's


async def signed_url(fs: Any, url: str) -> Signed | None:
    """The presigned GET of the S3 object ``url`` on ``fs`` (signed or taken from this process's cache), or
    ``None``: make the GET the usual way (see the module text)."""
    entry = await _entry(fs, url)
    if not entry[0]:
        _counts["usual"] += 1
        return None
    return Signed(fs, url, entry)


def _unusable(fs: Any, url: str, entry: list, status: int | None = None) -> None:
    """A signed GET's answer could not be used. A URL that served before is signed again next time (it expired,
    or its credentials did). One that never served gives way to the usual way for :data:`REUSE_FOR` seconds: for
    its bucket after a redirect or a 400 (another region; SSE-KMS objects, which SigV2-signed URLs, botocore's
    choice in the regions that take them, cannot read) or a client fault (``status`` 0: TLS), else for this
    object."""
    _counts["fallbacks"] += 1
    key = (id(fs), url)
    if entry[2]:
        _urls.pop(key)
    elif status in (0, 301, 307, 400):
        _usual_buckets[(id(fs), fs.split_path(url)[0])] = (time.monotonic() + REUSE_FOR, weakref.ref(fs))
        _urls.pop(key)
    else:
        _urls.put(key, [_USUAL_WAY, time.monotonic(), 0, weakref.ref(fs)])


async def _close_on_loop() -> None:
    loop = asyncio.get_running_loop()
    with _lock:
        session = _sessions.pop(loop, None)
    if session is not None and not session.closed:
        await session.close()


def close_sessions(loop: Any, timeout: float = 5.0) -> None:
    """Closes this process's session on ``loop`` (a running loop in another thread); nothing when it has none."""
    if loop is None or _sessions.get(loop) is None:
        return
    try:
        asyncio.run_coroutine_threadsafe(_close_on_loop(), loop).result(timeout)
    except Exception:  # a loop that stopped or hangs at exit: its sockets close with the process
        pass


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a parent thread may have held it at the fork
    with_parent = list(_sessions.values())
    _sessions.clear()
    _inherited.extend(with_parent)  # their sockets and selector are the parent's: never close them here
    for name in _counts:
        _counts[name] = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
loop_shutdown.close_before_stop(close_sessions)

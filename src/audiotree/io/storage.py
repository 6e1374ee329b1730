"""Where audio lives: local paths, or any URL with an fsspec protocol.

One layer for every place that touches files by name: discovery (list and
glob), probing, excerpt reads and sizes. ``s3://`` (s3fs), ``gs://`` (gcsfs),
``https://`` (aiohttp), ``memory://`` and any other protocol fsspec knows work
the same way; a plain path or a ``file://`` URL keeps the local fast path and
never imports fsspec.

Configuration
    Nothing is hard-coded. Options reach the filesystem through
    storage options (keyword arguments of the fsspec filesystem, e.g.
    ``{"endpoint_url": ..., "anon": True}``), through fsspec's own
    configuration (``FSSPEC_S3_ENDPOINT_URL=...``-style environment
    variables, read when fsspec is imported) and through each backend's
    documented variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
    ``AWS_PROFILE``; ``STORAGE_EMULATOR_HOST``, ``GOOGLE_APPLICATION_CREDENTIALS``).
    Environment variables reach spawned Grain and PyTorch workers unchanged.

The channel of storage options
    A dataset's storage options (``Corpus(storage_options=...)``) reach its
    reads by one channel: the context of :func:`use_storage_options`, which
    :func:`filesystem` merges under any explicit options (:func:`merged_options`).
    A builder enters it while it lists and probes; since a context does not
    cross into worker processes, the dataset keeps the options on one step
    (:class:`audiotree.sources.loading.StorageScope`, pickled into every
    worker), which enters them around each item with
    :func:`call_with_storage_options`. Loaders, index checks and decoders
    below it take no storage argument. The ``storage_options=`` arguments of
    single calls (``AudioFile``, ``probe``, ``file_size``, ``list_files``,
    the index builder and the readers of rendered data) are for use outside a
    dataset; they win over the context for that call.

Seek, don't download
    Remote files are read through :mod:`audiotree.io.remote_file`
    (:func:`~audiotree.io.remote_file.open_input`): ranged requests with an
    adaptive read-ahead window, never a whole download.

Faults
    Every network call (size lookup, open, ranged read, listing) is retried on
    transient errors (HTTP 408/429/500/502/503/504, a reset connection, a
    timeout, a body cut short, bytes failing their checksum)
    up to :data:`RETRY_ATTEMPTS` times with exponential backoff capped at
    :data:`RETRY_MAX_DELAY` seconds. Retried reads return the same bytes, so
    the stream is item for item the one without faults. Permanent errors
    (403, 404, ...) and exhausted retries raise
    :class:`~audiotree.errors.AudioReadError` naming the URL and the status.
    Messages are passed through :func:`redact` so credentials (URL user info,
    signed-URL query parameters, the values of secret storage options) never
    appear in them.

Workers
    Nothing here is process-wide state beyond fsspec's own instance cache:
    fsspec filesystems pickle by their options and are re-created (once, then
    reused with their connection pool) in each worker process.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import re
import time
from typing import Any, Callable, Iterator, Mapping

from audiotree.errors import AudioReadError
from audiotree.io import byte_counters, byte_paths, loop_shutdown
from audiotree.io.byte_paths import is_url, join, local_path

__all__ = [
    "is_url",
    "local_path",
    "filesystem",
    "file_size",
    "stat",
    "tagged_time",
    "same_version",
    "version",
    "download",
    "upload",
    "forget_listings",
    "list_files",
    "exists",
    "is_dir",
    "redact",
    "join",
    "use_storage_options",
    "call_with_storage_options",
    "is_transient",
    "WrongRange",
    "RETRY_ATTEMPTS",
    "RETRY_MAX_DELAY",
]


#: How many times a network call is tried in all (first try included).
RETRY_ATTEMPTS = 5
#: First backoff delay and cap, in seconds; delays double: 0.05, 0.1, 0.2, 0.4.
RETRY_BASE_DELAY = 0.05
RETRY_MAX_DELAY = 2.0
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


# Which package provides a protocol, for the "install it" message.
_PROVIDERS = {
    "s3": "s3fs (pip install 'audiotree[s3]')",
    "s3a": "s3fs (pip install 'audiotree[s3]')",
    "gs": "gcsfs (pip install 'audiotree[gcs]')",
    "gcs": "gcsfs (pip install 'audiotree[gcs]')",
    "http": "aiohttp (pip install aiohttp)",
    "https": "aiohttp (pip install aiohttp)",
    "az": "adlfs (pip install adlfs)",
    "abfs": "adlfs (pip install adlfs)",
    "hf": "huggingface_hub (pip install huggingface_hub)",
}

# Storage options set by :func:`use_storage_options` for the current context
# (thread or task); merged under explicit ``storage_options=`` arguments.
_scoped_options: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "audiotree_storage_options", default=None
)

# Option names whose values are secrets (redacted from every message).
_SECRET_KEYS = re.compile(r"(key|secret|token|password|passwd|credential|signature|session)", re.I)
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^/@\s]+@")
_SECRET_QUERY = re.compile(
    r"(?P<name>[?&][^=&\s]*(?:key|secret|token|signature|credential|password|sig)[^=&\s]*=)[^&\s'\"]*", re.I
)


# ---------------------------------------------------------------------------
# Paths
# ---------------------------------------------------------------------------


@contextlib.contextmanager
def use_storage_options(options: Mapping[str, Any] | None) -> Iterator[None]:
    """Applies ``options`` to every filesystem opened in this context (thread/task).

    Contexts nest: inner options are laid over the outer ones, and ``None``
    keeps what is in effect. Explicit ``storage_options=`` arguments win over both.

    >>> with use_storage_options({"anon": True}), use_storage_options({"default_block_size": 2**20}):
    ...     sorted(merged_options(None))
    ['anon', 'default_block_size']
    """
    # Nested contexts compose: inner options override outer ones, None keeps the outer ones.
    token = _scoped_options.set(merged_options(options) or None)
    try:
        yield
    finally:
        _scoped_options.reset(token)


def call_with_storage_options(options: Mapping[str, Any] | None, func: Callable[..., Any], *args: Any) -> Any:
    """``func(*args)`` with ``options`` in effect (see :func:`use_storage_options`); no context when empty.

    The loaders call their reads through this: local datasets (no options) pay nothing.

    >>> call_with_storage_options(None, max, 2, 3)
    3
    """
    if not options:
        return func(*args)
    with use_storage_options(options):
        return func(*args)


def merged_options(storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    merged = dict(_scoped_options.get() or {})
    merged.update(storage_options or {})
    return merged


def filesystem(url: str, storage_options: Mapping[str, Any] | None = None):
    """The fsspec filesystem for ``url``'s protocol (cached by fsspec per options).

    Raises:
        ImportError: the protocol's package is not installed; names it.
        ValueError: fsspec knows no such protocol.
    """
    protocol = byte_paths.protocol(url)
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - fsspec is a dependency
        raise ImportError(
            f"Reading {redact(url)} needs fsspec: pip install fsspec (and {_PROVIDERS.get(protocol, 'its backend')})."
        ) from exc
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        from audiotree.errors import MissingExtraError

        package = _PROVIDERS.get(protocol, "the fsspec implementation for this protocol")
        raise MissingExtraError(
            f"Cannot read {redact(url)}: the '{protocol}://' protocol needs {package}, which is not installed."
        ) from exc
    except ValueError as exc:
        raise ValueError(
            f"Cannot read {redact(url)}: fsspec knows no '{protocol}://' protocol. Use a local path or a URL "
            "such as s3://, gs://, https:// (see docs/storage.md)."
        ) from exc
    loop_shutdown.install()  # stop fsspec's IO loop before the interpreter exits (rc 134 otherwise)
    return cls(**merged_options(storage_options))


# ---------------------------------------------------------------------------
# Errors, redaction, retries
# ---------------------------------------------------------------------------


def redact(text: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """``text`` with credentials removed: URL user info, secret query values, secret option values.

    >>> redact("https://user:pw@host/a.wav?X-Amz-Signature=abc&x=1")
    'https://***@host/a.wav?X-Amz-Signature=***&x=1'
    """
    text = _USERINFO.sub(r"\g<scheme>***@", str(text))
    text = _SECRET_QUERY.sub(r"\g<name>***", text)
    for name, value in merged_options(storage_options).items():
        if _SECRET_KEYS.search(str(name)) and isinstance(value, str) and len(value) >= 4:
            text = text.replace(value, "***")
    for var in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GOOGLE_OAUTH_ACCESS_TOKEN"):
        value = os.environ.get(var)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


class WrongRange(OSError):
    """A ranged GET was answered with other bytes than the range asked for (see :mod:`audiotree.io.ranged_get`).

    Transient: a proxy or cache in between may answer the next try correctly.
    """


def http_status(exc: BaseException) -> int | None:
    """The HTTP status behind ``exc`` or its causes, if any library recorded one."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 8:
        if _is_cut_short(cur):  # aiohttp's parser errors carry code=400 but no server said 400
            cur = cur.__cause__ or cur.__context__
            seen += 1
            continue
        for attr in ("status", "code", "status_code"):
            value = getattr(cur, attr, None)
            if isinstance(value, int) and 100 <= value < 600:
                return value
        response = getattr(cur, "response", None)
        if isinstance(response, dict):  # botocore ClientError
            value = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(value, int):
                return value
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return None


def _chain(exc: BaseException | None):
    for _ in range(8):
        if exc is None:
            return
        yield exc
        exc = exc.__cause__ or exc.__context__


def _is_cut_short(exc: BaseException) -> bool:
    """A body that ended early or a response the client could not parse (aiohttp's parser errors)."""
    return type(exc).__module__.startswith("aiohttp.http_exceptions") or type(exc).__name__ in _CUT_SHORT_NAMES


def _is_checksum_mismatch(exc: BaseException) -> bool:
    """The bytes that arrived fail the checksum the storage sent (botocore's FlexibleChecksumError)."""
    return any("checksum" in type(cur).__name__.lower() or ("checksum" in str(cur).lower()
                                                          and "match" in str(cur).lower()) for cur in _chain(exc))


def is_transient(exc: BaseException) -> bool:
    """Whether retrying may help: a transient HTTP status, a connection reset, a timeout, a body cut
    short or failing its checksum, anywhere in the cause chain.

    The chain matters: fsspec's HTTP backend reports a failed HEAD as
    ``FileNotFoundError`` raised from the real error (a 503, a reset); aiohttp
    reports a truncated body as ``ClientPayloadError`` from a
    ``ContentLengthError`` whose ``code=400`` is its parser's, not the server's.
    """
    if any(_is_cut_short(cur) or isinstance(cur, WrongRange) for cur in _chain(exc)) or _is_checksum_mismatch(exc):
        return True
    return _is_transient(exc)


def _is_transient(exc: BaseException) -> bool:
    status = http_status(exc)
    if status is not None:
        return status in _TRANSIENT_STATUS
    cur: BaseException | None = exc
    for _ in range(8):
        if cur is None:
            break
        if isinstance(cur, (ConnectionError, TimeoutError)):
            return True
        if isinstance(cur, OSError) and cur.errno in (errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE, errno.ETIMEDOUT):
            return True
        # aiohttp/botocore connection failures do not all subclass the builtins.
        if any(s in type(cur).__name__ for s in _TRANSIENT_NAMES):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


_TRANSIENT_NAMES = ("ClientConnectorError", "ServerDisconnected", "ClientPayloadError", "ClientOSError",
                    "ConnectionClosed", "EndpointConnectionError", "ReadTimeout", "ConnectTimeout")
_CUT_SHORT_NAMES = ("ContentLengthError", "TransferEncodingError", "IncompleteRead", "IncompleteReadError",
                    "ResponseStreamingError", "ClientPayloadError")


def retry(call: Callable[[], Any], url: str, what: str, storage_options: Mapping[str, Any] | None = None):
    """``call()`` with bounded retries of transient errors; permanent ones become AudioReadError."""
    delay = RETRY_BASE_DELAY
    for attempt in range(1, RETRY_ATTEMPTS + 1):
        try:
            return call()
        except (AudioReadError, MemoryError, KeyboardInterrupt):
            raise
        except Exception as exc:
            if is_transient(exc) and attempt < RETRY_ATTEMPTS:
                time.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_DELAY)
                continue
            raise remote_error(url, exc, what, attempts=attempt, storage_options=storage_options) from exc
    raise AssertionError("unreachable")  # pragma: no cover


def remote_error(
    url: str, exc: BaseException, what: str, *, attempts: int = 1, storage_options: Mapping[str, Any] | None = None
) -> AudioReadError:
    """An :class:`AudioReadError` naming ``url``, the HTTP status and what to do; credentials redacted."""
    status = http_status(exc)
    if status is None and isinstance(exc, FileNotFoundError):
        status = 404
    if status is None and isinstance(exc, PermissionError):
        status = 403
    if status == 404:
        hint = ("The object does not exist (HTTP 404): check the URL (was it deleted after the file list was "
                'built?), or use on_read_error="skip" to skip unreadable files.')
    elif status in (401, 403):
        hint = (f"Access was denied (HTTP {status}): check the credentials (storage_options=, AWS_PROFILE, "
                "GOOGLE_APPLICATION_CREDENTIALS) and the bucket's permissions.")
    elif _is_checksum_mismatch(exc):
        hint = (f"The bytes received failed the storage's checksum after {attempts} attempt(s): the data was damaged "
                "on the way (a proxy, a flaky network) or the object changed while it was read; check the network and "
                "try again.")
    elif any(isinstance(cur, WrongRange) for cur in _chain(exc)):
        hint = (f"The storage kept answering the ranged request with other bytes than the range asked for, after "
                f"{attempts} attempt(s): a server, proxy or cache in between ignores or rewrites HTTP Range requests. "
                "The file is not at fault; read it without that proxy, or from storage that honours Range.")
    elif any(_is_cut_short(cur) for cur in _chain(exc)):
        hint = (f"The connection kept ending before the whole answer arrived (a reset or truncated body) after "
                f"{attempts} attempt(s); check the server or the network and try again.")
    elif _is_transient(exc):
        hint = (f"The storage kept failing with a transient error{f' (HTTP {status})' if status else ''} "
                f"after {attempts} attempts; check the server or the network and try again.")
    else:
        hint = f"The storage refused the request{f' (HTTP {status})' if status else ''}."
    text = str(exc).strip().rstrip(".")
    cause = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    message = redact(f"Failed to {what} '{url}': {cause}. {hint}", storage_options)
    return AudioReadError(message, redact(url, storage_options))


def object_info(fs: Any, url: str) -> dict:
    """fsspec's ``info`` of the object ``url`` (one metadata request, counted in
    :mod:`audiotree.io.byte_counters`); ``IsADirectoryError`` for a folder."""
    began = time.perf_counter()
    try:
        info = fs.info(url)
    finally:
        byte_counters.count_request(byte_counters.backend_of(url), 0, wait_seconds=time.perf_counter() - began)
    if info.get("type") == "directory":
        raise IsADirectoryError(errno.EISDIR, "is a folder (prefix), not an object", url)
    return info


def file_size(path: str | os.PathLike, *, storage_options: Mapping[str, Any] | None = None) -> int:
    """Size in bytes of a local file (``os.stat``) or a remote object (one metadata call).

    Raises ``OSError`` for a local path (as ``os.stat``) and
    :class:`AudioReadError` for a URL (naming it and the status). A member's
    size: :func:`audiotree.io.item_bytes.item_size`.
    """
    path = os.fsdecode(path)
    if not is_url(path):
        return os.stat(local_path(path)).st_size
    fs = filesystem(path, storage_options)
    return int(retry(lambda: object_info(fs, path), path, "look up", storage_options)["size"])


def _mtime_ns(info: Mapping[str, Any]) -> int:
    """The object's modification time in ns from an fsspec info dict (-1 when the backend gives none)."""
    import datetime

    for key in ("LastModified", "last_modified", "updated", "mtime", "modified", "timeCreated", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            try:
                value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
        if isinstance(value, datetime.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=datetime.timezone.utc)
            delta = value - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
            return (delta.days * 86400 + delta.seconds) * 10**9 + delta.microseconds * 1000
        if isinstance(value, (int, float)):
            return int(value * 1e9) if value < 1e11 else int(value)
    return -1


def stat(path: str | os.PathLike, *, storage_options: Mapping[str, Any] | None = None) -> tuple[int, int]:
    """``(size in bytes, modification time in ns)`` of a local file or a remote object.

    The pair identifies a version of the file (the corpus index records it).
    A remote object's time is the storage's (S3 ``LastModified``, GCS
    ``updated``), -1 when the backend reports none (plain HTTP). Those times
    have a resolution of a second (S3) or a millisecond (GCS), so an object
    replaced by another of the same size within it would look unchanged: the
    digits below the resolution carry a digest of the object's version tag
    (GCS ``generation``, else the ``ETag``) instead (:func:`tagged_time`).

    Raises ``OSError`` for a local path and :class:`AudioReadError` for a URL.

    >>> import os, tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     stat(f.name)[0]
    0
    """
    path = os.fsdecode(path)
    if not is_url(path):
        st = os.stat(local_path(path))
        return int(st.st_size), int(st.st_mtime_ns)
    fs = filesystem(path, storage_options)
    info = retry(lambda: object_info(fs, path), path, "look up", storage_options)
    tag = info.get("generation") or info.get("ETag") or info.get("etag")
    return int(info["size"]), tagged_time(_mtime_ns(info), None if tag is None else str(tag))


def tagged_time(mtime_ns: int, tag: str | None) -> int:
    """``mtime_ns`` (a store's time, whole seconds or milliseconds) with a digest of ``tag`` in the digits below
    its resolution, never all zero; other times unchanged.

    >>> t = 1_700_000_000 * 10**9
    >>> tagged_time(t, '"abc"') // 10**9 == t // 10**9, tagged_time(t, '"abc"') != tagged_time(t, '"abd"')
    (True, True)
    >>> tagged_time(t + 5, '"abc"'), tagged_time(-1, '"abc"'), tagged_time(t, None) == t
    (1700000000000000005, -1, True)
    """
    import hashlib

    if tag is None or mtime_ns < 0 or mtime_ns % 10**6:
        return mtime_ns
    digest = int.from_bytes(hashlib.blake2b(tag.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")
    step = 10**9 if mtime_ns % 10**9 == 0 else 10**6
    return mtime_ns + 1 + digest % (step - 1)


def same_version(now_ns: int, recorded_ns: int) -> bool:
    """Whether a remote object's :func:`stat` time ``now_ns`` matches ``recorded_ns``, which an index may have
    recorded before times carried a tag digest (its digits below the store's resolution all zero).

    >>> t = 1_700_000_000 * 10**9
    >>> same_version(tagged_time(t, "e"), t), same_version(tagged_time(t, "e"), tagged_time(t, "f"))
    (True, False)
    """
    if now_ns == recorded_ns:
        return True
    for step in (10**9, 10**6):
        if recorded_ns >= 0 and recorded_ns % step == 0 and now_ns // step == recorded_ns // step:
            return now_ns % step != 0
    return False


def version(url: str, *, storage_options: Mapping[str, Any] | None = None) -> tuple[int, int, str | None]:
    """``(size, modification time in ns, ETag or generation)`` of a remote object: what identifies its content.

    Times have one-second resolution on some stores, so the ETag (S3) or
    generation/CRC (GCS) tells apart two writes in the same second.
    """
    fs = filesystem(url, storage_options)
    info = retry(lambda: object_info(fs, url), url, "look up", storage_options)
    tag = info.get("ETag") or info.get("etag") or info.get("generation") or info.get("crc32c")
    return int(info["size"]), _mtime_ns(info), None if tag is None else str(tag)


def forget_listings(url: str, *, storage_options: Mapping[str, Any] | None = None) -> None:
    """Drops fsspec's cached listings under ``url``, so the next listing asks the storage.

    fsspec filesystems are shared per options and cache directory listings;
    code that lists what it (or another process) just wrote must call this.
    """
    fs = filesystem(url, storage_options)
    with contextlib.suppress(Exception):
        fs.invalidate_cache(fs._strip_protocol(url))


def download(url: str, local: str | os.PathLike, *, storage_options: Mapping[str, Any] | None = None) -> None:
    """Copies the remote object ``url`` to the local file ``local`` (retrying transient errors)."""
    fs = filesystem(url, storage_options)
    retry(lambda: fs.get_file(url, os.fspath(local)), url, "download", storage_options)


def upload(local: str | os.PathLike, url: str, *, storage_options: Mapping[str, Any] | None = None) -> None:
    """Copies the local file or folder ``local`` to ``url`` (a folder recursively; retrying transient errors).

    An object store has no rename, so an upload is not atomic the way a local
    ``os.replace`` is: writers stage their output locally and upload each
    finished file, so a reader sees either no object or a complete one.
    """
    fs = filesystem(url, storage_options)
    local = os.fspath(local)
    if os.path.isdir(local):
        for folder, _dirs, files in os.walk(local):
            for name in sorted(files):
                src = os.path.join(folder, name)
                rel = os.path.relpath(src, local).replace(os.sep, "/")
                target = url.rstrip("/") + "/" + rel
                retry(lambda: fs.put_file(src, target), target, "upload", storage_options)
        return
    retry(lambda: fs.put_file(local, url), url, "upload", storage_options)


# ---------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------


def _with_protocol(fs: Any, url: str, found: str) -> str:
    """fsspec listings drop the protocol; put the caller's back on."""
    protocol = byte_paths.protocol(url)
    if is_url(found) or local_path(found) != found:  # it already names its protocol
        return found
    if protocol in ("http", "https"):
        return found
    return f"{protocol}://{found.lstrip('/')}" if protocol != "memory" else f"memory://{found if found.startswith('/') else '/' + found}"


def exists(url: str, *, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether the object or prefix ``url`` exists (retrying transient errors)."""
    fs = filesystem(url, storage_options)
    return bool(retry(lambda: fs.exists(url), url, "look up", storage_options))


def is_dir(url: str, *, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether ``url`` is a folder (prefix) holding objects."""
    fs = filesystem(url, storage_options)
    return bool(retry(lambda: fs.isdir(url), url, "look up", storage_options))


def list_files(url: str, *, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """Objects under a URL: a glob (``*``, ``?``, ``[``, ``**``), a prefix (recursive) or one object.

    Returns full URLs, sorted. Hidden names (a path component starting with
    a dot, below the listed prefix) are left out, as for local folders.

    Raises:
        FileNotFoundError: the bucket, prefix or object does not exist (names it).
        AudioReadError: the listing was refused (status named) or kept failing.
    """
    fs = filesystem(url, storage_options)
    # A listing is asked for because the caller wants what is there now (a
    # dataset or index being built): never answer from fsspec's listing cache.
    forget_listings(url, storage_options=storage_options)
    if any(ch in url.split("://", 1)[1] for ch in "*?["):
        found = retry(lambda: fs.glob(url, detail=False), url, "list", storage_options)
        root = None
    else:
        try:
            is_folder = retry(lambda: fs.isdir(url), url, "list", storage_options)
        except AudioReadError as exc:
            if http_status(exc.__cause__ or exc) == 404 or isinstance(exc.__cause__, FileNotFoundError):
                is_folder = False
            else:
                raise
        if is_folder:
            found = retry(lambda: fs.find(url), url, "list", storage_options)
            root = fs._strip_protocol(url).rstrip("/")
        elif retry(lambda: fs.isfile(url), url, "list", storage_options):
            return [url]
        else:
            bucket = fs._strip_protocol(url).split("/", 1)[0]
            detail = ""
            if byte_paths.protocol(url) in ("s3", "s3a", "gs", "gcs"):
                try:
                    if not retry(lambda: fs.exists(bucket), url, "list", storage_options):
                        detail = f" (the bucket '{bucket}' does not exist or is not visible with these credentials)"
                except AudioReadError:
                    pass
            raise FileNotFoundError(
                redact(f"Audio source '{url}' does not exist{detail}; check the URL and storage_options/credentials.",
                       storage_options)
            )
    out = []
    for item in found:
        rel = item[len(root) + 1 :] if root and item.startswith(root + "/") else item.rsplit("/", 1)[-1]
        if any(part.startswith(".") for part in rel.split("/") if part):
            continue
        out.append(_with_protocol(fs, url, item))
    return sorted(out)

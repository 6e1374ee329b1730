"""Byte ranges of remote objects, with a bounded local cache: reading a written dataset from a bucket in place.

A render or writer output on object storage is read by ranged requests:
:class:`RemoteFolder` fetches ``[start, stop)`` of one object under a folder
URL (one GET each, retried like every storage call), checks the object's size
against what the dataset's manifest promised (from the answer's
``Content-Range`` on S3, so no HEAD), and can keep what it read in a
:class:`RangeCache`: files on local disk, one per range read, evicted least
recently used once they hold more than ``limit`` bytes. Nothing here
downloads a whole object unless asked to (:meth:`RemoteFolder.read_object`, for
manifests and records).

Both classes pickle by their settings (URL, options, cache folder and limit),
so Grain and PyTorch workers rebuild them and share the cache folder.

>>> parse_size("20GB"), parse_size("1.5 GiB"), parse_size(4096), parse_size(None)
(20000000000, 1610612736, 4096, None)
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
from pathlib import Path
from typing import Any, Mapping

from audiotree.errors import AudioReadError
from audiotree.io import ranged_get, storage

__all__ = ["parse_size", "RangeCache", "RemoteFolder", "RemoteArray", "remote_folder", "default_cache_dir"]

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*$")


def parse_size(value: Any) -> int | None:
    """A byte count from ``"20GB"``, ``"512MiB"``, ``"1.5 GiB"`` or an int; ``None`` stays ``None``.

    Decimal units (kB, MB, GB, TB) are powers of 1000, binary ones (KiB, MiB,
    GiB, TiB) powers of 1024.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"A size must be bytes (int) or a string such as '20GB', got {value!r}.")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"A size must be >= 0 bytes, got {value}.")
        return value
    match = _SIZE.match(str(value))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"Cannot read {value!r} as a size; write bytes or a number with a unit, e.g. '20GB' or "
                         "'512MiB'.")
    return int(float(match.group(1)) * _UNITS[unit])


def default_cache_dir() -> Path:
    """``$AUDIOTREE_CACHE`` or ``~/.cache/audiotree``."""
    return Path(os.environ.get("AUDIOTREE_CACHE") or Path.home() / ".cache" / "audiotree")


class RangeCache:
    """Ranges read from remote objects, kept as files in ``directory``; least recently used go beyond ``limit`` bytes.

    Each entry is one file named by a hash of its key (object URL, version
    tag, range); reading an entry marks it used (its modification time).
    Several processes may share the folder: entries are written to a
    temporary name and renamed, and an entry another process evicted is
    simply read again. The total is checked (a scan of the folder) whenever
    this process has added an eighth of ``limit`` since the last check.

    Raises ``PermissionError`` naming the folder when it cannot be written.

    >>> import tempfile
    >>> cache = RangeCache(tempfile.mkdtemp(), limit=10)
    >>> cache.put("a", b"12345678"); cache.put("b", b"abcdefgh")
    >>> cache.get("a"), cache.get("b")
    (None, b'abcdefgh')
    """

    def __init__(self, directory: str | os.PathLike, limit: int | str) -> None:
        self.directory = Path(directory)
        self.limit = parse_size(limit)
        self._added = 0
        self._lock = threading.Lock()
        self._check_writable()

    def _check_writable(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            probe = self.directory / f".probe-{os.getpid()}-{threading.get_ident()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise PermissionError(
                f"The read cache folder {self.directory} is not writable ({exc.strerror or exc}); pass "
                "cache_dir= a writable folder (or set AUDIOTREE_CACHE), or cache_limit=None to read without a "
                "local cache."
            ) from None

    def __getstate__(self) -> dict:
        return {"directory": self.directory, "limit": self.limit}

    def __setstate__(self, state: dict) -> None:
        self.directory, self.limit = state["directory"], state["limit"]
        self._added, self._lock = 0, threading.Lock()

    def _path(self, key: str) -> Path:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
        return self.directory / digest[:2] / digest[2:40]

    def get(self, key: str) -> bytes | None:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        with contextlib.suppress(OSError):
            os.utime(path)
        return data

    def holds(self, key: str) -> bool:
        """Whether an entry for ``key`` is here now (a look at the folder; nothing is read)."""
        return self._path(key).is_file()

    def put(self, key: str, data: bytes) -> None:
        if self.limit is not None and len(data) > self.limit:
            return
        path = self._path(key)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            path.parent.mkdir(exist_ok=True)
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise PermissionError(
                f"Could not write to the read cache folder {self.directory} ({exc.strerror or exc}); free space "
                "there, pass cache_dir= another folder, or cache_limit=None."
            ) from None
        with self._lock:
            self._added += len(data)
            due = self.limit is not None and self._added * 8 >= self.limit
            if due:
                self._added = 0
        if due:
            self.evict()

    def staged(self, key: str, download) -> Path:
        """A local file holding the object ``key`` names, made by ``download(path)`` unless already here.

        For readers that can only open local files (ArrayRecord): the file is
        an entry like any other, so it counts against ``limit`` and is evicted
        least recently used (an open reader keeps its data: POSIX unlinks
        lazily).
        """
        path = self._path(key)
        if path.is_file():
            with contextlib.suppress(OSError):
                os.utime(path)
            return path
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            path.parent.mkdir(exist_ok=True)
        except OSError as exc:
            raise self._full(exc) from None
        try:
            download(tmp)
        except AudioReadError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            # A local write failed (the downloader names storage errors itself, as AudioReadError).
            raise self._full(exc) from None
        except BaseException:  # the downloader's own check (a damaged object): its error, no cache problem
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        try:
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise self._full(exc) from None
        self.evict(keep=path)
        return path

    def _full(self, exc: OSError) -> PermissionError:
        return PermissionError(
            f"Could not write to the read cache folder {self.directory} ({exc.strerror or exc}); free space "
            "there, pass cache_dir= another folder, or a larger cache_limit."
        )

    def evict(self, keep: Path | None = None) -> int:
        """Deletes the least recently used entries until the folder holds at most ``limit`` bytes; bytes left."""
        entries = []
        for sub in self.directory.iterdir() if self.directory.is_dir() else ():
            if not sub.is_dir():
                continue
            for entry in os.scandir(sub):
                if entry.name.startswith("."):
                    continue
                with contextlib.suppress(OSError):
                    st = entry.stat()
                    entries.append((st.st_mtime_ns, st.st_size, entry.path))
        total = sum(size for _, size, _ in entries)
        if self.limit is None:
            return total
        for _, size, path in sorted(entries):
            if total <= self.limit:
                break
            if keep is not None and path == str(keep):
                continue
            with contextlib.suppress(OSError):
                os.unlink(path)
            total -= size
        return total


def remote_folder(url: str, *, storage_options: Mapping[str, Any] | None = None, cache_limit: int | str | None = None,
                  cache_dir: str | os.PathLike | None = None) -> "RemoteFolder":
    """A :class:`RemoteFolder` for ``url``, with a :class:`RangeCache` of ``cache_limit`` bytes when one is given.

    The cache lives in ``cache_dir`` (default ``$AUDIOTREE_CACHE/ranges``).
    ``cache_dir`` without ``cache_limit`` is refused: the cache is always bounded.
    """
    cache = None
    if cache_limit is not None:
        cache = RangeCache(Path(cache_dir) if cache_dir is not None else default_cache_dir() / "ranges", cache_limit)
    elif cache_dir is not None:
        raise ValueError("cache_dir= needs cache_limit= (e.g. cache_limit='20GB'): the read cache is always bounded.")
    return RemoteFolder(url, storage_options=storage_options, cache=cache)


class RemoteFolder:
    """Ranged reads of the objects in the folder ``url``, optionally through a :class:`RangeCache`.

    :meth:`read` returns bytes ``[start, stop)`` of ``url/name``; given
    ``size`` (the object's length the dataset's manifest implies, or
    ``min_size``, a lower bound), it raises ``ValueError`` naming the object
    when the storage holds something shorter or longer: a truncated or
    replaced part is an error, never short data. ``tag`` (a version of the
    dataset, such as a hash of its manifest) is part of the cache key, so a
    re-written dataset is never answered from the old one's cache.

    :attr:`requests` and :attr:`bytes_read` count this process's fetches.
    """

    def __init__(self, url: str, *, storage_options: Mapping[str, Any] | None = None,
                 cache: RangeCache | None = None) -> None:
        self.url = url.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self.cache = cache
        self.requests = 0
        self.bytes_read = 0
        self._sizes: dict[str, int] = {}

    def __getstate__(self) -> dict:
        return {"url": self.url, "storage_options": self.storage_options, "cache": self.cache}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["url"], storage_options=state["storage_options"], cache=state["cache"])

    def child(self, name: str) -> "RemoteFolder":
        """The folder ``url/name``, sharing the options and the cache."""
        return RemoteFolder(f"{self.url}/{name}", storage_options=self.storage_options, cache=self.cache)

    def object_url(self, name: str) -> str:
        return f"{self.url}/{name}"

    def _fs(self):
        return storage.filesystem(self.url, self.storage_options)

    def _missing(self, url: str, exc: BaseException) -> FileNotFoundError:
        return FileNotFoundError(storage.redact(
            f"{url} does not exist ({exc}); the dataset is incomplete or was deleted. Re-render it, or check the "
            "URL and the credentials.", self.storage_options))

    def _call(self, url: str, what: str, func):
        try:
            return storage.retry(func, url, what, self.storage_options)
        except AudioReadError as exc:
            if storage.http_status(exc.__cause__ or exc) == 404 or isinstance(exc.__cause__, FileNotFoundError):
                raise self._missing(url, exc.__cause__ or exc) from None
            raise

    def size_of(self, name: str) -> int:
        """The object's size (one metadata request, remembered)."""
        url = self.object_url(name)
        if url not in self._sizes:
            fs = self._fs()
            self.requests += 1
            self._sizes[url] = int(self._call(url, "look up", lambda: storage.object_info(fs, url))["size"])
        return self._sizes[url]

    def read_object(self, name: str, *, limit: int) -> bytes:
        """The whole (small) object ``url/name`` in one request; ``ValueError`` if it is over ``limit`` bytes."""
        url = self.object_url(name)
        fs = self._fs()
        data = self._call(url, "read", lambda: ranged_get.get_range(fs, url, 0, limit + 1)).part(0, limit + 1)
        self.requests += 1
        self.bytes_read += len(data)
        if len(data) > limit:
            raise ValueError(storage.redact(f"{url} is over the {limit}-byte limit for such a file; it is not an "
                                            "audiotree artifact or it was damaged.", self.storage_options))
        return data

    def filesystem(self) -> Any:
        """The fsspec filesystem this folder's objects are read through."""
        return self._fs()

    def holds(self, name: str, start: int, stop: int, *, tag: str = "") -> bool:
        """Whether the local cache holds bytes ``[start, stop)`` of ``url/name`` as :meth:`read` would keep them
        (then reading them makes no request)."""
        return self.cache is not None and self.cache.holds(f"{self.object_url(name)}\x00{tag}\x00{start}\x00{stop}")

    def read(self, name: str, start: int, stop: int, *, size: int | None = None, min_size: int | None = None,
             tag: str = "", view: bool = False) -> bytes | memoryview:
        """Bytes ``[start, stop)`` of ``url/name`` (from the cache when it holds them); ``view``: bytes the
        read-ahead holds may come as a read-only ``memoryview`` (see :func:`audiotree.io.ranged_get.get_range`)."""
        if stop <= start:
            return b""
        url = self.object_url(name)
        key = f"{url}\x00{tag}\x00{start}\x00{stop}"
        if self.cache is not None:
            data = self.cache.get(key)
            if data is not None and len(data) == stop - start:
                return data
        fs = self._fs()
        answer = self._call(url, "read", lambda: ranged_get.get_range(fs, url, start, stop, view=view))
        data, total = answer.part(start, stop), answer.total
        self.requests += 1
        self.bytes_read += len(data)
        if total is not None:
            self._sizes[url] = total
        elif size is not None or min_size is not None:
            # Bytes fetched ahead (or an answer without the size): the size the read-ahead's GET of it was given.
            total = self._sizes.get(url, ranged_get.fetched_size(url))
        if len(data) != stop - start or total is None and (size is not None or min_size is not None):
            total = self.size_of(name)
        problem = None
        if size is not None and total != size:
            problem = f"it is {total} bytes, but the manifest needs exactly {size}"
        elif min_size is not None and total < min_size:
            problem = f"it is {total} bytes, but the manifest needs at least {min_size}"
        elif len(data) != stop - start:
            problem = f"it is {total} bytes, too short for bytes [{start}, {stop})"
        if problem:
            raise ValueError(storage.redact(
                f"{url}: {problem}; the remote part is truncated or was replaced. Re-render it (audiotree render "
                "--overwrite) or restore it; nothing else in the dataset is affected.", self.storage_options))
        if self.cache is not None:
            self.cache.put(key, data)
        return data


#: Rows of at most this many bytes (per-item scalars, string offsets, text) are leaves read whole ...
SMALL_ROW = 256
#: ... when the whole leaf is at most this many bytes.
SMALL_LEAF = 4 * 1024 * 1024


class RemoteArray:
    """A raw C-order array ``shape`` of ``dtype`` stored in the object ``folder/name``, read by rows.

    ``a[i:j]`` fetches rows ``i..j`` only (one ranged request); ``a[i]`` one
    row; ``np.asarray(a)`` everything. A small object (at most
    ``whole_below`` bytes, or rows of at most :data:`SMALL_ROW` bytes and at
    most :data:`SMALL_LEAF` in all: a part's offsets, provenance and
    loudness) is fetched whole on first use and kept in memory, so later rows
    cost nothing; rows of audio are always fetched one range each. ``data``
    (the object's whole bytes, known already) makes every read free. The object must
    hold exactly the array's bytes (``exact``), or at least them (a dataset
    still being written); anything else is a ``ValueError`` naming it.

    >>> import numpy as np
    >>> from audiotree.io import ranged_get, storage
    >>> storage.filesystem("memory://").pipe("memory://doc/ranges/x.bin", np.arange(6, dtype="<f4").tobytes())
    >>> a = RemoteArray(RemoteFolder("memory://doc/ranges"), "x.bin", "<f4", (3, 2), whole_below=0)
    >>> a[1:2].tolist(), float(a[2][1])
    ([[2.0, 3.0]], 5.0)
    """

    def __init__(self, folder: RemoteFolder, name: str, dtype: Any, shape: tuple[int, ...], *, exact: bool = True,
                 tag: str = "", whole_below: int = 64 * 1024, data: bytes | None = None, where: str = "") -> None:
        import math

        import numpy as np

        self.folder, self.name, self.tag = folder, name, tag
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape)
        self._row = self.dtype.itemsize * math.prod(self.shape[1:])
        self.nbytes = self.shape[0] * self._row
        self._exact = exact
        self.whole_below = whole_below
        #: Whether the object is fetched whole on first use.
        self.small = self.nbytes <= whole_below or (self._row <= SMALL_ROW and self.nbytes <= SMALL_LEAF)
        self._whole = None
        self._lock = threading.Lock()
        if data is not None:  # the whole object, already at hand (a manifest's inline copy): no request
            if len(data) != self.nbytes:
                raise ValueError(storage.redact(
                    f"{where or folder.object_url(name)}: the copy of {name} it carries is {len(data)} bytes, but "
                    f"the array needs exactly {self.nbytes}; the dataset is damaged. Re-render it.",
                    folder.storage_options))
            self._whole = self._rows(data, self.shape[0])

    def __len__(self) -> int:
        return self.shape[0]

    def _read(self, start: int, stop: int, view: bool = False) -> bytes | memoryview:
        bounds = {"size": self.nbytes} if self._exact else {"min_size": self.nbytes}
        return self.folder.read(self.name, start, stop, tag=self.tag, view=view, **bounds)

    @property
    def url(self) -> str:
        """The object's URL."""
        return self.folder.object_url(self.name)

    @property
    def expected_size(self) -> int | None:
        """The object's size in bytes when the manifest fixes it (a closed dataset), else ``None``."""
        return self.nbytes if self._exact else None

    def planned_rows(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The byte ranges of the object ``self[start:stop]`` would fetch (the whole object when it is small and
        not yet here; none when its bytes are at hand or in the local cache), without fetching: what the
        read-ahead plans (:mod:`audiotree.io.read_ahead`)."""
        if self._whole is not None or stop <= start:
            return []
        lo, hi = (0, self.nbytes) if self.small else (start * self._row, stop * self._row)
        return [] if self.folder.holds(self.name, lo, hi, tag=self.tag) else [(lo, hi)]

    def _rows(self, data: bytes, count: int):
        import numpy as np

        return np.frombuffer(data, dtype=self.dtype).reshape((count, *self.shape[1:]))

    def _all(self):
        if self._whole is None:
            with self._lock:
                if self._whole is None:
                    self._whole = self._rows(self._read(0, self.nbytes), self.shape[0])
        return self._whole

    def __getitem__(self, key: Any):
        if not isinstance(key, slice):
            i = int(key)
            return self[i : i + 1][0]
        start, stop, step = key.indices(self.shape[0])
        if step != 1:
            raise ValueError("RemoteArray reads contiguous rows only (slice step 1).")
        stop = max(start, stop)
        if self._whole is not None or self.small:
            return self._all()[start:stop]
        # (read-only rows; a view of bytes the read-ahead holds where it holds them: callers copy what they keep)
        return self._rows(self._read(start * self._row, stop * self._row, view=True), stop - start)

    def __array__(self, dtype: Any = None, copy: Any = None):
        import numpy as np

        data = self._all()
        return data if dtype is None else np.asarray(data, dtype=dtype)

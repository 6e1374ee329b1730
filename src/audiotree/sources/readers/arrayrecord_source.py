"""Reading ArrayRecord datasets (``ArrayRecordWriter``, ``audiotree render --format arrayrecord``).

:class:`ArrayRecordAudioSource` is ``grain.sources.ArrayRecordDataSource``
over the shards, plus our record decoder (:mod:`audiotree.formats.arrayrecord_codec`):
``source[i]`` is the same item (an ``AudioTree`` of batch 1, or the pytree
written) that was rendered, with no pickle involved. It is picklable and reads
in Grain's worker processes.

Many hosts: ``shard_options`` (a ``grain.sharding.ShardOptions``, e.g.
``ShardByJaxProcess()``) gives host ``i`` of ``n`` the *shard files*
``i, i + n, ...``, so each host opens only its own files; the shares are
disjoint and together complete. Use at least as many shards as hosts. To
split items rather than files, read everything and apply
:func:`audiotree.sources.shard_dataset`.

On object storage: the ArrayRecord reader opens local files only (its C++
file layer takes no URLs), so records are not read by ranged requests: for a
URL the indexes are read in place (one request each) and each shard file is
*staged* when one of its records is first read: downloaded into the read cache
(``cache_limit=``, least recently used evicted; without one, a private folder
holding one shard at a time, removed when the process exits), then opened locally. A render's record lists
each part's shards with size and SHA-256: staging one is then a single GET,
checked against them, and the cache entry is named by content (no version
request). A host with ``shard_options`` downloads its own shards only.
"""

from __future__ import annotations

import bisect
import json
import threading
import operator
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from audiotree.core import AudioTree
from audiotree.process_local import ExitsWithPickler, ProcessLocal
from audiotree.fs import private_temp_folder, read_limited
from audiotree.errors import AudioReadError
from audiotree.discovery.sharding import check_shard_options
from audiotree.io import storage
from audiotree.io.byte_cache import BoundedCache, FirstInFirstOut
from audiotree.sources.workers.lifecycle import hold_grain_flag_while_alive
from audiotree.formats.arrayrecord_codec import (
    INDEX_NAME,
    MAX_INDEX_BYTES,
    SHARD_PATTERN,
    check_index,
    check_render_shards,
    decode_item,
)

__all__ = ["ArrayRecordAudioSource", "open_arrayrecord"]

_RENDER_RECORD = "render.json"


def _read_json(path: Path, what: str) -> Any:
    raw = read_limited(path, MAX_INDEX_BYTES, what)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: {what} is not UTF-8 JSON ({exc}); re-render the dataset.") from None


def _dataset_shards(folder: Path) -> list[tuple[str, int]]:
    index = folder / INDEX_NAME
    if not index.is_file():
        raise FileNotFoundError(f"{folder} holds no {INDEX_NAME}: it is not a finished ArrayRecord dataset "
                                "(was the writer closed, and is this the right folder?).")
    shards, _ = check_index(_read_json(index, "the ArrayRecord index"), str(index))
    return [(os.fspath(folder / name), count) for name, count in shards]


def _render_parts(folder: Path) -> list[Path]:
    """The finished part folders of an ``audiotree render --format arrayrecord`` folder, in item order."""
    return [folder / name for name in _parts_of(_read_json(folder / _RENDER_RECORD, "the render record"),
                                                folder / _RENDER_RECORD)]


def _parts_of(record: Any, where: Any) -> list[str]:
    """The names of the finished parts of a render record with ``--format arrayrecord``."""
    parts = record.get("parts") if isinstance(record, dict) else None
    fmt = (record.get("config") or {}).get("format") if isinstance(record, dict) else None
    if not isinstance(parts, list) or fmt != "arrayrecord":
        raise ValueError(f"{where}: not a render with --format arrayrecord (format {fmt!r}); "
                         "read it with audiotree.sources.open_render.")
    out = []
    for part in parts:
        name = part.get("dir") if isinstance(part, dict) else None
        if not isinstance(name, str) or not name.startswith("part-") or "/" in name:
            raise ValueError(f"{where}: part entry {part!r} is damaged; re-render.")
        if part.get("count"):
            out.append(name)
    return out


def _remote_json(folder, name: str, what: str) -> Any | None:
    try:
        raw = folder.read_object(name, limit=MAX_INDEX_BYTES)
    except FileNotFoundError:
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{folder.object_url(name)}: {what} is not UTF-8 JSON ({exc}); re-render the dataset.") from None


def _remote_shards(folder) -> list[tuple]:
    """The shards (URLs, counts, the index to check them against) of an ArrayRecord dataset or render at ``folder``."""
    index = _remote_json(folder, INDEX_NAME, "the ArrayRecord index")
    if index is not None:
        shards, _ = check_index(index, folder.object_url(INDEX_NAME))
        return [(folder.object_url(name), count, None, None) for name, count in shards]
    record = _remote_json(folder, _RENDER_RECORD, "the render record")
    if record is None:
        raise FileNotFoundError(f"{folder.url} holds no {INDEX_NAME} (nor {_RENDER_RECORD}): it is not a finished "
                                "ArrayRecord dataset (was the writer closed, and is this the right URL?).")
    return _render_shards(folder, record)


def _render_shards(folder, record: Any) -> list[tuple]:
    """A remote render's shards from its record alone: ``(url, count, index to check or None, (bytes, sha256) or None)``.

    Why: reading every part's index at open would cost one request per part.
    A record whose parts list their shards (size and SHA-256, as render now
    writes them) needs nothing more: the shard is staged by one GET and
    checked against them. An older record
    implies one shard of ``count`` records per part; that part's index is read
    (and must list exactly that shard) when the shard is first staged.
    """
    where = folder.object_url(_RENDER_RECORD)
    entries = {part["dir"]: part for part in record["parts"] if isinstance(part, dict)}
    out: list[tuple] = []
    for name in _parts_of(record, where):
        part = folder.child(name)
        listed = entries[name].get("shards")
        if listed is None:
            out.append((part.object_url(SHARD_PATTERN.format(0)), int(entries[name]["count"]),
                        part.object_url(INDEX_NAME), None))
            continue
        shards = check_render_shards(listed, int(entries[name]["count"]), f"{where} part {name}")
        out.extend((part.object_url(file), count, None, (size, digest)) for file, count, size, digest in shards)
    return out


def _resolve(paths: Any, folder_of=None) -> list[tuple]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    shards: list[tuple] = []
    for path in paths:
        if folder_of is not None and storage.is_url(os.fspath(path)):
            shards.extend(_remote_shards(folder_of(os.fspath(path))))
            continue
        folder = Path(path)
        if (folder / INDEX_NAME).is_file() or not (folder / _RENDER_RECORD).is_file():
            shards.extend((path, count, None, None) for path, count in _dataset_shards(folder))
        else:
            for part in _render_parts(folder):
                shards.extend((path, count, None, None) for path, count in _dataset_shards(part))
    return shards


class ArrayRecordAudioSource(ExitsWithPickler):
    """A Grain ``RandomAccessDataSource`` of the items in ArrayRecord datasets.

    Args:
      paths: a dataset folder (holding ``arrayrecord.json``), a render folder
        (``audiotree render --format arrayrecord``), or a list of them, read
        in order.
      shard_options: read only this host's shard files (see the module docstring).
      storage_options, cache_limit, cache_dir: for URLs, the filesystem
        options and the read cache that staged shards go to (see the module
        docstring and :func:`audiotree.io.ranges.remote_folder`).

    Raises:
      FileNotFoundError: a folder without an index (nothing finished there).
      ValueError: a damaged index, a shard whose record count differs from
        the index, or fewer shards than hosts. A damaged record raises
        ``ValueError`` naming its file when it is read.

    >>> import numpy as np, tempfile
    >>> from audiotree import AudioTree
    >>> from audiotree.writers import ArrayRecordWriter
    >>> folder = tempfile.mkdtemp()
    >>> with ArrayRecordWriter(folder, records_per_shard=2) as writer:
    ...     writer.write(AudioTree.create(np.zeros((5, 1, 4), np.float32), 8_000, offset=np.arange(5.0)))
    5
    >>> source = ArrayRecordAudioSource(folder)
    >>> len(source), float(source[3].offset[0]), len(source.shard_files)
    (5, 3.0, 3)
    """

    def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike], *, shard_options: Any = None,
                 storage_options: dict | None = None, cache_limit: int | str | None = None,
                 cache_dir: str | os.PathLike | None = None):
        from audiotree.io.ranges import remote_folder

        shards = _resolve(paths, lambda url: remote_folder(url, storage_options=storage_options))
        self._setup(shards, shard_options=shard_options, storage_options=storage_options, cache_limit=cache_limit,
                    cache_dir=cache_dir)

    @classmethod
    def of_remote_render(cls, url: str, record: dict, *, shard_options: Any = None,
                         storage_options: dict | None = None, cache_limit: int | str | None = None,
                         cache_dir: str | os.PathLike | None = None) -> "ArrayRecordAudioSource":
        """The remote ArrayRecord render at ``url`` whose ``render.json`` is ``record`` (already read): no request."""
        from audiotree.io.ranges import remote_folder

        self = cls.__new__(cls)
        self._setup(_render_shards(remote_folder(url, storage_options=storage_options), record),
                    shard_options=shard_options, storage_options=storage_options, cache_limit=cache_limit,
                    cache_dir=cache_dir)
        return self

    def _setup(self, shards: list, *, shard_options, storage_options, cache_limit, cache_dir) -> None:
        import grain

        if shard_options is not None:
            index, count = check_shard_options(shard_options)
            if len(shards) < count:
                raise ValueError(f"{len(shards)} ArrayRecord shard file(s) cannot be split over {count} hosts; "
                                 "write more shards (a smaller records_per_shard or --part-size).")
            shards = shards[index::count]
        self.shard_files = [shard[0] for shard in shards]
        self._ends = []
        total = 0
        for shard in shards:
            total += shard[1]
            self._ends.append(total)
        self._staging = None
        if any(storage.is_url(path) for path in self.shard_files):
            self._staging = _StagedShards(self.shard_files, [shard[1] for shard in shards],
                                          storage_options=storage_options, cache_limit=cache_limit,
                                          cache_dir=cache_dir, indexes=[shard[2] for shard in shards],
                                          contents=[shard[3] for shard in shards])
            self._source = self._staging
            return
        self._source = grain.sources.ArrayRecordDataSource(self.shard_files) if self.shard_files else None
        found = len(self._source) if self._source is not None else 0
        if found != total:
            raise ValueError(f"The ArrayRecord shards {self.shard_files[:3]} hold {found} records but their "
                             f"indexes list {total}; a shard was replaced or truncated. Re-render the dataset.")
        hold_grain_flag_while_alive(self)  # mp_prefetch from a plain script (audiotree.sources.workers.lifecycle)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def item_bytes(self) -> int | None:
        """Bytes of a record of the first shard (its size over its count) when the render record gives it, else None.

        Why: sizing the dataset by reading its first item would stage a whole
        remote shard at open; a record's bytes are its waveform's plus a small header.
        """
        contents = self._staging.contents if self._staging is not None else []
        if not contents or contents[0] is None or not self._staging.counts[0]:
            return None
        return contents[0][0] // self._staging.counts[0]

    def __repr__(self) -> str:
        return f"ArrayRecordAudioSource(shards={len(self.shard_files)}, num_records={len(self)})"

    def _where(self, i: int) -> str:
        shard = bisect.bisect_right(self._ends, i)
        first = self._ends[shard - 1] if shard else 0
        return f"{self.shard_files[shard]} record {i - first}"

    def _check(self, index: Any) -> int:
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(f"ArrayRecordAudioSource indices must be integers, got {type(index).__name__}.") from None
        if not 0 <= i < len(self):
            raise IndexError(f"Index {i} is out of range for {len(self)} records (negative indices are not supported).")
        return i

    def __getitem__(self, index: int) -> Any:
        i = self._check(index)
        return decode_item(self._source[i], self._where(i), tree_class=AudioTree)

    def __getitems__(self, indices: Iterable[int]) -> list:
        checked = [self._check(i) for i in indices]
        records = self._source.__getitems__(checked) if checked else []
        return [decode_item(record, self._where(i), tree_class=AudioTree) for i, record in zip(checked, records)]


def open_arrayrecord(paths: str | os.PathLike | Sequence[str | os.PathLike], *, shard_options: Any = None,
                     storage_options: dict | None = None, cache_limit: int | str | None = None,
                     cache_dir: str | os.PathLike | None = None):
    """The items of ArrayRecord datasets as a ``grain.MapDataset`` (see :class:`ArrayRecordAudioSource`)."""
    import grain

    from audiotree.sources.audio_datasets import wrap_stored

    source = ArrayRecordAudioSource(paths, shard_options=shard_options, storage_options=storage_options,
                                    cache_limit=cache_limit, cache_dir=cache_dir)
    return wrap_stored(grain.MapDataset.source(source), item_bytes=source.item_bytes())


def _open_shards() -> BoundedCache:
    """The staged shards open in this process: the :data:`_StagedShards.OPEN_SHARDS` most recently opened."""
    return BoundedCache("staged_shards", max_entries=_StagedShards.OPEN_SHARDS, policy=FirstInFirstOut)


class _StagedShards(ProcessLocal):
    """Records of remote shard files, each downloaded into a local cache when first read (see the module docstring).

    At most :data:`OPEN_SHARDS` staged shards are open per process; the
    cache folder's size is bounded by ``cache_limit`` (without one, a
    private folder that keeps only the shard in use).
    """

    OPEN_SHARDS = 2

    #: Rebuilt fresh in every process this object is unpickled in (see audiotree.process_local).
    process_local = {"_lock": threading.Lock, "_cache": lambda: None, "_cache_pid": lambda: None,
                     "_open": lambda: _open_shards()}

    def __init__(self, urls: list[str], counts: list[int], *, storage_options, cache_limit, cache_dir,
                 indexes: list[str | None] | None = None, contents: list[tuple | None] | None = None) -> None:
        self.urls, self.counts = list(urls), list(counts)
        #: Per shard, the index (URL) still to check it against before it is staged (a render's part), or None.
        self.indexes = list(indexes) if indexes is not None else [None] * len(self.urls)
        #: Per shard, ``(bytes, sha256)`` the render record gives (checked after download), or None.
        self.contents = list(contents) if contents is not None else [None] * len(self.urls)
        self.storage_options = storage_options
        self.cache_limit, self.cache_dir = cache_limit, cache_dir
        self._ends = []
        total = 0
        for n in self.counts:
            total += n
            self._ends.append(total)
        self._cache = None
        self._cache_pid = None  # the process that made the private folder (a forked worker makes its own)
        self._open = _open_shards()
        self._lock = threading.Lock()
        if cache_limit is not None:
            self._cache_folder()  # an unwritable cache folder is named now, not at the first item

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def _cache_folder(self):
        from audiotree.io.ranges import RangeCache, default_cache_dir

        if self._cache is None:
            if self.cache_limit is not None:
                folder = self.cache_dir if self.cache_dir is not None else default_cache_dir() / "ranges"
                self._cache = RangeCache(folder, self.cache_limit)
        if self.cache_limit is None and self._cache_pid != os.getpid():
            # This process's own folder (not a forking parent's, whose evictions would remove the shard this one
            # is about to open), removed when this object goes or the process exits.
            self._cache = RangeCache(private_temp_folder("audiotree-shards-", owner=self), 0)
            self._cache_pid = os.getpid()
        return self._cache

    def _shard(self, k: int):
        source = self._open.get(k)
        if source is not None:
            return source
        import grain

        url = self.urls[k]
        if self.contents[k] is not None:  # named by content: no version request, the download is checked
            size, digest = self.contents[k]
            try:
                path = self._cache_folder().staged(f"{url}\x00{size}\x00sha256:{digest}",
                                                   lambda tmp: self._download_checked(k, tmp))
            except AudioReadError as exc:
                if storage.http_status(exc.__cause__) != 404 and not isinstance(exc.__cause__, FileNotFoundError):
                    raise
                folder, name = url.rsplit("/", 1)
                raise FileNotFoundError(
                    f"The render record names the finished part {storage.redact(folder)}, but it holds no {name}; "
                    "the part was deleted. Re-render it (audiotree render --overwrite).") from None
        else:
            if self.indexes[k] is not None:
                self._check_part_index(k)
            size, mtime, tag = storage.version(url, storage_options=self.storage_options)
            path = self._cache_folder().staged(f"{url}\x00{size}\x00{mtime}\x00{tag}", lambda tmp: storage.download(
                url, tmp, storage_options=self.storage_options))
        source = grain.sources.ArrayRecordDataSource([os.fspath(path)])
        if len(source) != self.counts[k]:
            raise ValueError(f"The ArrayRecord shard {url} holds {len(source)} records but its index lists "
                             f"{self.counts[k]}; the shard was replaced or truncated. Re-render the dataset.")
        self._open.put(k, source)
        return source

    def _download_checked(self, k: int, tmp: Path) -> None:
        """Downloads shard ``k`` to ``tmp`` and checks its size and SHA-256 against the render record."""
        import hashlib

        url, (size, digest) = self.urls[k], self.contents[k]
        storage.download(url, tmp, storage_options=self.storage_options)
        found = os.path.getsize(tmp)
        problem = None
        if found != size:
            problem = f"it is {found} bytes, but the render record says {size}"
        else:
            hashed = hashlib.sha256()
            with open(tmp, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    hashed.update(block)
            if hashed.hexdigest() != digest:
                problem = "its SHA-256 differs from the render record's"
        if problem is not None:
            os.unlink(tmp)
            raise ValueError(f"{storage.redact(url)}: {problem}; the remote part is truncated or was replaced. "
                             "Re-render it (audiotree render --overwrite).")

    def _check_part_index(self, k: int) -> None:
        from audiotree.io.ranges import remote_folder

        where = self.indexes[k]
        folder, name = where.rsplit("/", 1)
        index = _remote_json(remote_folder(folder, storage_options=self.storage_options), name,
                             "the ArrayRecord index")
        if index is None:
            raise FileNotFoundError(f"The render record names the finished part {folder}, but it holds no {name}; "
                                    "the part was deleted. Re-render it (audiotree render --overwrite).")
        shards, _ = check_index(index, where)
        expected = [(self.urls[k].rsplit("/", 1)[1], self.counts[k])]
        if [(str(n), int(c)) for n, c in shards] != expected:
            raise ValueError(f"{where} lists the shards {shards}, but the render record implies {expected}; the "
                             "part was replaced or damaged. Re-render it (audiotree render --overwrite).")
        self.indexes[k] = None

    def __getitem__(self, i: int):
        k = bisect.bisect_right(self._ends, i)
        with self._lock:
            source = self._shard(k)
        return source[i - (self._ends[k - 1] if k else 0)]

    def __getitems__(self, indices) -> list:
        return [self[i] for i in indices]

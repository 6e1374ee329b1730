"""``TreeDataSource``: random access to a ``TreeWriter`` dataset, for Grain.

The manifest and every leaf file are validated when the source is built (see
:mod:`audiotree.formats.tree`): header and version, types, names, structure,
paths (no absolute paths, no ``..``, no symlink leaving the folder) and file
sizes against ``num_samples``. Only the committed samples are visible, so a
dataset that is still being written (or whose writer crashed) reads as the
prefix its writer last committed.

Memmaps are opened lazily, once per process, under a lock; the source pickles
without them (Grain's spawned workers reopen them on first read) and reads are
thread-safe.

A URL folder (``s3://bucket/render/part-00000``) is read in place: the
manifest in one request, then each item's rows by ranged requests
(:class:`audiotree.io.ranges.RemoteArray`); the small leaves (offsets,
provenance) come inline with a closed writer's manifest
(:mod:`audiotree.formats.tree_inline`), or else are fetched whole once each.
Sizes are checked against the manifest
as the answers arrive (``Content-Range``), so a truncated object is an error
naming it. ``cache_limit="20GB"`` keeps what was read in a local
least-recently-used cache (``cache_dir``, default ``$AUDIOTREE_CACHE/ranges``).
Asked for an item while a read-ahead plans (:mod:`audiotree.sources.read_ahead_map`),
a URL folder names the ranges that item reads (:meth:`TreeDataSource.planned_reads`)
instead of reading them.
"""

from __future__ import annotations

import json
import operator
import os
import threading
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from audiotree.core import AudioTree
from audiotree.process_local import ExitsWithPickler, ProcessLocal
from audiotree.formats import header as _format
from audiotree.fs import read_limited
from audiotree.io import storage
from audiotree.io.read_ahead import PlannedRange
from audiotree.sources.read_ahead_map import PlannedReads, is_planning
from audiotree.sources.workers.lifecycle import hold_grain_flag_while_alive
from audiotree.formats.tree_inline import inline_bytes
from audiotree.formats.tree import (
    INDEX_DTYPE,
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    TREE_VERSION,
    TreeManifest,
    build,
    check_file_sizes,
    parse_manifest,
    prune,
)

__all__ = ["TreeDataSource"]


def _leaf_names(node: dict) -> list[tuple[str, str]]:
    if node["type"] in ("array", "string"):
        return [(node["leaf"], node["type"])]
    out: list[tuple[str, str]] = []
    for child in node["children"].values():
        out.extend(_leaf_names(child))
    return out


def _all_paths(node: dict, path: str = "") -> set[str]:
    """Every dotted path of the structure (nodes and leaves)."""
    out = {path} if path else set()
    if node["type"] in ("dict", "AudioTree"):
        for key, child in node["children"].items():
            out |= _all_paths(child, f"{path}.{key}" if path else key)
    else:
        out.add(node["leaf"])
    return out


def _leaf_sizes(manifest: TreeManifest) -> dict[str, int | None]:
    """Every leaf file's exact length when the manifest implies one (a string leaf's text: ``None``)."""
    n = manifest.num_samples
    sizes: dict[str, int | None] = {spec.file.name: n * spec.row_bytes for spec in manifest.arrays.values()}
    for spec in manifest.strings.values():
        sizes[spec.index_file.name] = n * INDEX_DTYPE.itemsize
        sizes[spec.data_file.name] = None
    return sizes


class TreeDataSource(ExitsWithPickler, ProcessLocal):
    """A Grain ``RandomAccessDataSource`` over a :class:`~audiotree.TreeWriter` folder.

    ``source[i]`` rebuilds sample ``i`` with the written structure: every array
    leaf as a fresh ``(1, *shape)`` array, every string leaf as a ``str``, and
    AudioTrees as batch-of-1 trees.

    Args:
      directory: the dataset folder.
      exclude_prefixes: dotted leaf paths to skip, e.g. ``["dry"]`` skips
        ``dry.waveform`` but not ``dryness``. Skipped AudioTree fields read as
        ``None``; skipped dict keys are absent. Each prefix must match something.
      load_into_memory: read every kept leaf into RAM now (the copies travel to
        worker processes with the pickled source, so workers do no I/O).
      storage_options: filesystem options for a URL ``directory``.
      cache_limit: for a URL, keep the bytes read in a local cache of at most
        this size (``"20GB"``, bytes), evicting the least recently used;
        ``None`` (default) keeps none on disk.
      cache_dir: that cache's folder (default ``$AUDIOTREE_CACHE/ranges``).

    Raises:
      FileNotFoundError: no ``manifest.json`` (nothing was committed).
      ValueError: a manifest or file that fails validation (the message names
        the file and the problem), or an unknown or all-excluding prefix.
    """

    #: Rebuilt fresh in every process this object is unpickled in (see audiotree.process_local).
    process_local = {"_lock": threading.Lock, "_handles": lambda: None}

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        exclude_prefixes: Iterable[str] | None = None,
        load_into_memory: bool = False,
        storage_options: dict | None = None,
        cache_limit: int | str | None = None,
        cache_dir: str | os.PathLike | None = None,
    ):
        self._remote = None
        if storage.is_url(os.fspath(directory)):
            from audiotree.io.ranges import remote_folder

            self._remote = remote_folder(os.fspath(directory), storage_options=storage_options,
                                         cache_limit=cache_limit, cache_dir=cache_dir)
            self.directory = self._remote.url
            where = self._remote.object_url(MANIFEST_NAME)
            try:
                raw = self._remote.read_object(MANIFEST_NAME, limit=MAX_MANIFEST_BYTES)
            except FileNotFoundError:
                raise FileNotFoundError(f"Manifest not found: {where}. The folder holds no committed TreeWriter "
                                        "dataset (is this the right URL?).") from None
            # Leaf names are checked against a folder that holds nothing (no symlinks to follow).
            manifest_path = Path("/nonexistent-audiotree-remote") / MANIFEST_NAME
        else:
            self.directory = Path(directory)
            manifest_path = self.directory / MANIFEST_NAME
            if not manifest_path.is_file():
                raise FileNotFoundError(
                    f"Manifest not found: {manifest_path}. The folder holds no committed TreeWriter dataset (was the "
                    "writer closed or flushed, and is this the right folder?)."
                )
            where = str(manifest_path)
            raw = read_limited(manifest_path, MAX_MANIFEST_BYTES, "the manifest")
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"Invalid manifest {where}: it is not valid UTF-8 JSON ({exc}). Re-render the dataset.") from None
        info = _format.check(obj, _format.TREE, manifest_path, reader_version=TREE_VERSION)
        manifest = parse_manifest(obj, manifest_path.parent, where, info)
        self._inline: dict[str, bytes] = {}
        if self._remote is None:  # the files are read in place (inline copies are for remote readers)
            self._text_lengths = check_file_sizes(manifest, where)
        else:  # checked against each object's size as it is read
            import hashlib

            self._text_lengths = {}
            self._tag = hashlib.sha256(raw).hexdigest()[:16]
            self._inline = inline_bytes(obj, _leaf_sizes(manifest), complete=manifest.complete, where=where)
        self._manifest: TreeManifest = manifest
        self._where = where

        if isinstance(exclude_prefixes, str):
            exclude_prefixes = [exclude_prefixes]
        prefixes = tuple(str(p) for p in (exclude_prefixes or ()))
        if prefixes:
            paths = _all_paths(manifest.structure)
            unknown = [p for p in prefixes if not any(q == p or q.startswith(p + ".") for q in paths)]
            if unknown:
                top = sorted(p for p in paths if "." not in p)
                raise ValueError(
                    f"exclude_prefixes {unknown} match nothing in {self.directory}; top-level names are {top}."
                )
        plan = prune(manifest.structure, prefixes) if prefixes else manifest.structure
        if plan is None:
            raise ValueError(
                f"exclude_prefixes {list(prefixes)} exclude the only leaf of {self.directory}; nothing would be read."
            )
        self.exclude_prefixes = prefixes
        self._plan = plan
        kept = _leaf_names(plan)
        self._array_names = [name for name, kind in kept if kind == "array"]
        self._string_names = [name for name, kind in kept if kind == "string"]
        self.load_into_memory = bool(load_into_memory)
        hold_grain_flag_while_alive(self)  # mp_prefetch from a plain script (audiotree.sources.workers.lifecycle)
        self._lock = threading.Lock()
        self._handles: dict | None = None
        self._memory: dict | None = None
        if self.load_into_memory:
            self._memory = self._load_all()

    # ----------------------------------------------------------------- basics
    def __len__(self) -> int:
        return self._manifest.num_samples

    def __repr__(self) -> str:
        return (
            f"TreeDataSource(directory={str(self.directory)!r}, num_samples={len(self)}, "
            f"exclude_prefixes={list(self.exclude_prefixes)!r}, load_into_memory={self.load_into_memory})"
        )

    def get_metadata(self) -> dict:
        """A copy of the dataset-level ``metadata`` given to the writer."""
        return json.loads(json.dumps(self._manifest.metadata))

    @property
    def structure(self) -> dict:
        """The stored structure description (a copy)."""
        return json.loads(json.dumps(self._manifest.structure))

    @property
    def waveform_nbytes(self) -> int:
        """Bytes of one item's ``waveform`` as read (0 when the item has none): from the manifest, no read."""
        plan = self._plan
        node = plan.get("children", {}).get("waveform") if plan["type"] == "AudioTree" else None
        return self._manifest.arrays[node["leaf"]].row_bytes if node else 0

    # --------------------------------------------------------------- handles
    def _open(self) -> dict:
        handles = self._handles
        if handles is not None:
            return handles
        with self._lock:
            if self._handles is not None:
                return self._handles
            n = self._manifest.num_samples
            if self._remote is not None:
                self._handles = self._open_remote(n)
                return self._handles
            # Files may have changed since construction (e.g. in another process): re-check cheaply.
            check_file_sizes(self._manifest, self._where, check_offsets=False)
            opened: dict[str, Any] = {}
            for name in self._array_names:
                spec = self._manifest.arrays[name]
                if n and spec.row_bytes:
                    opened[name] = np.memmap(spec.file, dtype=spec.dtype, mode="r", shape=(n, *spec.shape))
                else:
                    opened[name] = None
            for name in self._string_names:
                spec = self._manifest.strings[name]
                index = np.memmap(spec.index_file, dtype=INDEX_DTYPE, mode="r", shape=(n,)) if n else None
                length = self._text_lengths[name]
                data = np.memmap(spec.data_file, dtype=np.uint8, mode="r", shape=(length,)) if length else None
                opened[name] = (index, data)
            self._handles = opened
            return opened

    def _open_remote(self, n: int) -> dict:
        from audiotree.io.ranges import RemoteArray

        exact = self._manifest.complete
        opened: dict[str, Any] = {}

        def leaf(file: Path, dtype: Any, shape: tuple) -> RemoteArray:
            return RemoteArray(self._remote, file.name, dtype, shape, exact=exact, tag=self._tag,
                               data=self._inline.get(file.name), where=self._where)

        for name in self._array_names:
            spec = self._manifest.arrays[name]
            opened[name] = leaf(spec.file, spec.dtype, (n, *spec.shape)) if n and spec.row_bytes else None
        for name in self._string_names:
            spec = self._manifest.strings[name]
            index = leaf(spec.index_file, INDEX_DTYPE, (n,)) if n else None
            if index is not None and index.small:  # fetched whole anyway: check it all
                ends = np.asarray(index)
                if n > 1 and np.any(ends[1:] < ends[:-1]):
                    raise ValueError(f"Invalid manifest {self._where}: string leaf {name!r} has offsets that "
                                     "decrease; the index is damaged. Re-render the dataset.")
            length = int(index[n - 1]) if n else 0  # each read checks its own offsets against it
            self._text_lengths[name] = length
            opened[name] = (index, leaf(spec.data_file, np.uint8, (length,)) if length else None)
        return opened

    def close(self) -> None:
        """Releases the memmaps (idempotent); a later read reopens them."""
        with self._lock:
            self._handles = None

    def __enter__(self) -> "TreeDataSource":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._handles = None
        except Exception:  # pragma: no cover
            pass

    # ---------------------------------------------------------------- reading
    def _string_at(self, name: str, index_map: Any, data_map: Any, i: int) -> str:
        end = int(index_map[i])
        start = int(index_map[i - 1]) if i > 0 else 0
        length = self._text_lengths[name]
        if not 0 <= start <= end <= length:
            raise ValueError(
                f"{self._where}: string leaf {name!r} sample {i} has offsets [{start}, {end}) outside its "
                f"{length}-byte data file; the dataset is damaged. Re-render it."
            )
        raw = bytes(data_map[start:end]) if end > start else b""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"{self._where}: string leaf {name!r} sample {i} is not valid UTF-8 ({exc}); the dataset is damaged."
            ) from None

    def _load_all(self) -> dict:
        handles = self._open()
        n = len(self)
        memory: dict[str, Any] = {}
        for name in self._array_names:
            spec = self._manifest.arrays[name]
            mm = handles[name]
            native = spec.dtype.newbyteorder("=")
            memory[name] = np.zeros((n, *spec.shape), dtype=native) if mm is None else np.array(mm, dtype=native)
        for name in self._string_names:
            index, data = handles[name]
            memory[name] = [self._string_at(name, index, data, i) for i in range(n)]
        self.close()
        return memory

    def _check_index(self, index: Any) -> int:
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(f"TreeDataSource indices must be integers, got {type(index).__name__}.") from None
        n = len(self)
        if not 0 <= i < n:
            raise IndexError(f"Index {i} is out of range for {self.directory} with {n} samples (negative indices are not supported).")
        return i

    def planned_reads(self, i: int) -> list[PlannedRange]:
        """The byte ranges reading sample ``i`` fetches: each array leaf's row, and a small leaf whole until it is
        here; none for a local or in-memory dataset, or for bytes the local cache holds."""
        if self._remote is None or self._memory is not None:
            return []
        handles = self._open()  # (the manifest is read already; its inline leaves cost nothing)
        wanted: list[tuple[Any, list[tuple[int, int]]]] = []
        for name in self._array_names:
            if handles[name] is not None:
                wanted.append((handles[name], handles[name].planned_rows(i, i + 1)))
        for name in self._string_names:
            index_map, data_map = handles[name]
            offsets = index_map.planned_rows(max(i - 1, 0), i + 1)
            wanted.append((index_map, offsets))
            if data_map is not None and not offsets:  # the offsets are here: the text's range is known
                end = int(index_map[i])
                start = int(index_map[i - 1]) if i > 0 else 0
                if 0 <= start < end <= self._text_lengths[name]:
                    wanted.append((data_map, data_map.planned_rows(start, end)))
        fs = self._remote.filesystem()
        return [PlannedRange(leaf.url, lo, hi, leaf.expected_size, fs, rows=True) for leaf, ranges in wanted
                for lo, hi in ranges]

    def __getitem__(self, index: int) -> Any:
        """Sample ``index`` (0 <= index < len) rebuilt with the written structure."""
        i = self._check_index(index)
        if is_planning():  # the read-ahead asks what sample i reads (audiotree.sources.read_ahead_map)
            raise PlannedReads(self.planned_reads(i))
        values: dict[str, Any] = {}
        if self._memory is not None:
            for name in self._array_names:
                values[name] = np.array(self._memory[name][i : i + 1])
            for name in self._string_names:
                values[name] = self._memory[name][i]
        else:
            handles = self._open()
            for name in self._array_names:
                mm = handles[name]
                if mm is None:
                    spec = self._manifest.arrays[name]
                    values[name] = np.zeros((1, *spec.shape), dtype=spec.dtype.newbyteorder("="))
                else:
                    values[name] = np.array(mm[i : i + 1], dtype=mm.dtype.newbyteorder("="))
            for name in self._string_names:
                index_map, data_map = handles[name]
                values[name] = self._string_at(name, index_map, data_map, i)
        return build(self._plan, values, tree_class=AudioTree)

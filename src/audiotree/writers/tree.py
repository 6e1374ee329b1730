"""``TreeWriter``: any pytree of batches to one memmappable file per leaf.

The layout is described in :mod:`audiotree.formats.tree`; read it back with
:class:`audiotree.sources.TreeDataSource`. Array leaves are raw C-order
``<name>.bin`` files (one row per sample). String leaves use a format of our
own rather than Bagz (which is not available everywhere): ``<name>.offsets``,
a little-endian uint64 array of each string's end offset, plus
``<name>.utf8``, the concatenated UTF-8 bytes. Both are plain files that
``np.memmap`` opens on any platform, give O(1) random access, and need nothing
beyond NumPy; and because a string's bytes and offset are written before the
count that covers them is committed, they obey the same crash protocol as
arrays.

Crash consistency
-----------------
A dataset is only ever extended by this protocol:

1. the first ``write`` creates the leaf files and commits a manifest with
   ``num_samples = 0`` (the schema is pinned from then on);
2. every ``write`` puts its rows past the committed ones (``os.pwrite``), never
   touching committed bytes;
3. a *commit* ``fsync``-s every leaf file, then atomically replaces
   ``manifest.json`` (temporary file, ``fsync``, ``os.replace``, ``fsync`` of
   the folder) with the new count;
4. ``close`` fsyncs, truncates every file to exactly its content (never below
   the committed count), and commits a manifest with ``complete: true``.

Readers trust only the committed count, and check that every file is long
enough for it. A writer killed at any instant therefore leaves either no
manifest (nothing to read; the reader says so) or a manifest whose samples were
all fully written before it was committed: a consistent prefix.

Commits happen on ``flush()``, on ``close()``, and after a ``write`` when
``manifest_interval`` seconds have passed since the last one (``0``: only on
flush and close). A crash loses at most the samples written since the last
commit.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from audiotree.core import AudioTree
from audiotree.fs import close_keeping_error, fsync_dir, naming_os_errors, write_json_atomic
from audiotree.formats import header as _format
from audiotree.formats.tree import (
    INDEX_DTYPE,
    MANIFEST_NAME,
    MAX_FILENAME_BYTES,
    TREE_VERSION,
    Leaf,
    array_file,
    flatten,
    string_files,
)
from audiotree.formats.tree_inline import INLINE_KEY, SMALL_ROW, encode_inline
from audiotree.validation import check_choice, is_int, is_real
from audiotree.writers.writer_options import progress_bar, refuse_existing

__all__ = ["TreeWriter"]

_ON_OVERFLOW = ("grow", "raise", "trim")


def _pwrite_all(fd: int, data: bytes | memoryview, offset: int, path: Path) -> None:
    view = memoryview(data).cast("B")
    with naming_os_errors(path):  # os.pwrite's OSError (e.g. ENOSPC) names no file
        while view.nbytes:
            written = os.pwrite(fd, view, offset)
            if written <= 0:  # pragma: no cover - the OS reports errors by raising
                raise OSError(f"pwrite wrote {written} bytes")
            view = view[written:]
            offset += written


def _existing_dataset_files(directory: Path) -> list[str]:
    names = []
    if not directory.is_dir():
        return names
    for entry in os.scandir(directory):
        if entry.name == MANIFEST_NAME or entry.name.endswith((".bin", ".offsets", ".utf8")):
            names.append(entry.name)
    return sorted(names)


class _ArrayFile:
    def __init__(self, leaf: Leaf, path: Path):
        self.name = leaf.name
        self.path = path
        self.dtype = np.dtype(leaf.value.dtype).newbyteorder("=")
        self.shape = tuple(int(d) for d in leaf.value.shape[1:])
        self.row_bytes = self.dtype.itemsize * math.prod(self.shape)
        self.fd = -1


class _StringFile:
    def __init__(self, leaf: Leaf, index_path: Path, data_path: Path):
        self.name = leaf.name
        self.index_path = index_path
        self.data_path = data_path
        self.index_fd = -1
        self.data_fd = -1
        self.text_bytes = 0  # bytes of committed-or-written strings in the data file


class TreeWriter:
    """Writes batches of any pytree as one memory-mappable file per leaf.

    Args:
      directory: the dataset folder (created if needed).
      expected_samples: a hint for how many samples will be written; files are
        pre-allocated for it (sparse). ``on_overflow`` decides what happens past it.
      on_overflow: ``"grow"`` (re-allocate to 1.5x), ``"raise"`` (raise
        ``ValueError``, nothing written) or ``"trim"`` (write what fits, warn).
      metadata: a JSON-serialisable dict stored with the dataset
        (:meth:`TreeDataSource.get_metadata`).
      pbar: a tqdm-like bar to advance by the samples written; ``close_pbar``
        closes it on :meth:`close`. ``show_progress=True`` creates one.
      exist_ok: replace an existing dataset in ``directory`` (its manifest is
        removed before anything is written, so a crash never mixes the two).
      manifest_interval: seconds between automatic commits (see the module
        docstring); ``0`` commits only on :meth:`flush` and :meth:`close`.
      storage_options: fsspec options when ``directory`` is a URL (``s3://``,
        ``gs://``, ...): the output is staged in a local folder and uploaded on
        :meth:`close`, the manifest last (see :mod:`audiotree.writers.remote`).

    Use it as a context manager, or call :meth:`open` and :meth:`close`.
    Written pytrees must keep the structure, leaf dtypes and per-sample shapes
    of the first write; a mismatch raises ``ValueError`` and writes nothing.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        expected_samples: int | None = 0,
        *,
        on_overflow: str = "grow",
        metadata: dict | None = None,
        pbar: Any = None,
        close_pbar: bool = False,
        show_progress: bool = False,
        progress_desc: str | None = None,
        exist_ok: bool = False,
        manifest_interval: float = 5.0,
        storage_options: dict | None = None,
    ):
        check_choice(on_overflow, "on_overflow", _ON_OVERFLOW, renamed={"error": "raise"})
        if expected_samples is not None and (
            not is_int(expected_samples) or expected_samples < 0
        ):
            raise ValueError(f"expected_samples must be an int >= 0 (or None), got {expected_samples!r}.")
        if not is_real(manifest_interval) or not manifest_interval >= 0:
            raise ValueError(f"manifest_interval must be a number of seconds >= 0, got {manifest_interval!r}.")
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, dict):
            raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}.")
        try:
            self._metadata = json.loads(json.dumps(metadata, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"metadata must be JSON-serialisable (no NaN/inf): {exc}") from None
        from audiotree.writers.remote import staged

        # A URL (s3://, gs://, ...) is written in a local staging folder and uploaded on close.
        self.directory, self._remote = staged(directory, storage_options=storage_options, markers=(MANIFEST_NAME,),
                                              exist_ok=exist_ok, what="a dataset")
        self.expected_samples = None if expected_samples is None else int(expected_samples)
        self.on_overflow = on_overflow
        self.exist_ok = bool(exist_ok)
        self.manifest_interval = float(manifest_interval)
        self._pbar, self._close_pbar = progress_bar(pbar, close_pbar, show_progress, progress_desc,
                                                    default_desc="Writing", unit="sample",
                                                    total=self.expected_samples or None)
        self._state = "new"  # new -> open -> closed
        self._poisoned: BaseException | None = None
        self._structure: dict | None = None
        self._arrays: dict[str, _ArrayFile] = {}
        self._strings: dict[str, _StringFile] = {}
        self._order: list[tuple[str, str]] = []  # (name, kind) in write order
        self._written = 0
        self._committed = 0
        self._capacity = 0
        self._created_at: str | None = None
        self._last_commit = time.monotonic()

    # --------------------------------------------------------------- lifecycle
    def open(self) -> "TreeWriter":
        """Creates the folder and checks it holds no other dataset; returns ``self``."""
        if self._state == "open":
            raise RuntimeError(f"TreeWriter for {self.directory} is already open.")
        if self._state == "closed":
            raise RuntimeError(f"TreeWriter for {self.directory} was closed; create a new TreeWriter to write again.")
        self.directory.mkdir(parents=True, exist_ok=True)
        existing = _existing_dataset_files(self.directory)
        refuse_existing(self.directory, "a dataset", existing, exist_ok=self.exist_ok)
        if existing:
            # Retire the old dataset before touching any file it names.
            try:
                os.unlink(self.directory / MANIFEST_NAME)
            except FileNotFoundError:
                pass
            fsync_dir(self.directory)
        self._state = "open"
        return self

    def __enter__(self) -> "TreeWriter":
        return self.open()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        close_keeping_error(self, exc)

    def _require_open(self) -> None:
        if self._state == "new":
            raise RuntimeError("TreeWriter is not open; use `with TreeWriter(...) as writer:` or call open() first.")
        if self._state == "closed":
            raise RuntimeError(f"TreeWriter for {self.directory} is closed; create a new TreeWriter to write again.")
        if self._poisoned is not None:
            raise RuntimeError(
                f"TreeWriter for {self.directory} failed earlier ({self._poisoned!r}) and accepts no more writes; "
                "close() it to keep the committed samples."
            )

    # ------------------------------------------------------------------ schema
    def _create_files(self, structure: dict, leaves: list[Leaf], capacity: int) -> None:
        arrays: dict[str, _ArrayFile] = {}
        strings: dict[str, _StringFile] = {}
        seen: dict[str, str] = {}
        for leaf in leaves:
            names = [array_file(leaf.name)] if leaf.kind == "array" else list(string_files(leaf.name))
            for fname in names:
                if len(fname.encode("utf-8")) > MAX_FILENAME_BYTES:
                    raise ValueError(f"Leaf name {leaf.name!r} is too long for a file name; use shorter dict keys.")
                key = fname.lower()
                if key in seen:
                    raise ValueError(
                        f"Leaves {seen[key]!r} and {leaf.name!r} would share the file {fname!r} (dotted names "
                        "collide, possibly differing only in case); rename a dict key."
                    )
                seen[key] = leaf.name
            if leaf.kind == "array":
                arrays[leaf.name] = _ArrayFile(leaf, self.directory / names[0])
            else:
                strings[leaf.name] = _StringFile(leaf, self.directory / names[0], self.directory / names[1])
        created: list[int] = []

        def create(path: Path) -> int:
            # A fresh inode: a reader still mapping a replaced dataset keeps its old, intact file.
            path.unlink(missing_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            created.append(fd)
            return fd

        try:
            for spec in arrays.values():
                spec.fd = create(spec.path)
                os.ftruncate(spec.fd, capacity * spec.row_bytes)
            for spec in strings.values():
                spec.index_fd = create(spec.index_path)
                spec.data_fd = create(spec.data_path)
                os.ftruncate(spec.index_fd, capacity * INDEX_DTYPE.itemsize)
        except BaseException:
            for fd in created:
                os.close(fd)
            for spec in arrays.values():
                spec.path.unlink(missing_ok=True)
            for spec in strings.values():
                spec.index_path.unlink(missing_ok=True)
                spec.data_path.unlink(missing_ok=True)
            raise
        self._structure = structure
        self._arrays = arrays
        self._strings = strings
        self._order = [(leaf.name, leaf.kind) for leaf in leaves]
        self._capacity = capacity
        self._created_at = datetime.datetime.now(datetime.timezone.utc).isoformat()
        self._commit(complete=False)

    def _check_against_schema(self, structure: dict, leaves: list[Leaf]) -> None:
        order = [(leaf.name, leaf.kind) for leaf in leaves]
        if order != self._order or structure != self._structure:
            expected = {n for n, _ in self._order}
            got = {n for n, _ in order}
            details = []
            if got - expected:
                details.append(f"unexpected leaves {sorted(got - expected)}")
            if expected - got:
                details.append(f"missing leaves {sorted(expected - got)}")
            kinds = sorted(n for (n, k) in order if n in expected and (n, k) not in self._order)
            if kinds:
                details.append(f"leaves that changed between string and array {kinds}")
            if not details:
                details.append("the nesting or an AudioTree sample_rate differs")
            raise ValueError(
                "This pytree's structure differs from the first write to "
                f"{self.directory}: {'; '.join(details)}. Every write must have the same structure."
            )
        for leaf in leaves:
            if leaf.kind != "array":
                continue
            spec = self._arrays[leaf.name]
            shape = tuple(leaf.value.shape[1:])
            if shape != spec.shape:
                raise ValueError(
                    f"Leaf {leaf.name!r} has per-sample shape {list(shape)}, but the dataset stores {list(spec.shape)}."
                )
            if np.dtype(leaf.value.dtype).newbyteorder("=") != spec.dtype:
                raise ValueError(
                    f"Leaf {leaf.name!r} has dtype {leaf.value.dtype}, but the dataset stores {spec.dtype}; cast it "
                    "with .astype before writing."
                )

    # ------------------------------------------------------------------- write
    def write(self, pytree: Any) -> int:
        """Appends a batch; returns how many samples were written.

        Every leaf needs the same leading batch size (a bare ``str`` is a batch
        of one). Validation happens before anything is written.
        """
        self._require_open()
        structure, leaves = flatten(pytree, tree_class=AudioTree)
        if not leaves:
            raise ValueError("Pytree has no leaves; there is nothing to write.")
        sizes = {leaf.name: leaf.batch for leaf in leaves}
        batch = next(iter(sizes.values()))
        if any(b != batch for b in sizes.values()):
            raise ValueError(f"All leaves must share the batch size; got {sizes}.")
        for leaf in leaves:
            if leaf.kind == "string":
                for s in leaf.value:
                    try:
                        s.encode("utf-8")
                    except UnicodeEncodeError as exc:
                        raise ValueError(f"String leaf {leaf.name!r} holds text that is not valid UTF-8: {exc}") from None
        if self._structure is not None:
            self._check_against_schema(structure, leaves)

        count = batch
        needed = self._written + batch
        capacity = self._capacity if self._structure is not None else (self.expected_samples or 0)
        if needed > capacity:
            if self.on_overflow == "raise":
                raise ValueError(
                    f"Writing {batch} samples would exceed the allocation: {self._written} written, {capacity} "
                    f"allocated (expected_samples={self.expected_samples}), {batch} offered. Raise expected_samples "
                    "or use on_overflow='grow'."
                )
            if self.on_overflow == "trim":
                count = max(capacity - self._written, 0)
                warnings.warn(
                    f"TreeWriter {self.directory}: expected_samples={self.expected_samples} reached; dropping "
                    f"{batch - count} of {batch} offered samples.",
                    UserWarning,
                    stacklevel=2,
                )
            else:
                capacity = max(needed, int(math.ceil(capacity * 1.5)))
        if self._structure is None:
            self._create_files(structure, leaves, capacity)
        if count == 0:
            return 0
        try:
            if capacity > self._capacity:
                self._grow(capacity)
            self._write_rows(leaves, count)
        except BaseException as exc:
            self._poisoned = exc
            raise
        self._written += count
        if self._pbar is not None:
            self._pbar.update(count)
        if self.manifest_interval > 0 and time.monotonic() - self._last_commit >= self.manifest_interval:
            try:
                self._commit(complete=False)
            except BaseException as exc:
                self._poisoned = exc
                raise
        return count

    def _grow(self, capacity: int) -> None:
        for spec in self._arrays.values():
            with naming_os_errors(spec.path):
                os.ftruncate(spec.fd, capacity * spec.row_bytes)
        for spec in self._strings.values():
            with naming_os_errors(spec.index_path):
                os.ftruncate(spec.index_fd, capacity * INDEX_DTYPE.itemsize)
        self._capacity = capacity

    def _write_rows(self, leaves: list[Leaf], count: int) -> None:
        start = self._written
        pending_text: dict[str, int] = {}
        for leaf in leaves:
            if leaf.kind == "array":
                spec = self._arrays[leaf.name]
                rows = np.ascontiguousarray(leaf.value[:count], dtype=spec.dtype)
                if rows.nbytes:
                    _pwrite_all(spec.fd, rows.data, start * spec.row_bytes, spec.path)
            else:
                spec = self._strings[leaf.name]
                encoded = [s.encode("utf-8") for s in leaf.value[:count]]
                lengths = np.fromiter((len(b) for b in encoded), dtype=np.uint64, count=len(encoded))
                ends = (spec.text_bytes + np.cumsum(lengths, dtype=np.uint64)).astype(INDEX_DTYPE)
                blob = b"".join(encoded)
                if blob:
                    _pwrite_all(spec.data_fd, blob, spec.text_bytes, spec.data_path)
                _pwrite_all(spec.index_fd, ends.tobytes(), start * INDEX_DTYPE.itemsize, spec.index_path)
                pending_text[leaf.name] = spec.text_bytes + len(blob)
        for name, size in pending_text.items():
            self._strings[name].text_bytes = size

    # ------------------------------------------------------------------ commit
    def _files(self) -> list[tuple[int, Path]]:
        files = [(spec.fd, spec.path) for spec in self._arrays.values()]
        for spec in self._strings.values():
            files.extend(((spec.index_fd, spec.index_path), (spec.data_fd, spec.data_path)))
        return [(fd, path) for fd, path in files if fd != -1]

    def _fds(self) -> list[int]:
        return [fd for fd, _ in self._files()]

    def _fsync_all(self) -> None:
        for fd, path in self._files():
            with naming_os_errors(path):
                os.fsync(fd)

    def _manifest(self, complete: bool) -> dict:
        leaves = {
            name: {"dtype": spec.dtype.str, "shape_per_sample": list(spec.shape), "file": spec.path.name}
            for name, spec in self._arrays.items()
        }
        string_leaves = {
            name: {"index_file": spec.index_path.name, "data_file": spec.data_path.name, "encoding": "utf-8"}
            for name, spec in self._strings.items()
        }
        inline = {}
        if complete:  # the files now hold exactly their content (see tree_inline: one request less each)
            groups = [[(spec.path.name, spec.path)] for spec in self._arrays.values() if spec.row_bytes <= SMALL_ROW]
            groups += [[(spec.index_path.name, spec.index_path), (spec.data_path.name, spec.data_path)]
                       for spec in self._strings.values()]
            inline = encode_inline(groups)
        return {
            **_format.header(_format.TREE, version=TREE_VERSION),
            "num_samples": self._written,
            "complete": complete,
            "expected_samples": self.expected_samples,
            "created_at": self._created_at,
            "structure": self._structure,
            "leaves": leaves,
            "string_leaves": string_leaves,
            "metadata": self._metadata,
            **({INLINE_KEY: inline} if inline else {}),
        }

    def _commit(self, *, complete: bool) -> None:
        self._fsync_all()
        write_json_atomic(self.directory / MANIFEST_NAME, self._manifest(complete))
        self._committed = self._written
        self._last_commit = time.monotonic()

    def flush(self) -> None:
        """Makes every sample written so far durable and visible to new readers."""
        if self._state != "open" or self._structure is None:
            return
        self._commit(complete=False)

    def close(self) -> None:
        """Commits everything, trims the files to their content and closes them. Idempotent.

        After a failed write, the samples written before the failure are kept.
        """
        if self._state == "closed":
            return
        was_open = self._state == "open"
        self._state = "closed"
        try:
            if was_open and self._structure is not None:
                self._fsync_all()
                n = self._written
                for spec in self._arrays.values():
                    os.ftruncate(spec.fd, n * spec.row_bytes)
                for spec in self._strings.values():
                    os.ftruncate(spec.index_fd, n * INDEX_DTYPE.itemsize)
                    os.ftruncate(spec.data_fd, spec.text_bytes)
                self._fsync_all()
                write_json_atomic(self.directory / MANIFEST_NAME, self._manifest(complete=True))
                self._committed = n
        finally:
            for fd in self._fds():
                try:
                    os.close(fd)
                except OSError:
                    pass
            for spec in self._arrays.values():
                spec.fd = -1
            for spec in self._strings.values():
                spec.index_fd = spec.data_fd = -1
            if self._pbar is not None and self._close_pbar:
                self._pbar.close()
        if self._remote is not None:  # only after a successful close: the manifest goes up last
            remote, self._remote = self._remote, None
            remote.finish(last=(MANIFEST_NAME,))

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            if getattr(self, "_state", "closed") == "open":
                for fd in self._fds():
                    os.close(fd)
        except Exception:
            pass

    # ------------------------------------------------------------------- stats
    def get_stats(self) -> dict:
        """Counts and names: samples written, allocation, leaves, and whether the writer is open."""
        return {
            "samples_written": self._written,
            "samples_committed": self._committed,
            "expected_samples": self.expected_samples,
            "allocated_samples": self._capacity,
            "output_directory": str(self.directory),
            "leaves": sorted(self._arrays),
            "string_leaves": sorted(self._strings),
            "is_open": self._state == "open",
        }

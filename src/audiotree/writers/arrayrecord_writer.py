"""``ArrayRecordWriter``: batches of items as sharded ArrayRecord files.

The layout and the record codec are described in
:mod:`audiotree.formats.arrayrecord_codec`; read it back with
:func:`audiotree.sources.open_arrayrecord`. Each item of a written batch
becomes one record; a shard is closed after ``records_per_shard`` records and a
new one opened. The index ``arrayrecord.json`` is written (atomically) only by
:meth:`ArrayRecordWriter.close`, after every shard is closed, so a crashed
writer leaves a folder without an index, which no reader mistakes for data.
"""

from __future__ import annotations

import os
from typing import Any

from audiotree.core import AudioTree
from audiotree.fs import fsync_dir, fsync_path, write_json_atomic
from audiotree.formats.arrayrecord_codec import INDEX_NAME, SHARD_PATTERN, WRITER_OPTIONS, encode_items, index_document
from audiotree.validation import is_int
from audiotree.writers.writer_options import refuse_existing

__all__ = ["ArrayRecordWriter"]


class ArrayRecordWriter:
    """Writes batched pytrees (e.g. ``AudioTree`` batches) as ArrayRecord shards plus an index.

    Args:
      directory: output folder (created). It must not hold an index already
        unless ``exist_ok``, which replaces the dataset in it.
      records_per_shard: records per ``items-NNNNN.array_record`` file; hosts
        read whole shards, so keep at least one shard per reading host.
      metadata: JSON-serialisable dict stored in the index.
      storage_options: fsspec options when ``directory`` is a URL (``s3://``,
        ``gs://``, ...): the output is staged in a local folder and uploaded on
        :meth:`close`, the index last (see :mod:`audiotree.writers.remote`).

    Determinism: the same items written in the same order give byte-identical
    files, however they were batched.

    >>> import numpy as np, tempfile
    >>> from audiotree import AudioTree
    >>> from audiotree.sources import open_arrayrecord
    >>> folder = tempfile.mkdtemp()
    >>> with ArrayRecordWriter(folder, records_per_shard=2) as writer:
    ...     writer.write(AudioTree.create(np.ones((3, 1, 8), np.float32), 8_000))
    3
    >>> ds = open_arrayrecord(folder)
    >>> len(ds), ds[2].waveform.shape
    (3, (1, 1, 8))
    """

    def __init__(self, directory: str | os.PathLike, *, records_per_shard: int = 1000, exist_ok: bool = False,
                 metadata: dict | None = None, storage_options: dict | None = None):
        if not is_int(records_per_shard) or records_per_shard < 1:
            raise ValueError(f"records_per_shard must be a positive int, got {records_per_shard!r}.")
        from audiotree.writers.remote import staged

        # A URL (s3://, gs://, ...) is written in a local staging folder and uploaded on close.
        self.directory, self._remote = staged(directory, storage_options=storage_options, markers=(INDEX_NAME,),
                                              exist_ok=exist_ok, what="an ArrayRecord dataset")
        self.records_per_shard = int(records_per_shard)
        self.metadata = dict(metadata or {})
        index = self.directory / INDEX_NAME
        held = index.exists()
        refuse_existing(self.directory, "an ArrayRecord dataset", [INDEX_NAME] if held else [], exist_ok=exist_ok)
        self.directory.mkdir(parents=True, exist_ok=True)
        if held:
            index.unlink()
        self._shards: list[tuple[str, int]] = []
        self._writer: Any = None
        self._in_shard = 0
        self._closed = False

    def __enter__(self) -> "ArrayRecordWriter":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _open_shard(self) -> None:
        from array_record.python.array_record_module import ArrayRecordWriter as _Writer

        name = SHARD_PATTERN.format(len(self._shards))
        self._writer = _Writer(os.fspath(self.directory / name), WRITER_OPTIONS)
        self._shards.append((name, 0))
        self._in_shard = 0

    def _close_shard(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            name, _ = self._shards[-1]
            self._shards[-1] = (name, self._in_shard)

    def write(self, batch: Any) -> int:
        """Appends every item of ``batch``; returns how many."""
        if self._closed:
            raise RuntimeError(f"The ArrayRecordWriter for {self.directory} is closed.")
        records = encode_items(batch, tree_class=AudioTree)
        for record in records:
            if self._writer is None or self._in_shard >= self.records_per_shard:
                self._close_shard()
                self._open_shard()
            self._writer.write(record)
            self._in_shard += 1
        return len(records)

    @property
    def num_records(self) -> int:
        return sum(n for _, n in self._shards[:-1]) + (self._in_shard if self._shards else 0)

    def close(self) -> None:
        """Closes the open shard and commits the index (idempotent)."""
        if self._closed:
            return
        self._close_shard()
        for name, _ in self._shards:  # the shards' bytes are durable before the index names them
            fsync_path(self.directory / name)
        fsync_dir(self.directory)
        write_json_atomic(self.directory / INDEX_NAME, index_document(self._shards, self.metadata))
        self._closed = True
        if self._remote is not None:  # the index goes up after the shards it names
            remote, self._remote = self._remote, None
            remote.finish(last=(INDEX_NAME,))

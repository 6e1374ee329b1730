"""Rendering a contiguous range of a dataset's items into one part folder.

``audiotree render`` splits a dataset's items into parts of ``part_size``.
Run locally, one stream writes part after part. With an executor
(``--executor process|ray``) each part is one task, :class:`RenderRange`:

1. it rebuilds the dataset from a picklable factory (the pipeline is
   deterministic by index, so item ``i`` is the same in every process);
2. it writes items ``[start, stop)`` into a *fresh* folder of its own under the
   staging folder (:func:`audiotree.parallel.staging.attempt_dir`), never into
   the render itself;
3. it returns that folder's name and the count of items written.

The driver then adopts a finished attempt by renaming it to ``part-NNNNN``
and recording it in ``render.json``. Before writing, a task checks that it sees
the driver's staging folder (a token the driver wrote there) and fails with an
error saying that ``out`` must be shared when it does not (a node with its own
disk). With ``upload_to`` (a URL render) the task instead writes into a
temporary folder on its own node and uploads the finished part itself to
``upload_to/part-NNNNN``, its manifest or index last; the driver records it
after the task returned, so a reader never sees a record naming a part that
is not there. A task whose worker died is re-run into a
new attempt folder, and the dead attempt's folder is never adopted (the driver
removes the staging folder at the end), so no item is written twice or lost.
The written bytes equal the local render's: rows are written in item order
whatever the batching.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from audiotree.parallel.staging import attempt_dir

__all__ = ["FORMATS", "COMMIT_FILES", "RenderRange", "batch_in_order", "open_part_writer", "part_files"]

#: The render formats: ``open_part_writer`` is the one place that maps each to its writer.
FORMATS = ("tree", "audio", "arrayrecord", "webdataset")
#: The files that make a part's dataset visible (manifest or index): uploaded after its data.
COMMIT_FILES = ("manifest.json", "manifest.npz", "arrayrecord.json")


def batch_in_order(items: list) -> tuple[list[bool], Any]:
    """Batches the items that exist; the mask says which positions held one (dropped items are None)."""
    from audiotree.core import AudioTree

    present = [item is not None for item in items]
    kept = [item for item in items if item is not None]
    return present, (AudioTree.batch(kept) if kept else None)


def open_part_writer(fmt: str, directory: Path, expected: int):
    """The writer of one part: ``write(batch)`` then ``close()``."""
    if fmt == "audio":
        from audiotree.writers import AudioWriter

        return AudioWriter(directory, pattern="audio_{index:06d}.wav", exist_ok=True)
    if fmt == "arrayrecord":
        from audiotree.writers import ArrayRecordWriter

        return ArrayRecordWriter(directory, records_per_shard=max(1, expected), exist_ok=True)
    if fmt == "webdataset":
        from audiotree.writers.webdataset import WebDatasetWriter

        return WebDatasetWriter(directory, items_per_shard=max(1, expected), exist_ok=True)
    if fmt == "tree":
        from audiotree.writers import TreeWriter

        return TreeWriter(directory, expected_samples=expected, exist_ok=True).open()
    raise ValueError(f"Unknown render format {fmt!r}; use one of {FORMATS}.")


def part_files(fmt: str, directory: Path) -> dict:
    """What the render record says of a finished part beyond its items: ``{}``, or for ``arrayrecord`` its shards.

    An ArrayRecord part's entry gets ``"shards": [{"file", "num_records",
    "bytes", "sha256"}]`` (from its index; size and SHA-256 of each shard file).
    Why: a reader of a remote render stages whole shards (ArrayRecord opens
    local files only); with these it needs no request for the part's index nor
    for the shard's version, names the cache entry by content, and checks
    what it downloaded (a truncated or replaced shard is an error naming it).
    """
    if fmt != "arrayrecord":
        return {}
    import hashlib
    import json

    from audiotree.formats.arrayrecord_codec import INDEX_NAME, check_index

    index = Path(directory) / INDEX_NAME
    shards, _ = check_index(json.loads(index.read_text(encoding="utf-8")), str(index))
    entries = []
    for name, count in shards:
        digest = hashlib.sha256()
        with open(Path(directory) / name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        entries.append({"file": name, "num_records": int(count), "bytes": (Path(directory) / name).stat().st_size,
                        "sha256": digest.hexdigest()})
    return {"shards": entries}


@dataclasses.dataclass(frozen=True)
class RenderRange:
    """A task: render items ``[start, stop)`` of ``make_dataset()`` into an attempt folder under ``staging``.

    Called with ``(start, stop)``; returns ``{"staged": folder name or None
    (no item survived), "count": items written, "start", "stop", "files":
    what the record keeps of the part (:func:`part_files`)}``.
    """

    make_dataset: Callable[[], Any]
    fmt: str
    staging: str
    batch_size: int = 32
    #: The token the driver wrote in ``staging/.visible`` (checked before writing), if any.
    visible: str | None = None
    #: A URL render's folder: upload the finished part to ``upload_to/<name>`` (bounds carry the name).
    upload_to: str | None = None
    storage_options: dict | None = None

    def _check_staging(self) -> None:
        import socket

        marker = Path(self.staging) / ".visible"
        try:
            seen = marker.read_text(encoding="utf-8")
        except OSError:
            seen = None
        if seen != self.visible:
            raise RuntimeError(
                f"The render folder {Path(self.staging).parent} is not the driver's on this worker's node "
                f"({socket.gethostname()}): {marker} is {'missing' if seen is None else 'another folder'}. With an "
                "executor, a path --out must be on storage every node shares (NFS, a mounted bucket); or give a URL "
                "(s3://...), and each task uploads its own part."
            )
        probe = Path(self.staging) / f".probe-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise RuntimeError(f"The render folder {Path(self.staging).parent} is not writable from this worker's "
                               f"node ({socket.gethostname()}): {exc}.") from None

    def __call__(self, bounds: tuple) -> dict:
        start, stop = int(bounds[0]), int(bounds[1])
        name = bounds[2] if len(bounds) > 2 else f"part-{start:012d}"
        if self.upload_to is not None:
            local = Path(tempfile.mkdtemp(prefix="audiotree-part-"))  # on this task's own node
            try:
                result = self._write(start, stop, local / name)
                if result["staged"] is not None:
                    from audiotree.writers.remote import upload_folder

                    upload_folder(local / name, f"{self.upload_to.rstrip('/')}/{name}", last=COMMIT_FILES,
                                  storage_options=self.storage_options)
                    result["staged"] = name
                return result
            finally:
                shutil.rmtree(local, ignore_errors=True)
        if self.visible is not None:
            self._check_staging()
        return self._write(start, stop, attempt_dir(self.staging, f"part-{start:012d}"))

    def _write(self, start: int, stop: int, directory: Path) -> dict:
        import grain

        ds = self.make_dataset()
        # Dropped items stay in the stream as None, so positions follow dataset indices.
        stream = ds[start:stop].to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0),
                                                allow_nones=True).batch(self.batch_size, batch_fn=batch_in_order)
        writer = None
        count = 0
        try:
            for present, batch in stream:
                if batch is None:
                    continue
                if writer is None:
                    writer = open_part_writer(self.fmt, directory, stop - start)
                writer.write(batch)
                count += sum(present)
            if writer is not None:
                writer.close()
        except BaseException:
            if writer is not None:
                shutil.rmtree(directory, ignore_errors=True)
            raise
        files = part_files(self.fmt, directory) if writer is not None else {}
        return {"staged": directory.name if writer is not None else None, "count": count, "start": start, "stop": stop,
                "files": files}

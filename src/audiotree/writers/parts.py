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
and recording it in ``render.json``. A task whose worker died is re-run into a
new attempt folder, and the dead attempt's folder is never adopted (the driver
removes the staging folder at the end), so no item is written twice or lost.
The written bytes equal the local render's: rows are written in item order
whatever the batching.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any, Callable

from audiotree.parallel.staging import attempt_dir

__all__ = ["FORMATS", "RenderRange", "batch_in_order", "open_part_writer"]

FORMATS = ("tree", "audio", "arrayrecord", "webdataset")


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


@dataclasses.dataclass(frozen=True)
class RenderRange:
    """A task: render items ``[start, stop)`` of ``make_dataset()`` into an attempt folder under ``staging``.

    Called with ``(start, stop)``; returns ``{"staged": folder name or None
    (no item survived), "count": items written, "start", "stop"}``.
    """

    make_dataset: Callable[[], Any]
    fmt: str
    staging: str
    batch_size: int = 32

    def __call__(self, bounds: tuple[int, int]) -> dict:
        import grain

        start, stop = int(bounds[0]), int(bounds[1])
        ds = self.make_dataset()
        # Dropped items stay in the stream as None, so positions follow dataset indices.
        stream = ds[start:stop].to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0),
                                                allow_nones=True).batch(self.batch_size, batch_fn=batch_in_order)
        directory = attempt_dir(self.staging, f"part-{start:012d}")
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
        return {"staged": directory.name if writer is not None else None, "count": count, "start": start, "stop": stop}

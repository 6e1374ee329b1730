"""``audiotree.render``: pre-render a dataset's items into parts, resumably, locally or on an executor.

The layout of ``out`` is :mod:`audiotree.formats.render_record`. Parts split the
dataset's items at multiples of ``part_size``. A part is recorded in
``render.json`` (replaced atomically) only after its writer closed it, so after
an interruption a re-run with the same arguments keeps every recorded part,
rewrites the part that was in progress, and continues from there: the dataset
is deterministic, so item ``i`` is the same in every run. Asking for more items
later extends the render the same way.

Where the bytes go
    * a local ``out`` without an executor: parts are written in place;
    * ``executor="process"|"ray"`` and a path ``out``: each part is a task
      (:class:`audiotree.writers.parts.RenderRange`) writing into
      ``out/.staging/``; the driver renames finished parts into place in item
      order. ``out`` must be on storage every worker sees (for Ray across
      nodes: a shared file system): every task checks that it sees the
      driver's staging folder and can write there, and fails with an error
      saying so when it cannot;
    * a URL ``out`` (``s3://bucket/render``): without an executor the driver
      uploads each finished part, then the record; with an executor **each
      task uploads its own part** from a temporary folder on its own node,
      and the driver commits the record once the part exists. No part passes
      through the driver's disk, and nodes need no shared disk.

Either way the render is the same, byte for byte, as a local one (TreeWriter
manifests differ only in ``created_at``). Read it with
:func:`audiotree.sources.open_render`.

>>> import tempfile, grain, numpy as np
>>> from audiotree import AudioTree
>>> items = grain.MapDataset.range(5).map(lambda i: AudioTree.create(np.full((1, 1, 4), i, np.float32), 8000))
>>> out = tempfile.mkdtemp()
>>> render(items, out, 5, part_size=2).parts
3
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from audiotree.fs import fsync_dir
from audiotree.limits import MAX_ITEMS
from audiotree.formats.render_record import PART, RECORD, new_record, read_record, write_record
from audiotree.io import storage
from audiotree.validation import is_int
from audiotree.writers.parts import FORMATS, RenderRange, batch_in_order, open_part_writer, part_files

__all__ = ["render", "RenderResult", "STAGING"]

#: The folder under a path ``out`` where executor tasks write their attempts.
STAGING = ".staging"
_VISIBLE = ".visible"


@dataclasses.dataclass(frozen=True)
class RenderResult:
    """What a :func:`render` call did: ``rendered`` items this call, ``written`` in ``parts`` parts in all."""

    out: str
    format: str
    total: int
    resumed_from: int
    rendered: int
    written: int
    parts: int
    seconds: float


def _identity(dataset: Any) -> Any:
    return dataset


class _Record:
    """The render record of ``out``: read, written and (for a URL ``out``) published."""

    def __init__(self, out: Path, remote: Any = None) -> None:
        self.out, self.remote = out, remote

    def write(self, record: dict) -> None:
        write_record(self.out, record)
        if self.remote is not None:  # upload the finished parts (driver-written ones), then the record
            self.remote.publish_render(record, RECORD)

    def prepare(self, config: dict, overwrite: bool) -> dict:
        """The record to continue (or a new one); refuses folders holding something else."""
        out = self.out
        record = read_record(out) if (out / RECORD).exists() and not overwrite else None
        if record is not None:
            self._check_parts(record)
        if record is not None and record.get("config") != config:
            old = record.get("config") or {}
            changed = sorted(k for k in set(config) | set(old) if config.get(k) != old.get(k))
            raise ValueError(f"{self.where} holds a render made with other settings ({', '.join(changed)} differ); "
                             "re-run with the same arguments to resume, or pass overwrite=True (--overwrite).")
        if out.exists():
            # ``.render.json.*`` are temporary records left by an interrupted write.
            strays = [p.name for p in out.iterdir()
                      if p.name != RECORD and not p.name.startswith((f".{RECORD}.", "part-"))]
            if strays and not (out / RECORD).exists():
                raise FileExistsError(f"{self.where} is not empty ({', '.join(sorted(strays)[:3])}) and holds no "
                                      "audiotree render; choose a new folder.")
            recorded = {part["dir"] for part in record["parts"]} if record is not None else set()
            for part in out.glob("part-*"):  # an unfinished part, or everything with overwrite
                if part.is_dir() and part.name not in recorded:
                    shutil.rmtree(part)
            shutil.rmtree(out / STAGING, ignore_errors=True)  # attempts of an interrupted executor run
        if record is not None:
            return record
        out.mkdir(parents=True, exist_ok=True)
        record = new_record(config)
        self.write(record)
        return record

    def _check_parts(self, record: dict) -> None:
        """Refuses to resume a render whose record names a part the folder lacks (before anything is touched).

        Why: resuming would start after the last recorded part and mark the
        render complete with a hole in it.
        """
        names = [part["dir"] for part in record["parts"] if part.get("count")]
        if self.remote is not None:
            present = self.remote.names()
        else:
            present = {p.name for p in self.out.iterdir() if p.is_dir()} if names else set()
        missing = [name for name in names if name not in present]
        if missing:
            raise FileNotFoundError(
                f"{self.where}/{RECORD} names the finished part(s) {', '.join(missing[:3])}, but {self.where} lacks "
                f"{'them' if len(missing) > 1 else 'it'}; nothing was changed. Put the part(s) back, or render "
                "everything again with overwrite=True (--overwrite).")

    @property
    def where(self) -> str:
        return storage.redact(self.remote.url) if self.remote is not None else str(self.out)


def render(
    dataset: Any,
    out: str | os.PathLike,
    num_items: int | None = None,
    *,
    format: str = "tree",
    part_size: int = 1000,
    batch_size: int = 32,
    workers: int = 0,
    executor: Any = None,
    ray_address: str | None = None,
    overwrite: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], Any] | None = None,
    log: Callable[[str], Any] | None = None,
) -> RenderResult:
    """Renders items ``[0, num_items)`` of ``dataset`` into ``out``, resuming what an earlier run recorded.

    Args:
      dataset: a ``grain.MapDataset`` of ``AudioTree`` items (``None`` items,
        dropped by ``on_read_error``, are left out), or a picklable zero-argument
        factory returning one (what executor tasks call; a dataset is pickled
        into each task instead).
      out: a folder, or a URL such as ``s3://bucket/render`` (see the module
        docstring for where each part is written).
      num_items: how many items (default ``len(dataset)``: one pass over a
        finite dataset).
      format: one of :data:`audiotree.writers.parts.FORMATS` (``"tree"``,
        ``"audio"``, ``"arrayrecord"``, ...).
      part_size: items per part; an interruption loses at most the parts in progress.
      batch_size: items per write.
      workers: ``mp_prefetch`` worker processes (local render only).
      executor: ``None`` (this process), ``"process"``, ``"ray"`` or a runner
        (see :func:`audiotree.parallel.open_executor`): each part is a task.
      ray_address: the Ray cluster to join (``executor="ray"``).
      overwrite: delete a previous render in ``out`` first.
      storage_options: filesystem options for a URL ``out``.
      config: what identifies the render (the CLI passes its sources and
        pipeline); a re-run with a different one is refused rather than
        mixed. ``format`` and ``part_size`` are always part of it.
      progress: ``progress(completed, total)`` as items finish.
      log: called with one-line messages (resuming, nothing to do).

    Returns a :class:`RenderResult`. Raises ``ValueError`` for bad arguments
    or a render in ``out`` made with other settings, ``FileExistsError`` for a
    folder holding something else.
    """
    if format not in FORMATS:
        raise ValueError(f"Unknown render format {format!r}; use one of {', '.join(FORMATS)}.")
    for name, value, low in (("part_size", part_size, 1), ("batch_size", batch_size, 1), ("workers", workers, 0)):
        if not is_int(value) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}.")
    if executor is not None and workers:
        raise ValueError("workers= (mp_prefetch) and executor= are alternatives; give one.")
    import grain

    if isinstance(dataset, grain.MapDataset) or not callable(dataset):
        make_dataset = functools.partial(_identity, dataset)
    else:
        make_dataset = dataset
    ds = make_dataset() if executor is None or num_items is None else None
    if num_items is None:
        num_items = len(ds)
        if num_items >= MAX_ITEMS:
            raise ValueError(f"The dataset has no end (len {num_items}); give num_items=.")
    if not is_int(num_items) or num_items < 1:
        raise ValueError(f"num_items must be a positive int, got {num_items!r}.")
    record_config = {"format": format, "part_size": int(part_size), **dict(config or {})}
    job = _Job(make_dataset=make_dataset, ds=ds, total=num_items, fmt=format, part_size=part_size,
               batch_size=batch_size, workers=workers, executor=executor, ray_address=ray_address,
               progress=progress, log=log or (lambda message: None))
    location = os.fspath(out)
    if not storage.is_url(location):
        return job.run(_Record(Path(location)), record_config, overwrite)
    from audiotree.writers.remote import RemoteOutput

    with RemoteOutput(location, storage_options=storage_options) as remote:
        if overwrite:
            remote.clear_render(RECORD)
        else:
            remote.pull(RECORD)
        return job.run(_Record(remote.local, remote), record_config, overwrite)


def _part_bounds(start: int, total: int, part_size: int) -> list[tuple[int, int]]:
    """The parts still to render: split at multiples of ``part_size``."""
    bounds = []
    while start < total:
        stop = min((start // part_size + 1) * part_size, total)
        bounds.append((start, stop))
        start = stop
    return bounds


@dataclasses.dataclass
class _Job:
    make_dataset: Callable[[], Any]
    ds: Any
    total: int
    fmt: str
    part_size: int
    batch_size: int
    workers: int
    executor: Any
    ray_address: str | None
    progress: Callable[[int, int], Any] | None
    log: Callable[[str], Any]

    def run(self, rec: _Record, config: dict, overwrite: bool) -> RenderResult:
        record = rec.prepare(config, overwrite)
        parts = record["parts"]
        start = parts[-1]["stop"] if parts else 0
        started = time.perf_counter()
        if start >= self.total:
            written = sum(p["count"] for p in parts)
            self.log(f"Nothing to do: {rec.where} already holds items 0..{start - 1} ({written} written) "
                     f"in {len(parts)} part(s).")
            record.update(total=max(record.get("total") or 0, self.total), complete=True)
            rec.write(record)
            rendered = 0
        else:
            if start:
                self.log(f"Resuming at item {start} of {self.total} ({len(parts)} finished part(s) kept).")
            record.update(total=self.total, complete=False)
            if self.executor is not None:
                rendered = self._on_executor(rec, record, start)
            else:
                rendered = self._here(rec, record, start)
            record["complete"] = True
            rec.write(record)
        return RenderResult(out=rec.where, format=self.fmt, total=self.total, resumed_from=start, rendered=rendered,
                            written=sum(p["count"] for p in parts), parts=len(parts),
                            seconds=time.perf_counter() - started)

    def _tick(self, completed: int) -> None:
        if self.progress is not None:
            self.progress(completed, self.total)

    def _here(self, rec: _Record, record: dict, start: int) -> int:
        import grain

        out, parts, total, part_size = rec.out, record["parts"], self.total, self.part_size
        ds = self.ds if self.ds is not None else self.make_dataset()
        # Dropped items stay in the stream as None, and mp_prefetch reads its workers round-robin, so the
        # k-th element is dataset item start + k, whatever the worker count: parts follow dataset indices.
        stream = ds[start:total].to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0),
                                                 allow_nones=True)
        if self.workers:
            stream = stream.mp_prefetch(grain.MultiprocessingOptions(num_workers=self.workers))
        stream = stream.batch(self.batch_size, batch_fn=batch_in_order)
        state = {"writer": None, "count": 0, "start": start, "stop": min((start // part_size + 1) * part_size, total)}
        rendered = 0

        def part_dir() -> Path:
            return out / PART.format(len(parts))

        def close_part() -> None:
            # Recorded only once its writer has closed it: a finished part is never rewritten.
            files = {}
            if state["writer"] is not None:
                state["writer"].close()
                files = part_files(self.fmt, part_dir())
            parts.append({"dir": part_dir().name, "start": state["start"], "stop": state["stop"],
                          "count": state["count"], **files})
            rec.write(record)
            state.update(writer=None, count=0, start=state["stop"], stop=min(state["stop"] + part_size, total))

        iterator = iter(stream)
        try:
            position = start
            for present, batch in iterator:
                indices = [position + k for k, ok in enumerate(present) if ok]
                position += len(present)
                offset = 0
                while offset < len(indices):
                    while indices[offset] >= state["stop"]:
                        close_part()
                    end = offset
                    while end < len(indices) and indices[end] < state["stop"]:
                        end += 1
                    if state["writer"] is None:
                        directory = part_dir()
                        if directory.exists():  # left unfinished by an interruption
                            shutil.rmtree(directory)
                        state["writer"] = open_part_writer(self.fmt, directory, state["stop"] - state["start"])
                    state["writer"].write(batch if (offset, end) == (0, len(indices)) else batch[offset:end])
                    state["count"] += end - offset
                    rendered += end - offset
                    offset = end
                self._tick(position)
            state["stop"] = total  # items dropped at the end (on_read_error) belong to the last part
            close_part()
            self._tick(total)
        finally:
            if state["writer"] is not None:  # interrupted: the unfinished part stays out of the record
                try:
                    state["writer"].close()
                except Exception:  # noqa: BLE001 - the original error matters more
                    pass
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
            del iterator
            gc.collect()
        return rendered

    def _on_executor(self, rec: _Record, record: dict, start: int) -> int:
        """Renders the remaining parts as tasks; commits each finished one in item order. Returns items written."""
        from audiotree.parallel import map_chunks, open_executor
        from audiotree.parallel.staging import InOrder

        out, parts = rec.out, record["parts"]
        first = len(parts)
        bounds = _part_bounds(start, self.total, self.part_size)
        chunks = [(a, b, PART.format(first + k)) for k, (a, b) in enumerate(bounds)]
        rendered = [0]
        completed = [start]
        if rec.remote is not None:
            # Each task uploads its own part from its own node; nothing is staged here.
            task = RenderRange(make_dataset=self.make_dataset, fmt=self.fmt, staging="", batch_size=self.batch_size,
                               upload_to=rec.remote.url, storage_options=rec.remote.storage_options or None)
            staging = None
        else:
            staging = out / STAGING
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            token = secrets.token_hex(8)
            (staging / _VISIBLE).write_text(token, encoding="utf-8")
            task = RenderRange(make_dataset=self.make_dataset, fmt=self.fmt, staging=os.path.abspath(staging),
                               batch_size=self.batch_size, visible=token)

        def adopt(index: int, done: dict) -> None:
            # Called in item order (InOrder): the record only ever grows by the next part, so an
            # interrupted run resumes exactly like a local one.
            name = PART.format(len(parts))
            if staging is not None and done["staged"] is not None:
                os.replace(staging / done["staged"], out / name)
                fsync_dir(out)
            parts.append({"dir": name, "start": done["start"], "stop": done["stop"], "count": done["count"],
                          **(done.get("files") or {})})
            rec.write(record)
            rendered[0] += done["count"]

        def advance(count: int) -> None:
            completed[0] += count
            self._tick(completed[0])

        with open_executor(self.executor, ray_address=self.ray_address) as runner:
            map_chunks(task, chunks, executor=runner, on_result=InOrder(adopt), sizes=[b - a for a, b in bounds],
                       progress=advance)
        if staging is not None:
            shutil.rmtree(staging)  # attempts of tasks whose worker died were never adopted
        return rendered[0]

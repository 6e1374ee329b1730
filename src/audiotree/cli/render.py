"""``audiotree render``: pre-render excerpts to a TreeWriter or AudioWriter dataset, resumably.

The layout of ``OUT`` is :mod:`audiotree.formats.render`. Parts split the dataset's items at multiples of ``part_size``. A part is recorded in
``render.json`` (replaced atomically) only after its writer closed it, so after
an interruption a re-run with the same arguments keeps every recorded part,
rewrites the part that was in progress, and continues from there: the dataset is
deterministic, so item ``i`` is the same in every run. Asking for more items
later (a larger ``-n``) extends the render the same way.

With ``--executor process|ray`` every part is a task of its own
(:class:`audiotree.writers.parts.RenderRange`) writing into ``.staging/``; the
driver adopts finished parts in item order (rename, then record), so the render
is the same, byte for byte, as a local one (TreeWriter manifests differ only in
``created_at``), and resumes the same way.

Read a render back with :func:`audiotree.sources.open_render` (one
``grain.MapDataset`` over the parts, in order).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import os
import shutil
import time
from pathlib import Path

import click

from audiotree._fs import fsync_dir
from audiotree.io import storage
from audiotree.cli._common import (
    CliError,
    build_dataset,
    executor_options,
    open_executor,
    pipeline_options,
    progress_bar,
    resolve_sources,
    sources_argument,
    stderr_console,
    stdout_console,
)
from audiotree.formats.render import PART, RECORD, new_record, read_record, write_record

_STAGING = ".staging"


def _write_record(out: Path, record: dict) -> None:
    write_record(out, record)
    if out in _REMOTE:  # --out is a URL: upload the finished parts, then the record
        _REMOTE[out].publish_render(record, RECORD)


# Staging folder -> its RemoteOutput, while a render to a URL runs (see audiotree.writers.remote).
_REMOTE: dict = {}


def _read_record(out: Path) -> dict | None:
    try:
        return read_record(out)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _prepare_out(out: Path, config: dict, overwrite: bool) -> dict:
    """The render record to continue (or a new one); refuses folders holding something else."""
    record = _read_record(out) if (out / RECORD).exists() and not overwrite else None
    if record is not None and record.get("config") != config:
        old = record.get("config") or {}
        changed = sorted(k for k in set(config) | set(old) if config.get(k) != old.get(k))
        raise CliError(f"{out} holds a render made with other settings ({', '.join(changed)} differ); "
                       "re-run with the same arguments to resume, or pass --overwrite.")
    if out.exists():
        # ``.render.json.*`` are temporary records left by an interrupted write.
        strays = [p.name for p in out.iterdir() if p.name != RECORD and not p.name.startswith((f".{RECORD}.", "part-"))]
        if strays and not (out / RECORD).exists():
            raise CliError(f"{out} is not empty ({', '.join(sorted(strays)[:3])}) and holds no audiotree render; "
                           "choose a new folder.")
        recorded = {part["dir"] for part in record["parts"]} if record is not None else set()
        for part in out.glob("part-*"):  # an unfinished part, or everything with --overwrite
            if part.is_dir() and part.name not in recorded:
                shutil.rmtree(part)
        shutil.rmtree(out / _STAGING, ignore_errors=True)  # attempts of an interrupted --executor run
    if record is not None:
        return record
    out.mkdir(parents=True, exist_ok=True)
    record = new_record(config)
    _write_record(out, record)
    return record


@click.command(short_help="Pre-render excerpts to a dataset on disk, resumably.")
@sources_argument
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="Folder of the rendered dataset, or a URL such as s3://bucket/render (created; re-run to resume).")
@click.option("-n", "--num-items", "n", type=click.IntRange(min=1), default=None, help="How many excerpts to render.")
@click.option("--epoch", is_flag=True, help="Render one epoch (every file once; num_epochs=1) instead of -n items.")
@click.option("--format", "fmt", type=click.Choice(["tree", "audio", "arrayrecord", "webdataset"]), default="tree",
              show_default=True,
              help="tree: TreeWriter (memory-mappable arrays); audio: AudioWriter (WAV files + manifest); "
                   "arrayrecord: ArrayRecord shards (one per part) for grain.sources.ArrayRecordDataSource; "
                   "webdataset: tar shards of FLAC + JSON members (one per part), for webdataset or audiotree's "
                   "tar sources.")
@click.option("--workers", type=click.IntRange(min=0), default=0, show_default=True,
              help="mp_prefetch worker processes rendering in parallel.")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True,
              help="Items per write.")
@click.option("--part-size", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Items per part; an interruption loses at most the part in progress.")
@click.option("--overwrite", is_flag=True, help="Delete a previous render in --out and start again.")
@executor_options
@pipeline_options()
def render(sources, out_dir: Path, n: int | None, epoch: bool, fmt: str, workers: int, batch_size: int, part_size: int,
           overwrite: bool, executor: str | None, ray_address: str | None, pipeline) -> None:
    """Pre-render N excerpts (or one --epoch) of the pipeline to a dataset on disk.

    \b
    Resumable: re-run the same command after an interruption and it continues
    from the last finished part (item i of the pipeline is the same in every
    run). With --executor each part is a task (on every core, or on a Ray
    cluster; OUT must then be on storage every node sees) and the result is the
    same. Read it with audiotree.sources.open_render(OUT).
    """
    if (n is None) == (not epoch):
        raise click.UsageError("give either -n N (items) or --epoch (one pass over the files).")
    if ray_address is not None and executor != "ray":
        raise click.UsageError("--ray-address needs --executor ray.")
    if executor is not None and workers:
        raise click.UsageError("--workers (mp_prefetch) and --executor are alternatives; give one.")
    parsed = resolve_sources(sources, pipeline)
    config = {
        "format": fmt,
        "part_size": part_size,
        "epoch": epoch,
        "sources": {name: [p if storage.is_url(p) else os.path.abspath(os.path.expanduser(p)) for p in paths]
                    for name, paths in (parsed.groups.items() if parsed.balanced else [("", parsed.pool)])},
        "pipeline": dataclasses.asdict(pipeline),
    }
    ds = build_dataset(parsed, pipeline, num_epochs=1 if epoch else None)
    total = len(ds) if epoch else n
    if not storage.is_url(out_dir):
        return _render(ds, total, parsed, pipeline, Path(out_dir), config, n, epoch, fmt, workers, batch_size,
                       part_size, overwrite, executor, ray_address)
    from audiotree.writers.remote import RemoteOutput

    with RemoteOutput(out_dir) as remote:
        if overwrite:
            remote.clear_render(RECORD)
        else:
            remote.pull(RECORD)
        _REMOTE[remote.local] = remote
        try:
            _render(ds, total, parsed, pipeline, remote.local, config, n, epoch, fmt, workers, batch_size, part_size,
                    overwrite, executor, ray_address)
        finally:
            del _REMOTE[remote.local]


def _render(ds, total, parsed, pipeline, out_dir: Path, config, n, epoch, fmt, workers, batch_size, part_size,
            overwrite, executor, ray_address) -> None:
    record = _prepare_out(out_dir, config, overwrite)
    parts = record["parts"]
    start = parts[-1]["stop"] if parts else 0
    console = stdout_console()
    if start >= total:
        written = sum(p["count"] for p in parts)
        console.print(f"Nothing to do: {out_dir} already holds items 0..{start - 1} ({written} written) "
                      f"in {len(parts)} part(s).")
        record.update(total=max(record.get("total") or 0, total), complete=True)
        _write_record(out_dir, record)
        return
    if start:
        console.print(f"Resuming at item {start} of {total} ({len(parts)} finished part(s) kept).")

    if executor is not None:
        started = time.perf_counter()
        make_dataset = functools.partial(build_dataset, parsed, pipeline, num_epochs=1 if epoch else None)
        rendered = _render_on_executor(out_dir, record, make_dataset, fmt=fmt, batch_size=batch_size,
                                       part_size=part_size, start=start, total=total, executor=executor,
                                       ray_address=ray_address)
        _report(console, out_dir, parts, fmt, rendered, time.perf_counter() - started, f"--executor {executor}")
        return

    import grain

    from audiotree.writers.parts import batch_in_order, open_part_writer

    started = time.perf_counter()
    # Dropped items stay in the stream as None, and mp_prefetch reads its workers round-robin, so the
    # k-th element is dataset item start + k, whatever the worker count: parts follow dataset indices.
    pipeline_ds = ds[start:total].to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0),
                                                  allow_nones=True)
    if workers:
        pipeline_ds = pipeline_ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    pipeline_ds = pipeline_ds.batch(batch_size, batch_fn=batch_in_order)

    record.update(total=total, complete=False)
    err = stderr_console()
    state = {"writer": None, "count": 0, "start": start, "stop": min((start // part_size + 1) * part_size, total)}
    rendered = 0

    def part_dir() -> Path:
        return out_dir / PART.format(len(parts))

    def close_part() -> None:
        # Recorded only once its writer has closed it: a finished part is never rewritten.
        if state["writer"] is not None:
            state["writer"].close()
        parts.append({"dir": part_dir().name, "start": state["start"], "stop": state["stop"], "count": state["count"]})
        _write_record(out_dir, record)
        state.update(writer=None, count=0, start=state["stop"], stop=min(state["stop"] + part_size, total))

    iterator = iter(pipeline_ds)
    try:
        with progress_bar(err, transient=False) as progress:
            task = progress.add_task("Rendering", total=total, completed=start)
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
                        state["writer"] = open_part_writer(fmt, directory, state["stop"] - state["start"])
                    state["writer"].write(batch if (offset, end) == (0, len(indices)) else batch[offset:end])
                    state["count"] += end - offset
                    rendered += end - offset
                    offset = end
                progress.update(task, completed=position)
            state["stop"] = total  # items dropped at the end (on_read_error) belong to the last part
            close_part()
            progress.update(task, completed=total)
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

    record["complete"] = True
    _write_record(out_dir, record)
    _report(console, out_dir, parts, fmt, rendered, time.perf_counter() - started, f"{workers} workers")


_WRITER_NAMES = {"tree": "TreeWriter", "audio": "AudioWriter", "arrayrecord": "ArrayRecordWriter",
                 "webdataset": "WebDatasetWriter"}


def _report(console, out_dir: Path, parts: list, fmt: str, rendered: int, elapsed: float, how: str) -> None:
    written = sum(p["count"] for p in parts)
    console.print(f"Rendered {rendered} items in {elapsed:.1f} s ({rendered / max(elapsed, 1e-9):.1f} items/s, "
                  f"{how}); {out_dir} holds {written} items in {len(parts)} part(s) ({_WRITER_NAMES[fmt]}).")


def _part_bounds(start: int, total: int, part_size: int) -> list[tuple[int, int]]:
    """The parts still to render: split at multiples of ``part_size``, like the local render."""
    bounds = []
    while start < total:
        stop = min((start // part_size + 1) * part_size, total)
        bounds.append((start, stop))
        start = stop
    return bounds


def _render_on_executor(out_dir: Path, record: dict, make_dataset, *, fmt: str, batch_size: int, part_size: int,
                        start: int, total: int, executor: str, ray_address: str | None) -> int:
    """Renders the remaining parts as tasks; adopts each finished one in item order. Returns items written."""
    from audiotree.parallel import map_chunks
    from audiotree.parallel.staging import InOrder
    from audiotree.writers.parts import RenderRange

    parts = record["parts"]
    staging = out_dir / _STAGING
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    bounds = _part_bounds(start, total, part_size)
    rendered = [0]
    record.update(total=total, complete=False)

    def adopt(index: int, done: dict) -> None:
        # Called in item order (InOrder): the record only ever grows by the next part, so an
        # interrupted run resumes exactly like a local one.
        name = PART.format(len(parts))
        if done["staged"] is not None:
            os.replace(staging / done["staged"], out_dir / name)
            fsync_dir(out_dir)
        parts.append({"dir": name, "start": done["start"], "stop": done["stop"], "count": done["count"]})
        _write_record(out_dir, record)
        rendered[0] += done["count"]

    task = RenderRange(make_dataset=make_dataset, fmt=fmt, staging=os.path.abspath(staging), batch_size=batch_size)
    with progress_bar(stderr_console(), transient=False) as progress:
        bar = progress.add_task("Rendering", total=total, completed=start)
        with open_executor(executor, ray_address) as runner:
            map_chunks(task, bounds, executor=runner, on_result=InOrder(adopt), sizes=[b - a for a, b in bounds],
                       progress=lambda count: progress.advance(bar, count))
    shutil.rmtree(staging)  # attempts of tasks whose worker died were never adopted
    record["complete"] = True
    _write_record(out_dir, record)
    return rendered[0]

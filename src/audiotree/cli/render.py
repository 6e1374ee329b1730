"""``audiotree render``: pre-render excerpts to a dataset, resumably (the CLI of :func:`audiotree.render`).

The layout of ``OUT`` is :mod:`audiotree.formats.render_record`; the rendering itself
(parts, resuming, executors, object storage) is :mod:`audiotree.writers.render_run`.
This command parses the arguments, builds the pipeline and calls it.

Read a render back with :func:`audiotree.sources.open_render` (one
``grain.MapDataset`` over the parts, in order).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import click

from audiotree.io import storage
from audiotree.cli._common import (
    CliError,
    build_dataset,
    executor_options,
    index_source,
    where_option,
    optional_sources_argument,
    pipeline_options,
    progress_bar,
    resolve_sources,
    stderr_console,
    stdout_console,
)
from audiotree.writers.parts import FORMATS

@click.command(short_help="Pre-render excerpts to a dataset on disk, resumably.")
@optional_sources_argument
@click.option("--index", "index", default=None, metavar="CORPUS.parquet",
              help="Read the files from this corpus index (audiotree index) instead of SOURCES.")
@click.option("--group-by", "group_by", default=None, metavar="LABEL",
              help="With --index: balance over the values of this index label (each value is a group).")
@where_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="Folder of the rendered dataset, or a URL such as s3://bucket/render (created; re-run to resume). "
                   "With --executor ray a folder must be on a file system every node shares; a URL needs none "
                   "(each task uploads its own part).")
@click.option("-n", "--num-items", "n", type=click.IntRange(min=1), default=None, help="How many excerpts to render.")
@click.option("--epoch", is_flag=True, help="Render one epoch (every file once; num_epochs=1) instead of -n items.")
@click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="tree",
              show_default=True,
              help="tree: TreeWriter (memory-mappable arrays); audio: AudioWriter (WAV files + manifest); "
                   "arrayrecord: ArrayRecord shards (one per part) for grain.sources.ArrayRecordDataSource; "
                   "webdataset: tar shards of FLAC + JSON members (one per part), for webdataset or audiotree's "
                   "tar sources.")
@click.option("--workers", type=click.IntRange(min=0), default=0, show_default=True,
              help="mp_prefetch worker processes rendering in parallel.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Items per write [default: 32; 1 with --duration none].")
@click.option("--part-size", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Items per part; an interruption loses at most the part in progress.")
@click.option("--overwrite", is_flag=True, help="Delete a previous render in --out and start again.")
@executor_options
@pipeline_options(whole_files=True)
def render(sources, index, group_by, where, weight_by, out_dir: str, n: int | None, epoch: bool, fmt: str, workers: int,
           batch_size: int | None, part_size: int, overwrite: bool, executor: str | None, ray_address: str | None,
           pipeline) -> None:
    """Pre-render N excerpts (or one --epoch) of the pipeline to a dataset on disk.

    \b
    Resumable: re-run the same command after an interruption and it continues
    from the last finished part (item i of the pipeline is the same in every
    run). With --executor each part is a task (on every core, or on a Ray
    cluster) and the result is the same. --duration none renders whole files
    (utterances; --format audio or arrayrecord, which store each item's own
    length). Read it with audiotree.sources.open_render(OUT). From Python:
    audiotree.render(dataset, OUT, N, ...).
    """
    if (n is None) == (not epoch):
        raise click.UsageError("give either -n N (items) or --epoch (one pass over the files).")
    if ray_address is not None and executor != "ray":
        raise click.UsageError("--ray-address needs --executor ray.")
    if executor is not None and workers:
        raise click.UsageError("--workers (mp_prefetch) and --executor are alternatives; give one.")
    if pipeline.duration is None and fmt == "tree":
        raise click.UsageError("--duration none renders whole files, which differ in length; TreeWriter stores one "
                               "shape per leaf: use --format audio or --format arrayrecord.")
    if batch_size is None:
        batch_size = 1 if pipeline.duration is None else 32
    parsed = index_source(sources, index, group_by, where, weight_by)
    if parsed is None:
        parsed = resolve_sources(sources, pipeline)
        config_sources = {"sources": {
            name: [p if storage.is_url(p) else os.path.abspath(os.path.expanduser(p)) for p in paths]
            for name, paths in (parsed.groups.items() if parsed.balanced else [("", parsed.pool)])}}
    else:
        config_sources = {"index": parsed.index, "group_by": parsed.group_by,
                          **({"where": parsed.where} if parsed.where is not None else {}),
                          **({"weight_by": parsed.weight_by} if parsed.weight_by is not None else {})}
    config = {"epoch": epoch, **config_sources, "pipeline": dataclasses.asdict(pipeline)}
    make_dataset = functools.partial(build_dataset, parsed, pipeline, num_epochs=1 if epoch else None)
    # Built here once (files listed, the index read); executor tasks rebuild it from make_dataset.
    ds = make_dataset() if executor is None or epoch else None
    total = len(ds) if epoch else n
    from audiotree.writers.render_run import render as render_items

    console, err = stdout_console(), stderr_console()
    with progress_bar(err, transient=False) as progress:
        bar = progress.add_task("Rendering", total=total)
        result = render_items(
            ds if executor is None else make_dataset, out_dir, total, format=fmt, part_size=part_size, batch_size=batch_size, workers=workers,
            executor=executor, ray_address=ray_address, overwrite=overwrite, config=config,
            progress=lambda done, of: progress.update(bar, completed=done, total=of), log=console.print)
    if result.rendered or result.resumed_from < result.total:
        how = f"--executor {executor}" if executor is not None else f"{workers} workers"
        console.print(f"Rendered {result.rendered} items in {result.seconds:.1f} s "
                      f"({result.rendered / max(result.seconds, 1e-9):.1f} items/s, {how}); {result.out} holds "
                      f"{result.written} items in {result.parts} part(s) ({_WRITER_NAMES.get(fmt, fmt)}).")


_WRITER_NAMES = {"tree": "TreeWriter", "audio": "AudioWriter", "arrayrecord": "ArrayRecordWriter",
                 "webdataset": "WebDatasetWriter"}

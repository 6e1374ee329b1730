"""``audiotree bench``: the configured pipeline at several worker/thread/buffer settings."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from audiotree.cli._common import (
    CliError,
    build_dataset,
    describe_pipeline,
    describe_sources,
    index_source,
    where_option,
    parse_int_list,
    pipeline_options,
    resolve_sources,
    sources_argument,
    stderr_console,
    stdout_console,
)
from audiotree.cli._mixes import mix_report, mix_table


@click.command(short_help="Measure workers x threads x buffers and name the knee.")
@sources_argument
@click.option("--workers", callback=parse_int_list, default=None, metavar="N,...",
              help="num_workers values [default: 0, 1, powers of two up to the core count, the core count].")
@click.option("--threads", callback=parse_int_list, default="0,2", show_default=True, metavar="N,...",
              help="ReadOptions.num_threads values.")
@click.option("--buffers", callback=parse_int_list, default="1,4", show_default=True, metavar="N,...",
              help="MultiprocessingOptions.per_worker_buffer_size values (in batches).")
@click.option("--read-buffer", type=click.IntRange(min=1), default=None,
              help="ReadOptions.prefetch_buffer_size when threads > 0 [default: 2 x threads].")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--batches", type=click.IntRange(min=1), default=8, show_default=True,
              help="Batches timed per setting (read after the first batch and what the buffers held).")
@click.option("--ram-budget", type=click.FloatRange(min=0, min_open=True), default=None, metavar="MB",
              help="Only settings whose peak RSS stays within this many MB are candidates.")
@click.option("--tolerance", type=click.FloatRange(0, 1, max_open=True), default=0.05, show_default=True,
              help="The knee is the cheapest setting within this fraction of the best items/s.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="PNG",
              help="Also plot items/s and peak RSS against workers, the knee marked, with a caption naming the "
                   "corpus, the pipeline and the machine (needs matplotlib).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of a table.")
@click.option("--group-by", "group_by", default=None, metavar="LABEL",
              help="With a corpus index as SOURCES (CORPUS.parquet, as for scan): balance over this label's values.")
@where_option
@pipeline_options()
def bench(sources, workers, threads, buffers, read_buffer, batch_size, batches, ram_budget, tolerance, plot, as_json,
          group_by, where, weight_by, pipeline) -> None:
    """Measure items/s, time to first batch and peak memory per setting, and name the knee.

    \b
    Every combination of --workers x --threads x --buffers reads --batches
    batches of the pipeline configured by the other options. The knee is the
    smallest setting within --tolerance of the best throughput. The same tuner
    is available from Python: audiotree.tuning.tune(ds, ...).
    """
    if plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CliError("--plot needs matplotlib, which audiotree depends on but which cannot be imported; "
                           "reinstall it: pip install audiotree.") from None
    parsed = index_source(sources, None, group_by, where, weight_by) or resolve_sources(sources, pipeline)

    from audiotree.tuning import default_workers, tune

    workers = workers if workers is not None else default_workers()
    ds = build_dataset(parsed, pipeline, num_epochs=None)
    err = stderr_console()
    total = sum(len(buffers) if w else 1 for w in workers) * len(threads)
    done = [0]

    def report(m) -> None:
        done[0] += 1
        rss = "-" if m.peak_rss_mb is None else f"{m.peak_rss_mb:.0f} MB"
        err.print(f"[{done[0]}/{total}] {m.setting.label}: {m.items_per_second:.1f} items/s, "
                  f"first batch {m.first_batch_seconds:.2f} s, peak {rss}", highlight=False, soft_wrap=True)

    result = tune(ds, workers=workers, threads=threads, buffers=buffers, read_buffer=read_buffer,
                  batch_size=batch_size, batches=batches, ram_budget_mb=ram_budget, tolerance=tolerance,
                  on_measurement=None if as_json else report)
    if plot is not None:
        if plot.parent and not plot.parent.exists():
            plot.parent.mkdir(parents=True, exist_ok=True)
        result.plot(plot, corpus=describe_sources(parsed), pipeline=describe_pipeline(pipeline))
    mix = mix_report(ds, batch_size)  # what the mix serves per window of steps, read without audio
    if as_json:
        payload = result.to_dict()
        payload["cpu_count"] = os.cpu_count()
        payload["plot"] = None if plot is None else str(plot)
        payload["mix"] = None if mix is None else mix.to_dict()
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        return

    from rich.table import Table

    console = stdout_console()
    table = Table(title=f"{batches} timed batches of {batch_size} per setting, {os.cpu_count()} cores",
                  caption="peak MB: resident memory of the whole process tree", title_justify="left",
                  caption_justify="left")
    for name in ("workers", "threads", "buffer", "items/s", "1st batch s", "peak MB", ""):
        table.add_column(name, justify="right" if name else "left")
    budget = result.ram_budget_bytes
    for m in result.measurements:
        s = m.setting
        notes = []
        if m is result.knee:
            notes.append("knee")
        if m is result.best:
            notes.append("best")
        if budget is not None and m.peak_rss_bytes is not None and m.peak_rss_bytes > budget:
            notes.append("over budget")
        table.add_row(str(s.num_workers), str(s.num_threads), str(s.per_worker_buffer_size) if s.num_workers else "-",
                      f"{m.items_per_second:.1f}", f"{m.first_batch_seconds:.2f}",
                      "-" if m.peak_rss_mb is None else f"{m.peak_rss_mb:.0f}", ", ".join(notes),
                      style="bold" if m is result.knee else None)
    console.print(table)
    console.print(result.recommendation(), soft_wrap=True)
    k = result.knee.setting
    console.print(f"Use: ds.to_iter_dataset(grain.ReadOptions(num_threads={k.num_threads}, "
                  f"prefetch_buffer_size={k.prefetch_buffer_size}))"
                  + (f".mp_prefetch(grain.MultiprocessingOptions(num_workers={k.num_workers}, "
                     f"per_worker_buffer_size={k.per_worker_buffer_size}))" if k.num_workers else ""), soft_wrap=True)
    if any(m.remote for m in result.measurements):
        console.print(_reads_table(result))
    if mix is not None:
        console.print(mix_table(mix, batch_size))
    if plot is not None:
        console.print(f"Plot: {plot}")



def _reads_table(result):
    """What each setting read from storage, its workers included, and per item delivered."""
    from rich.table import Table

    table = Table(title="Reads from storage per setting, workers included", title_justify="left",
                  caption="w: workers, t: threads; per item delivered; wait s: summed over threads and processes",
                  caption_justify="left")
    for name in ("w", "t", "buffer", "requests", "MB", "req/item", "KB/item", "hits", "wait s"):
        table.add_column(name, justify="right")
    for m in result.measurements:
        s, r, n = m.setting, m.reads, max(1, m.items_delivered)
        if r is None:
            continue
        rate = r.cache_hit_rate
        table.add_row(str(s.num_workers), str(s.num_threads), str(s.per_worker_buffer_size) if s.num_workers else "-",
                      f"{r.requests:,}", f"{r.bytes / 1e6:.1f}", f"{r.requests / n:.2f}", f"{r.bytes / n / 1e3:.0f}",
                      "-" if rate is None else f"{rate:.0%}", f"{r.wait_seconds:.2f}")
    return table

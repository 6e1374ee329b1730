"""``audiotree preview``: N excerpts of the configured pipeline as a static HTML page."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import click

from audiotree.cli._common import (
    CliError,
    build_dataset,
    index_source,
    where_option,
    pipeline_options,
    resolve_sources,
    sources_argument,
    stdout_console,
)


@click.command(short_help="Excerpts as a static HTML page with players and plots.")
@sources_argument
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("audiotree-preview"),
              show_default=True, help="Folder to write index.html, the WAVs and the plots into.")
@click.option("-n", "--num-excerpts", "n", type=click.IntRange(min=1), default=12, show_default=True,
              help="How many excerpts.")
@click.option("--image-format", type=click.Choice(["auto", "png", "svg"]), default="auto", show_default=True,
              help="Plot format: PNG (matplotlib) or a small vector SVG; auto is PNG.")
@click.option("--group-by", "group_by", default="source", show_default=True, metavar="COLUMN",
              help="Arrange the cards in sections by this column: source, folder, format or a label "
                   "the items carry (pitch, velocity, note_duration, an extras key). With a corpus index as "
                   "SOURCES (CORPUS.parquet, as for scan), an index label: excerpts are balanced over its values.")
@click.option("--sort-by", "sort_by", default=None, metavar="[-]COLUMN",
              help="With a corpus index as SOURCES: order the cards by this index column (a quality column such as "
                   "snr_db, or a numeric label), lowest first ('-snr_db': highest first), in one section.")
@where_option
@pipeline_options()
def preview(sources, out_dir: Path, n: int, image_format: str, group_by: str, sort_by, where, weight_by,
            pipeline) -> None:
    """Render N excerpts into a static index.html: a player, labels and a picture per excerpt.

    \b
    Each picture shows the source file's peak and RMS level (dBFS) and its
    loudness curve (LUFS; silence is a gap), the excerpt's span, its loudness
    and the --lufs-cutoff line, and under it a mel spectrogram of the excerpt.
    OUT/index.html opens from disk (no server needed); to share it over HTTP:
    python -m http.server -d OUT
    """
    from audiotree.preview import render_preview

    by_label = group_by not in _CARD_COLUMNS
    parsed = (index_source(sources, None, group_by if by_label else None, where, weight_by) if _is_index(sources)
              else None)
    if parsed is None and (where is not None or weight_by is not None):
        raise click.UsageError(f"{'--where' if where is not None else '--weight-by'} needs a corpus index "
                               "(CORPUS.parquet) as SOURCES: it selects among the index's rows.")
    if parsed is not None and by_label:
        group_by = "source"  # each excerpt's source is its label value
    if parsed is None and sort_by is not None:
        raise click.UsageError("--sort-by needs a corpus index (CORPUS.parquet) as SOURCES: it orders by its columns.")
    if parsed is None:
        parsed = resolve_sources(sources, pipeline)
    started = time.perf_counter()
    if sort_by is not None:
        from audiotree.cli.quality_report import sort_where, sorted_items

        if _given("group_by"):
            raise click.UsageError("--sort-by orders every card in one section; it does not combine with --group-by.")
        column, descending = sort_by.lstrip("-"), sort_by.startswith("-")
        # The n rows lowest (highest) by the column, ordered: the corpus' worst (best) files by it.
        parsed = dataclasses.replace(parsed, labels=(*parsed.labels, column), group_by=None,
                                     where=sort_where(parsed.index, column, n, descending, parsed.where))
        ds = sorted_items(build_dataset(parsed, pipeline, num_epochs=None), n, column, descending)
        group_by = None
    else:
        ds = build_dataset(parsed, pipeline, num_epochs=None)
    # A ValueError (--group-by naming no column, files of different channel counts) becomes one
    # "Error: audiotree preview: ..." line in the command group.
    result = render_preview(
        ds, out_dir, n=n, lufs_cutoff=pipeline.cutoff_for_plots, image_format=image_format,
        title="audiotree preview", group_by=group_by,
        subtitle=f"{n} excerpts of {pipeline.duration:g} s at {pipeline.sample_rate} Hz, strategy {pipeline.strategy}",
    )
    console = stdout_console()
    groups: dict[str, int] = {}
    for record in result.excerpts:
        key = str(record["group"]) if group_by else "all"
        groups[key] = groups.get(key, 0) + 1
    mix = ", ".join(f"{name} {count}" for name, count in groups.items())
    console.print(f"Wrote {len(result)} excerpts ({mix}) with {result.image_format.upper()} plots "
                  f"in {time.perf_counter() - started:.1f} s")
    console.print(f"Open {result.index}")


_CARD_COLUMNS = ("source", "folder", "format")


def _given(name: str) -> bool:
    from click.core import ParameterSource

    return click.get_current_context().get_parameter_source(name) not in (None, ParameterSource.DEFAULT,
                                                                           ParameterSource.DEFAULT_MAP)


def _is_index(sources) -> bool:
    return len(sources) == 1 and str(sources[0]).lower().endswith(".parquet")

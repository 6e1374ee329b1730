"""``audiotree demo``: the balanced ``loudest`` pipeline on a built-in synthetic corpus."""

from __future__ import annotations

import collections
import gc
import os
import shutil
import tempfile
import time
from pathlib import Path

import click

from audiotree.cli._common import CliError, fmt_rate, stdout_console
from audiotree.cli._mixes import mix_report
from audiotree.cli._mixes import mix_table as windowed_mix_table

CORPUS_NAME = "demo-corpus-v2"
WEIGHTS = {"speech": 0.5, "music": 0.3, "effects": 0.2}
SAMPLE_RATE = 48_000
DURATION = 3.0


def cache_root() -> Path:
    """``$AUDIOTREE_CACHE``, else ``$XDG_CACHE_HOME/audiotree``, else ``~/.cache/audiotree``."""
    explicit = os.environ.get("AUDIOTREE_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "audiotree"


def ensure_demo_corpus(root: Path | None = None) -> tuple[Path, bool, float]:
    """The demo corpus folder, generated once (atomically) on first use.

    Returns ``(folder, generated_now, seconds_spent)``. The corpus is written to a
    temporary sibling folder and renamed into place, so an interrupted run never
    leaves a half-written corpus behind, and two concurrent runs both end up
    with one complete copy.
    """
    from audiotree.synth import DEMO_SPEC, GROUPS, write_corpus

    root = cache_root() if root is None else Path(root)
    target = root / CORPUS_NAME
    if all((target / group).is_dir() for group in GROUPS):
        return target, False, 0.0
    started = time.perf_counter()
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{CORPUS_NAME}.tmp-", dir=root))
    except OSError as exc:
        raise CliError(f"cannot create the demo cache folder {root}: {exc.strerror or exc}; "
                       "set AUDIOTREE_CACHE to a writable folder.") from exc
    try:
        write_corpus(staging, DEMO_SPEC)
        if target.exists():  # a leftover without every group: replace it
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.rename(staging, target)
        except OSError:
            if not all((target / group).is_dir() for group in GROUPS):
                raise
            # Another run finished first; its copy is identical (deterministic spec).
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target, True, time.perf_counter() - started


def _close(iterator) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


@click.command(short_help="Run the balanced loudest pipeline on a built-in synthetic corpus.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("audiotree-demo"),
              show_default=True, help="Folder for the HTML preview (relative to the current folder).")
@click.option("--workers", type=click.IntRange(min=0), default=2, show_default=True,
              help="mp_prefetch worker processes (num_workers).")
@click.option("--batches", type=click.IntRange(min=2), default=8, show_default=True,
              help="Batches to read; items/s is measured over all but the first.")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("-n", "--num-excerpts", "n", type=click.IntRange(min=0), default=12, show_default=True,
              help="Excerpts in the preview (0: no preview).")
def demo(out_dir: Path, workers: int, batches: int, batch_size: int, n: int) -> None:
    """Run the balanced `loudest` pipeline on a built-in synthetic corpus.

    \b
    The corpus (speech, music and effects in WAV/FLAC/MP3/OGG, 16-48 kHz,
    mono and stereo, with near-silent gaps) is generated once into
    $AUDIOTREE_CACHE/demo-corpus-v2 (default ~/.cache/audiotree). Prints the
    throughput, the proportions per source against the weights and the mix
    of the first batches, and writes an HTML preview to --out.
    """
    total_started = time.perf_counter()
    console = stdout_console()
    folder, generated, spent = ensure_demo_corpus()
    groups = {name: str(folder / name) for name in WEIGHTS}
    files = sum(1 for g in groups.values() for entry in os.scandir(g) if entry.is_file())
    how = f"generated in {spent:.1f} s" if generated else "cached"
    console.print(f"audiotree demo: {files} synthetic files in {len(groups)} groups ({how})")
    console.print(f"  corpus    {folder}")

    import grain

    from audiotree import AudioTree
    from audiotree.excerpts.config import ExcerptConfig
    from audiotree.sources import create_balanced_audio_dataset

    excerpt = ExcerptConfig(strategy="loudest", lufs_cutoff=-40, num_tries=5)
    ds = create_balanced_audio_dataset(groups, weights=WEIGHTS, duration=DURATION, sample_rate=SAMPLE_RATE,
                                       excerpt=excerpt)
    console.print("  pipeline  balanced, weights " + " / ".join(f"{k} {v:g}" for k, v in WEIGHTS.items()))
    console.print(f"            loudest {DURATION:g} s excerpts at {SAMPLE_RATE} Hz (lufs_cutoff -40, num_tries 5)")
    console.print(f"            batches of {batch_size}, {workers} mp_prefetch workers, synchronous reads")

    pipeline = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)).batch(
        batch_size, batch_fn=AudioTree.batch)
    if workers:
        pipeline = pipeline.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    mixes: list[collections.Counter] = []
    started = time.perf_counter()
    iterator = iter(pipeline)
    try:
        first_at = steady_from = None
        for batch in iterator:
            now = time.perf_counter()
            if first_at is None:
                first_at = steady_from = now
            mixes.append(collections.Counter(batch.source))
            del batch
            if len(mixes) >= batches:
                break
        finished = time.perf_counter()
    finally:
        _close(iterator)
        del iterator
        gc.collect()
    if not mixes:
        raise CliError("the demo pipeline produced no batches.")
    steady_items = sum(sum(m.values()) for m in mixes[1:])
    rate = steady_items / max(finished - steady_from, 1e-9)

    from rich.table import Table

    console.print(f"Throughput: {fmt_rate(rate)} items/s ({len(mixes) - 1} batches after the first); "
                  f"first batch after {first_at - started:.1f} s")

    totals = collections.Counter()
    for mix in mixes:
        totals.update(mix)
    seen = sum(totals.values())
    weight_sum = sum(WEIGHTS.values())
    table = Table(title=f"Proportions over {seen} items", title_justify="left")
    table.add_column("source")
    table.add_column("weight", justify="right")
    table.add_column("expected", justify="right")
    table.add_column("observed", justify="right")
    table.add_column("items", justify="right")
    for name, weight in WEIGHTS.items():
        table.add_row(name, f"{weight:g}", f"{weight / weight_sum:.1%}", f"{totals[name] / seen:.1%}", str(totals[name]))
    console.print(table)

    shown = mixes[: min(len(mixes), 8)]
    mix_table = Table(title=f"Mix of the first {len(shown)} batches (items per source)", title_justify="left")
    mix_table.add_column("source")
    for i in range(len(shown)):
        mix_table.add_column(f"#{i + 1}", justify="right")
    for name in WEIGHTS:
        mix_table.add_row(name, *(str(m[name]) for m in shown))
    console.print(mix_table)
    windows = mix_report(ds, batch_size)  # the mix over longer runs, read from the mix (no audio)
    if windows is not None:
        console.print(windowed_mix_table(windows, batch_size))

    if n:
        from audiotree.preview import render_preview

        preview_started = time.perf_counter()
        result = render_preview(
            ds, out_dir, n=n, lufs_cutoff=-40.0, title="audiotree demo",
            subtitle=f"{n} excerpts of the demo pipeline: loudest {DURATION:g} s excerpts at {SAMPLE_RATE} Hz, weights "
                     + " / ".join(f"{k} {v:g}" for k, v in WEIGHTS.items()),
        )
        console.print(f"Preview: {len(result)} excerpts with {result.image_format.upper()} plots "
                      f"({time.perf_counter() - preview_started:.1f} s)")
        console.print(f"  open {result.index}")
        if not out_dir.is_absolute():
            # The preview lands where the command runs; say so, so nobody commits it by accident.
            console.print("  (written into the current folder; --out DIR writes it elsewhere)")
    console.print(f"Done in {time.perf_counter() - total_started:.1f} s")

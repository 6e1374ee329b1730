"""Dataset builders: a folder of files, or named groups mixed by weight.

Every builder returns a Grain ``MapDataset`` of batch-of-1 ``AudioTree`` items.

Determinism: the file list is sorted; ``shuffle_seed`` fixes the file order
(a new permutation every epoch, see :mod:`audiotree.sources.epoch_order`) and ``excerpt_seed`` (default: derived from
``shuffle_seed``) fixes the excerpts. Grain's ``random_map`` gives every
*global* index its own generator, so ``ds[i]`` is reproducible, a file revisited
in a later epoch gets a new excerpt, and the stream does not depend on how many
workers or threads read it.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import grain

from audiotree.excerpts.config import ExcerptConfig
from audiotree.seeds import derive_group_seed, derive_streams
from audiotree.sources.datasets.options import Corpus, Order, Output
from audiotree.sources.datasets.common import (building_with_storage_options, check_common, probe_channels,
                                              refuse_text_crops, resolve_files, resolve_labelled_files)
from audiotree.discovery.sharding import check_shard_options, host_items
from audiotree.discovery.files import SourceSpec
from audiotree.sources.loading import ExcerptLoader, MeasureLufs, StampSource, check_measure_lufs
from audiotree.sources.audio_datasets import AudioMapDataset, estimate_item_bytes
from audiotree.sources.mixing import check_mix_weights, mix_shuffled
from audiotree.sources.global_stream import HostShare, share_of
from audiotree.sources.epoch_order import EpochShuffledMapDataset
from audiotree.sources.datasets.windowed import WindowConfig, check_window_rows, windowed_group_dataset
from audiotree.validation import check_duration, check_pad_mode

__all__ = ["build_file_dataset", "build_balanced_dataset", "shard_dataset"]

def _file_dataset(
    files: list[str], *, shuffle: bool, num_epochs: int | None, shuffle_seed: int, excerpt_seed: int | None,
    loader: ExcerptLoader,
) -> grain.MapDataset:
    shuffle_stream, excerpt_stream = derive_streams(shuffle_seed, excerpt_seed)
    ds = EpochShuffledMapDataset(
        grain.MapDataset.source(files), seed=shuffle_stream, num_epochs=num_epochs, shuffle=shuffle
    )
    return ds.random_map(loader, seed=excerpt_stream)


@building_with_storage_options
def build_file_dataset(
    sources: SourceSpec | None = None,
    filepaths: Sequence[str | os.PathLike] | None = None,
    *,
    num_epochs: int | None = 1,
    duration: float | None = 1.0,
    excerpt: ExcerptConfig = ExcerptConfig(),
    output: Output, order: Order, corpus: Corpus,  # resolved by the public builder
) -> grain.MapDataset:
    """:func:`~audiotree.sources.create_audio_dataset`, its option objects resolved by ``gather_options``."""
    channels = output.channels
    sample_rate, shuffle_seed, excerpt_seed = check_common(num_epochs=num_epochs, on_read_error=corpus.on_read_error,
                                                           output=output, order=order)
    if not isinstance(excerpt, ExcerptConfig):
        raise TypeError(f"excerpt must be an ExcerptConfig, got {type(excerpt).__name__}.")
    duration, excerpt = resolve_whole_files(duration, excerpt)
    check_duration(duration)
    check_pad_mode(output.pad_mode)
    from audiotree.sources import indexed

    rows = stream_labels = None
    loudest = indexed.loudest_spec(excerpt, duration, has_index=corpus.index is not None, mono=output.mono)
    if corpus.index is not None:
        rows = indexed.rows_for_builder(corpus.index, sources, filepaths, labels=corpus.labels,
                                        min_duration=corpus.min_duration, max_duration=corpus.max_duration,
                                        on_stale=corpus.on_stale, loudest=loudest, where=corpus.where,
                                        weight_by=corpus.weight_by)
        refuse_text_crops(rows, duration, excerpt)
        rows = host_items(rows, order.shard_options)
        files = range(len(rows))  # items are row numbers; IndexedLoader maps them to files
        if not output.mono:
            channels = indexed.checked_channels(rows, channels)
    else:
        indexed.refuse_index_options(min_duration=corpus.min_duration, max_duration=corpus.max_duration,
                                     where=corpus.where, weight_by=corpus.weight_by)
        if corpus.labels is not None:  # sidecars of tar members, columns of Parquet rows
            files, stream_labels = resolve_labelled_files(sources, filepaths, corpus)
        else:
            files = resolve_files(sources, filepaths, corpus.extensions, on_read_error=corpus.on_read_error,
                                  audio_column=corpus.audio_column)
        files = host_items(files, order.shard_options)
        if not output.mono and channels is None:
            channels = probe_channels(files[0])
    loader = ExcerptLoader(
        sample_rate=sample_rate, duration=None if duration is None else float(duration), mono=output.mono,
        pad_mode=output.pad_mode, excerpt=excerpt, source=output.source, channels=None if output.mono else channels,
        on_read_error=corpus.on_read_error, storage_options=corpus.storage_options, labels=stream_labels,
    )
    if rows is not None:
        loader = indexed.IndexedLoader(rows=rows, loader=loader, on_stale=corpus.on_stale,
                                       stamp_group=output.source is None)
    ds = _file_dataset(
        files, shuffle=order.shuffle, num_epochs=num_epochs, shuffle_seed=shuffle_seed, excerpt_seed=excerpt_seed,
        loader=loader,
    )
    if check_measure_lufs(output.measure_lufs):
        ds = ds.map(MeasureLufs())
    item_bytes = estimate_item_bytes(
        channels=1 if output.mono else (channels or 2), sample_rate=sample_rate, duration=item_seconds(duration, excerpt)
    )
    return own_host_stream(AudioMapDataset(ds, item_bytes=item_bytes), order.shard_options)


#: Seconds assumed per whole-file item without crop_to, for buffer-memory estimates only.
WHOLE_FILE_ESTIMATE_SECONDS = 20.0


def resolve_whole_files(duration: float | None, excerpt: ExcerptConfig) -> tuple[float | None, ExcerptConfig]:
    """``duration=None`` means whole files; ``strategy="full"`` takes no duration."""
    if excerpt.strategy == "full":
        if duration is not None and duration != 1.0:
            raise ValueError(
                f"strategy='full' reads whole files, so duration={duration!r} does not apply; pass duration=None "
                "and cap long files with ExcerptConfig(strategy='full', crop_to=...)."
            )
        return None, excerpt
    if duration is None:
        if excerpt.strategy == "loudest":
            raise ValueError("strategy='loudest' needs duration= (the excerpt length); use strategy='full' for whole files.")
        if excerpt.strategy == "random" and excerpt != ExcerptConfig():
            raise ValueError("duration=None reads whole files; a custom search does not apply. Use ExcerptConfig(strategy='full').")
        return None, ExcerptConfig(strategy="full")
    return duration, excerpt


def item_seconds(duration: float | None, excerpt: ExcerptConfig) -> float:
    """Seconds per item for memory estimates (whole files: ``max_duration`` or a typical utterance)."""
    if duration is not None:
        return float(duration)
    return float(excerpt.crop_to or WHOLE_FILE_ESTIMATE_SECONDS)


@building_with_storage_options
def build_balanced_dataset(
    sources: Mapping[str, SourceSpec] | None = None,
    weights: Mapping[str, float] | None = None,
    datasets: Mapping[str, grain.MapDataset] | None = None,
    *,
    num_epochs: int | None = None,
    duration: float | None = 1.0,
    excerpt: ExcerptConfig = ExcerptConfig(),
    window: WindowConfig | None = None,
    output: Output, order: Order, corpus: Corpus,  # resolved by the public builder
) -> grain.MapDataset:
    """:func:`~audiotree.sources.create_balanced_audio_dataset`, its option objects resolved by ``gather_options``."""
    channels = output.channels
    sample_rate, shuffle_seed, excerpt_seed = check_common(num_epochs=num_epochs, on_read_error=corpus.on_read_error,
                                                           output=output, order=order)
    from audiotree.sources import indexed

    group_rows: dict = {}
    if not isinstance(excerpt, ExcerptConfig):
        raise TypeError(f"excerpt must be an ExcerptConfig, got {type(excerpt).__name__}.")
    loudest = indexed.loudest_spec(
        excerpt, 1.0 if duration is None else duration,
        has_index=corpus.index is not None or any(indexed.is_index_path(v) for v in (sources or {}).values()),
        mono=output.mono,
    )
    if corpus.index is not None:
        if corpus.group_by is None:
            raise ValueError("Corpus(index=...) with create_balanced_audio_dataset needs Corpus(group_by=...) "
                             "(e.g. group_by='group'); or use sources={'speech': 'speech.parquet', ...}.")
        if sources is not None:
            raise ValueError("Pass Corpus(index=..., group_by=...) or sources=, not both.")
        group_rows = indexed.rows_by_group(corpus.index, corpus.group_by, labels=corpus.labels,
                                           min_duration=corpus.min_duration,
                                           max_duration=corpus.max_duration, loudest=loudest, where=corpus.where,
                                           weight_by=corpus.weight_by)
        sources = {name: None for name in group_rows}
    elif corpus.group_by is not None:
        raise ValueError("Corpus(group_by=...) groups the rows of an index; pass Corpus(index=...) as well.")
    for name, spec in (sources or {}).items():
        if indexed.is_index_path(spec):
            group_rows[name] = indexed.rows_from_index(spec, labels=corpus.labels, min_duration=corpus.min_duration,
                                                       max_duration=corpus.max_duration, what=f"group {name!r}",
                                                       loudest=loudest, where=corpus.where,
                                                       weight_by=corpus.weight_by)
    if group_rows:
        from audiotree.index.reader import check_on_stale
        from audiotree.sources.item_labels import check_same_kinds

        check_on_stale(corpus.on_stale)
        check_same_kinds({rows.index_path: rows.labels for rows in group_rows.values()})
    else:
        indexed.refuse_index_options(labels=corpus.labels, min_duration=corpus.min_duration, max_duration=corpus.max_duration,
                                     where=corpus.where, weight_by=corpus.weight_by)
    check_measure_lufs(output.measure_lufs)
    if order.shard_options is not None:
        check_shard_options(order.shard_options)
    if sources is None and datasets is None:
        raise ValueError("Pass sources= ({group: folders, an index or a MapDataset}), or Corpus(index=..., group_by=...).")
    sources = dict(sources or {})
    datasets = dict(datasets or {})
    if not sources and not datasets:
        raise ValueError("sources= is empty; give at least one group.")
    if window is not None:
        if excerpt != ExcerptConfig():
            raise ValueError("window= samples by window; it cannot be combined with a custom excerpt=.")
        if duration is None or (duration != 1.0 and duration != window.duration):
            raise ValueError(f"window= carries its own duration ({window.duration} s); do not pass duration="
                             f"{duration!r} as well.")
        if corpus.on_read_error != "raise":
            raise ValueError("window= supports only Corpus(on_read_error='raise').")
    if window is None:
        duration, excerpt = resolve_whole_files(duration, excerpt)
    check_duration(duration)
    check_pad_mode(output.pad_mode)
    collisions = sorted(set(sources) & set(datasets))
    if collisions:
        raise ValueError(f"Group names used twice: {collisions}.")
    names = list(sources) + list(datasets)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"Group names must be non-empty strings, got {name!r}.")
    group_weights = check_mix_weights(weights, names)

    excerpt_base = shuffle_seed if excerpt_seed is None else excerpt_seed
    group_files: dict = {}
    for name, folders in sources.items():
        what = f"group {name!r}"
        if name in group_rows:
            if window is None:
                refuse_text_crops(group_rows[name], duration, excerpt, what=f" ({what})")
            else:
                check_window_rows(group_rows[name], window, what=f" ({what})")
            group_rows[name] = host_items(group_rows[name], order.shard_options, what=what)
            group_files[name] = range(len(group_rows[name]))
        else:
            group_files[name] = host_items(resolve_files(
                folders, None, corpus.extensions, on_read_error=corpus.on_read_error, audio_column=corpus.audio_column),
                order.shard_options, what=what)
    if window is None and not output.mono and channels is None and group_files:
        first = next(iter(group_files))
        channels = indexed.first_channels(group_rows[first]) if first in group_rows else \
            probe_channels(group_files[first][0])
    if window is None and not output.mono:
        for rows in group_rows.values():
            channels = indexed.checked_channels(rows, channels)

    parts: list[grain.MapDataset] = []
    for name, files in group_files.items():
        group_shuffle = derive_group_seed(shuffle_seed, name, "shuffle")
        group_excerpt = derive_group_seed(excerpt_base, name, "excerpt")
        rows = group_rows.get(name)
        if window is not None:
            parts.append(windowed_group_dataset(
                files if rows is None else rows.paths, window, name=name, shuffle=order.shuffle,
                num_epochs=num_epochs, shuffle_seed=group_shuffle, excerpt_seed=group_excerpt,
                sample_rate=sample_rate, mono=output.mono, pad_mode=output.pad_mode, rows=rows, on_stale=corpus.on_stale,
                storage_options=corpus.storage_options,
            ))
            continue
        loader = ExcerptLoader(
            sample_rate=sample_rate, duration=None if duration is None else float(duration), mono=output.mono,
            pad_mode=output.pad_mode, excerpt=excerpt, source=name, channels=None if output.mono else channels,
            on_read_error=corpus.on_read_error, storage_options=corpus.storage_options,
        )
        if rows is not None:
            loader = indexed.IndexedLoader(rows=rows, loader=loader, on_stale=corpus.on_stale)
        parts.append(_file_dataset(
            files, shuffle=order.shuffle, num_epochs=num_epochs, shuffle_seed=group_shuffle,
            excerpt_seed=group_excerpt, loader=loader,
        ))
    for name, ds in datasets.items():
        if not isinstance(ds, grain.MapDataset):
            raise TypeError(f"datasets[{name!r}] must be a grain.MapDataset, got {type(ds).__name__}.")
        if order.shard_options is not None:
            ds = shard_dataset(ds, order.shard_options)
        parts.append(ds.map(StampSource(name)))

    mixed = mix_shuffled(parts, group_weights, seed=derive_group_seed(shuffle_seed, "", "mix"), names=names)
    if output.measure_lufs:
        mixed = mixed.map(MeasureLufs())
    window_duration = getattr(window, "duration", None)
    item_duration = float(window_duration) if window_duration is not None else item_seconds(duration, excerpt)
    item_bytes = estimate_item_bytes(channels=1 if output.mono else (channels or 2), sample_rate=sample_rate,
                                     duration=item_duration)
    return own_host_stream(AudioMapDataset(mixed, item_bytes=item_bytes), order.shard_options)


def own_host_stream(ds: AudioMapDataset, shard_options: Any) -> AudioMapDataset:
    """``ds`` marked as host ``i`` of ``n``'s own stream when the builder sharded its files by host, so that
    its checkpoints are refused on another host count instead of resuming the wrong items."""
    if shard_options is not None:
        ds.host_share = HostShare(None, *check_shard_options(shard_options))
    return ds


def shard_dataset(ds: grain.MapDataset, shard_options: Any = None) -> grain.MapDataset:
    """Host ``i`` of ``n``'s share of a dataset: items ``i, i + n, i + 2n, ...``.

    ``shard_options`` is a ``grain.sharding.ShardOptions`` (or
    ``ShardByJaxProcess()``, the default, which reads ``jax.process_index()``
    and ``jax.process_count()``). Shares are disjoint and together complete; with
    ``drop_remainder=True`` every host gets the same number of items of a finite
    dataset. An endless dataset (``len == sys.maxsize``) gives an endless share.
    Apply it before ``to_iter_dataset``; the per-index RNG keeps each item
    identical to the unsharded dataset's.

    >>> import sys, grain
    >>> share = shard_dataset(grain.MapDataset.range(7), grain.sharding.ShardOptions(1, 3))
    >>> list(share)
    [1, 4]
    >>> endless = shard_dataset(grain.MapDataset.range(7).repeat(), grain.sharding.ShardOptions(1, 3))
    >>> len(endless) == sys.maxsize, [endless[k] for k in range(4)]
    (True, [1, 4, 0, 3])
    """
    if shard_options is None:
        shard_options = grain.sharding.ShardByJaxProcess()
    index, count = check_shard_options(shard_options)
    drop = bool(getattr(shard_options, "drop_remainder", False))
    sharded = share_of(ds, index, count, drop)
    if isinstance(ds, AudioMapDataset):
        if not isinstance(sharded, AudioMapDataset):
            sharded = AudioMapDataset(sharded, item_bytes=ds.item_bytes)
        # So that its iterators' checkpoints are positions in ds's stream (audiotree.sources.stream_resume).
        sharded.host_share = HostShare(ds, index, count, drop)
    return sharded

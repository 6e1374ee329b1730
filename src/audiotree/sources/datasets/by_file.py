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

from audiotree.seeds import derive_group_seed, derive_streams
from audiotree.sources.datasets.options import BuildRequest
from audiotree.sources.datasets.common import (building_with_storage_options, own_host_stream, probe_channels,
                                              refuse_text_crops, resolve_files, resolve_labelled_files)
from audiotree.sources.datasets.plan import DatasetPlan
from audiotree.discovery.sharding import check_shard_options, host_items
from audiotree.discovery.files import SourceSpec
from audiotree.sources.loading import ExcerptLoader, MeasureLufs, StampSource, in_storage_scope
from audiotree.sources.audio_datasets import AudioMapDataset, estimate_item_bytes
from audiotree.sources.mixing import check_mix_weights, mix_shuffled
from audiotree.sources.global_stream import HostShare, share_of
from audiotree.sources.epoch_order import EpochShuffledMapDataset
from audiotree.sources.datasets.windowed import check_window_rows, windowed_group_dataset

__all__ = ["build_file_dataset", "build_balanced_dataset", "shard_dataset"]

def _file_dataset(files: Any, *, shuffle: bool, num_epochs: int | None, shuffle_seed: int, excerpt_seed: int | None,
                  loader: Any) -> tuple[grain.MapDataset, EpochShuffledMapDataset]:
    """The items of ``files`` read by ``loader``, and the epoch order they are read in."""
    shuffle_stream, excerpt_stream = derive_streams(shuffle_seed, excerpt_seed)
    order = EpochShuffledMapDataset(
        grain.MapDataset.source(files), seed=shuffle_stream, num_epochs=num_epochs, shuffle=shuffle
    )
    return order.random_map(loader, seed=excerpt_stream), order


@building_with_storage_options
def build_file_dataset(sources: SourceSpec | None, filepaths: Sequence[str | os.PathLike] | None, *,
                       request: BuildRequest) -> AudioMapDataset:
    """:func:`~audiotree.sources.create_audio_dataset`: plan (files or rows, loader, order), then build."""
    output, order, corpus = request.output, request.order, request.corpus
    duration, excerpt, channels = request.duration, request.excerpt, output.channels
    from audiotree.sources import indexed

    rows = stream_labels = None
    loudest = indexed.loudest_spec(excerpt, duration, has_index=corpus.index is not None, mono=output.mono)
    if corpus.index is not None:
        rows = indexed.rows_for_builder(corpus.index, sources, filepaths, labels=corpus.labels,
                                        min_duration=corpus.min_duration, max_duration=corpus.max_duration,
                                        loudest=loudest, where=corpus.where, weight_by=corpus.weight_by)
        refuse_text_crops(rows, duration, excerpt)
        rows = host_items(rows, order.shard_options)
        files = range(len(rows))  # items are row numbers; IndexedLoader maps them to files
        if not output.mono:
            channels = indexed.checked_channels(rows, channels)
    else:
        if corpus.labels is not None:  # sidecars of tar members, columns of Parquet rows
            files, stream_labels = resolve_labelled_files(sources, filepaths, corpus)
        else:
            files = resolve_files(sources, filepaths, corpus.extensions, on_read_error=corpus.on_read_error,
                                  audio_column=corpus.audio_column)
        files = host_items(files, order.shard_options)
        if not output.mono and channels is None:
            channels = probe_channels(files[0])
    loader = ExcerptLoader(
        sample_rate=output.sample_rate, duration=None if duration is None else float(duration), mono=output.mono,
        pad_mode=output.pad_mode, excerpt=excerpt, source=output.source, channels=None if output.mono else channels,
        on_read_error=corpus.on_read_error, labels=stream_labels,
    )
    if rows is not None:
        loader = indexed.IndexedLoader(rows=rows, loader=loader, on_stale=corpus.on_stale,
                                       stamp_group=output.source is None)
    ds, epochs = _file_dataset(files, shuffle=order.shuffle, num_epochs=request.num_epochs,
                               shuffle_seed=order.shuffle_seed, excerpt_seed=order.excerpt_seed,
                               loader=in_storage_scope(loader, corpus.storage_options))
    if output.measure_lufs:
        ds = ds.map(MeasureLufs())
    item_bytes = estimate_item_bytes(channels=1 if output.mono else (channels or 2), sample_rate=output.sample_rate,
                                     duration=request.item_seconds)
    plan = DatasetPlan(request, output.sample_rate, order=epochs, loader=loader, rows=rows)
    return own_host_stream(AudioMapDataset(ds, item_bytes=item_bytes, plan=plan), request.order.shard_options)


def _group_rows(sources: Mapping[str, Any] | None, request: BuildRequest, loudest: Any) -> dict:
    """The index rows of the groups given as indexes (or grouped by a column of ``Corpus.index``)."""
    from audiotree.sources import indexed

    corpus = request.corpus
    group_rows: dict = {}
    if corpus.index is not None:
        group_rows = indexed.rows_by_group(corpus.index, corpus.group_by, labels=corpus.labels,
                                           min_duration=corpus.min_duration, max_duration=corpus.max_duration,
                                           loudest=loudest, where=corpus.where, weight_by=corpus.weight_by)
    for name, spec in (sources or {}).items():
        if indexed.is_index_path(spec):
            group_rows[name] = indexed.rows_from_index(spec, labels=corpus.labels, min_duration=corpus.min_duration,
                                                       max_duration=corpus.max_duration, what=f"group {name!r}",
                                                       loudest=loudest, where=corpus.where,
                                                       weight_by=corpus.weight_by)
    if group_rows:
        from audiotree.sources.item_labels import check_same_kinds

        check_same_kinds({rows.index_path: rows.labels for rows in group_rows.values()})
    return group_rows


def _check_groups(sources: Mapping[str, Any] | None, datasets: Mapping[str, Any] | None,
                  request: BuildRequest) -> None:
    """The balanced builder's checks of its groups (before any row is read)."""
    corpus = request.corpus
    if corpus.index is not None:
        if corpus.group_by is None:
            raise ValueError("Corpus(index=...) with create_balanced_audio_dataset needs Corpus(group_by=...) "
                             "(e.g. group_by='group'); or use sources={'speech': 'speech.parquet', ...}.")
        if sources is not None:
            raise ValueError("Pass Corpus(index=..., group_by=...) or sources=, not both.")
        return
    if corpus.group_by is not None:
        raise ValueError("Corpus(group_by=...) groups the rows of an index; pass Corpus(index=...) as well.")
    if sources is None and datasets is None:
        raise ValueError("Pass sources= ({group: folders, an index or a MapDataset}), or Corpus(index=..., group_by=...).")
    if not sources and not datasets:
        raise ValueError("sources= is empty; give at least one group.")
    collisions = sorted(set(sources or {}) & set(datasets or {}))
    if collisions:
        raise ValueError(f"Group names used twice: {collisions}.")
    for name in list(sources or {}) + list(datasets or {}):
        if not isinstance(name, str) or not name:
            raise ValueError(f"Group names must be non-empty strings, got {name!r}.")


@building_with_storage_options
def build_balanced_dataset(sources: Mapping[str, SourceSpec] | None, weights: Mapping[str, float] | None,
                           datasets: Mapping[str, grain.MapDataset] | None, *,
                           request: BuildRequest) -> AudioMapDataset:
    """:func:`~audiotree.sources.create_balanced_audio_dataset`: check the groups, plan each, build the mix."""
    output, order, corpus = request.output, request.order, request.corpus
    duration, excerpt, window, channels = request.duration, request.excerpt, request.window, output.channels
    _check_groups(sources, datasets, request)
    from audiotree.sources import indexed

    loudest = indexed.loudest_spec(excerpt, duration or 1.0, has_index=request.has_index, mono=output.mono)
    group_rows = _group_rows(sources, request, loudest)
    if corpus.index is not None:
        sources = {name: None for name in group_rows}
    sources = dict(sources or {})
    datasets = dict(datasets or {})
    names = list(sources) + list(datasets)
    group_weights = check_mix_weights(weights, names)

    shuffle_seed = order.shuffle_seed
    excerpt_base = shuffle_seed if order.excerpt_seed is None else order.excerpt_seed
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
                num_epochs=request.num_epochs, shuffle_seed=group_shuffle, excerpt_seed=group_excerpt,
                output=output, rows=rows, on_stale=corpus.on_stale, storage_options=corpus.storage_options,
            ))
            continue
        loader = ExcerptLoader(
            sample_rate=output.sample_rate, duration=None if duration is None else float(duration), mono=output.mono,
            pad_mode=output.pad_mode, excerpt=excerpt, source=name, channels=None if output.mono else channels,
            on_read_error=corpus.on_read_error,
        )
        if rows is not None:
            loader = indexed.IndexedLoader(rows=rows, loader=loader, on_stale=corpus.on_stale)
        parts.append(_file_dataset(files, shuffle=order.shuffle, num_epochs=request.num_epochs,
                                   shuffle_seed=group_shuffle, excerpt_seed=group_excerpt,
                                   loader=in_storage_scope(loader, corpus.storage_options))[0])
    for name, ds in datasets.items():
        if not isinstance(ds, grain.MapDataset):
            raise TypeError(f"datasets[{name!r}] must be a grain.MapDataset, got {type(ds).__name__}.")
        if order.shard_options is not None:
            ds = shard_dataset(ds, order.shard_options)
        parts.append(ds.map(StampSource(name)))

    mixed = mix_shuffled(parts, group_weights, seed=derive_group_seed(shuffle_seed, "", "mix"), names=names)
    if output.measure_lufs:
        mixed = mixed.map(MeasureLufs())
    item_bytes = estimate_item_bytes(channels=1 if output.mono else (channels or 2), sample_rate=output.sample_rate,
                                     duration=request.item_seconds)
    return own_host_stream(AudioMapDataset(mixed, item_bytes=item_bytes, plan=DatasetPlan(request, output.sample_rate)),
                           request.order.shard_options)


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

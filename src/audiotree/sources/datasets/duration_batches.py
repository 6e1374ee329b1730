"""``batch_by_duration``: a Grain ``MapDataset`` of padded, duration-bucketed batches.

Element ``k`` is batch ``k`` of a :class:`~audiotree.sources.bucketing.BucketPlan`
read from an item dataset (whole files, in the order of the durations): a
padded :class:`~audiotree.AudioTree` ``(B, C, T)`` with ``lengths`` ``(B,)``,
where ``T`` is the bucket's edge in samples (``pad_to="bucket"``) and ``B``
that bucket's batch size. Each element is a pure function of ``k``, so
Grain's ``to_iter_dataset``/``mp_prefetch`` give the same batches for any
number of workers and threads, and ``get_state``/``set_state`` resume at the
exact next batch. Items of epoch ``e`` are read as ``items[e * n + i]``
(Grain's epoch convention), so per-item randomness (transforms mapped over
the items) is fresh every epoch.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import sys
from typing import Any, Literal, Mapping, Sequence

import grain
import numpy as np

from audiotree.discovery.sharding import check_shard_options
from audiotree.io.byte_cache import BoundedCache, FirstInFirstOut
from audiotree.sources.bucketing import (FILLER, MOVED_TO_BUCKET_CONFIG, BucketConfig, BucketPlan, endless_length,
                                        plan_buckets)
from audiotree.validation import is_int, renamed_keywords

__all__ = ["batch_by_duration", "DurationBatchDataset"]

_PAD_TO = ("bucket", "longest")
#: Bytes per second of audio assumed for read buffers when the items do not say (48 kHz stereo float32).
WORST_CASE_BYTES_PER_SECOND = 48_000 * 2 * 4
#: Decoded audio may exceed its bucket edge by this much (header rounding) before it is an error.
LENGTH_TOLERANCE_SECONDS = 0.05


def _walk(ds: Any):
    seen = set()
    stack = [ds]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(getattr(node, "parents", ()) or ())


def _item_plan(items: Any) -> Any:
    """The builder's :class:`~audiotree.sources.datasets.plan.DatasetPlan` that ``items`` carries, or ``None``.

    Our builders' datasets carry it as ``items.plan`` through per-item maps
    (``items.map(f)``); a step that moves items (``shuffle``, ``slice``, a
    plain Grain dataset) carries none, and the items are then read in their own order.
    """
    from audiotree.sources.datasets.plan import DatasetPlan

    plan = getattr(items, "plan", None)
    return plan if isinstance(plan, DatasetPlan) else None


def _check_items(items: Any, plan: BucketPlan, order: Any, per_epoch: int | None) -> int:
    if not isinstance(items, grain.MapDataset):
        raise TypeError(f"items must be a grain.MapDataset of AudioTree items, got {type(items).__name__}.")
    n = per_epoch if order is not None else len(items)
    if n >= sys.maxsize:
        raise ValueError(
            "items is endless and not built by create_audio_dataset; build it with num_epochs=1 (one item per "
            "duration, in order): batch_by_duration plans the epochs and the shuffling itself."
        )
    if n != plan.num_items:
        raise ValueError(
            f"items has {n} elements but {plan.num_items} durations were planned; give one duration per item, "
            "in the items' order."
        )
    if order is None:
        from audiotree.sources.epoch_order import EpochShuffledMapDataset

        for node in _walk(items):
            if isinstance(node, EpochShuffledMapDataset) and node.shuffle:
                raise ValueError(
                    "items is shuffled under a step that is not a per-item map, so item i is no longer the file of "
                    "durations[i]; build it with shuffle=False (batch_by_duration shuffles with its own seed)."
                )
    return n


def durations_of(items: Any) -> np.ndarray:
    """Seconds per item of a dataset built from a corpus index (or a segment index), in row order.

    ValueError when ``items`` was not built from an index (pass ``durations=``).
    """
    plan = _item_plan(items)
    if plan is None or plan.durations is None:
        raise ValueError(
            "batch_by_duration needs durations= for items not built from a corpus index (e.g. "
            "scan_durations(files) for a folder); with create_audio_dataset(corpus=Corpus(index=...)) they come "
            "from the index."
        )
    return plan.durations


class DurationBatchDataset(grain.MapDataset):
    """Batches of ``items`` as planned by ``plan``; see the module docstring.

    Filler slots (``remainder="pad"``, or items dropped by ``on_read_error``)
    are empty items: zeros, ``lengths == 0``, ``filepath == ""``, ``offset``
    NaN, and neutral labels: every ``extras`` entry shaped like the batch's
    first real item's, filled with ``-1`` (integers: category ids), NaN
    (floats), ``False`` (booleans) or ``""`` (text). Weight losses by
    ``lengths > 0`` or use :meth:`~audiotree.AudioTree.mask`.
    """


    def __init__(self, items: grain.MapDataset, plan: BucketPlan, *, num_epochs: int | None = None,
                 pad_to: str = "bucket", shard_index: int = 0, pad_multiple: int = 1):
        super().__init__(items)
        item_plan = _item_plan(items)
        self._order = None if item_plan is None else item_plan.order
        self._n = _check_items(items, plan, self._order, None if self._order is None else item_plan.items_per_epoch)
        # The two most recent epochs' positions (pickled empty: a worker computes its own).
        self._positions = BoundedCache("epoch_positions", max_entries=2, policy=FirstInFirstOut)
        self.pad_multiple = int(pad_multiple)
        self.plan = plan
        self.pad_to = pad_to
        self.shard_index = int(shard_index)
        self.num_epochs = num_epochs
        self._length = endless_length(num_epochs, plan)

    def __len__(self) -> int:
        return self._length

    def __str__(self) -> str:
        return f"DurationBatchDataset(edges={self.plan.edges.tolist()}, pad_to={self.pad_to!r})"

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        with self._stats.record_self_time():
            if index < 0:
                index += self._length
            epoch, whole, bucket = self.plan.batch(index)
            slots = self.plan.shard(whole, self.shard_index)
        items = [None if i == FILLER else self._read(epoch, i) for i in slots]
        template = None
        if all(t is None for t in items):
            # This host's share is all filler: shape it like another host's item,
            # so every host still returns the bucket's shape at this step.
            for i in whole[whole != FILLER]:
                tree = self._read(epoch, i)
                if tree is not None:
                    template = self._fit(tree, int(i), bucket)
                    break
            if template is None:
                return None  # every item of the batch was dropped by on_read_error
        with self._stats.record_self_time():
            batch = self._assemble(items, slots, bucket, template)
        return self._stats.record_output_spec(batch)

    def _read(self, epoch: int, item: int) -> Any:
        return self._parent[epoch * self._n + self._position(epoch, int(item))]

    def _position(self, epoch: int, item: int) -> int:
        """Where item ``item`` (row order) sits in epoch ``epoch`` of the items' own order."""
        order = self._order
        if order is None or not order.shuffle:
            return item
        positions = self._positions.get(epoch)
        if positions is None:
            perm = order.permutation(epoch)
            positions = np.empty_like(perm)
            positions[perm] = np.arange(perm.size)
            self._positions.put(epoch, positions)
        return int(positions[item])

    def _fit(self, tree: Any, slot: int, bucket: int) -> Any:
        """Crops an item to its bucket (checking the planned duration) and stamps its group."""
        rate = tree.sample_rate
        edge = float(self.plan.edges[bucket])
        edge_samples = int(math.ceil(edge * rate - 1e-6))
        tolerance = int(math.ceil(max(LENGTH_TOLERANCE_SECONDS, 0.01 * edge) * rate))
        if tree.samples > edge_samples:
            planned = self.plan.durations[slot]
            cropped = self.plan.too_long == "crop" and planned >= edge - 1e-9
            if tree.samples > edge_samples + tolerance and not cropped:
                where = tree.filepath[0] if tree.filepath else f"item {slot}"
                raise ValueError(
                    f"'{where}' decoded to {tree.samples / rate:.3f} s, but its planned duration is "
                    f"{planned:.3f} s (bucket edge {edge} s). The durations are stale or belong to other "
                    "files: rebuild the index / re-run scan_durations, in the items' order."
                )
            tree = _crop(tree, edge_samples)
        if self.plan.group_names is not None:
            tree = _stamp_group(tree, self.plan.group_names[int(self.plan.group_of[slot])])
        return tree

    def _assemble(self, items: list, slots: np.ndarray, bucket: int, template: Any = None) -> Any:
        from audiotree.core import AudioTree

        fitted = [self._fit(t, int(slot), bucket) for t, slot in zip(items, slots) if t is not None]
        template = fitted[0] if fitted else template
        rate = template.sample_rate
        edge_samples = int(math.ceil(float(self.plan.edges[bucket]) * rate - 1e-6))
        filled, it = [], iter(fitted)
        for tree in items:
            filled.append(next(it) if tree is not None else _filler(template))
        pad_to = edge_samples if self.pad_to == "bucket" else max(t.samples for t in filled)
        if self.pad_multiple > 1:
            pad_to = -(-pad_to // self.pad_multiple) * self.pad_multiple
        return _batch_padded(filled, pad_to)


def _batch_padded(items: list, pad_to: int) -> Any:
    """``AudioTree.batch(items, pad_to=pad_to)``, writing each waveform once into the padded batch.

    The general ``batch`` pads every item, then concatenates (two copies of
    the audio); for NumPy items without loudness windows this copies once.
    """
    from audiotree.core import AudioTree

    if not all(isinstance(t.waveform, np.ndarray) and t.lufs_windows is None for t in items):
        return AudioTree.batch(items, pad_to=pad_to)
    shapes = {t.waveform.shape[1:-1] for t in items}
    dtypes = {t.waveform.dtype for t in items}
    if len(shapes) != 1 or len(dtypes) != 1 or any(t.samples > pad_to for t in items):
        return AudioTree.batch(items, pad_to=pad_to)  # its errors name the offending item
    (shape,), (dtype,) = shapes, dtypes
    waveform = np.zeros((len(items), *shape, pad_to), dtype=dtype)
    lengths = np.empty(len(items), dtype=np.int32)
    for i, t in enumerate(items):
        n = t.samples
        waveform[i, ..., :n] = t.waveform[0]
        lengths[i] = n if t.lengths is None else int(np.asarray(t.lengths)[0])
    rest = AudioTree.batch([dataclasses.replace(t, waveform=None, lengths=None) for t in items])
    return dataclasses.replace(rest, waveform=waveform, lengths=lengths)


def _crop(tree: Any, samples: int) -> Any:
    """The first ``samples`` samples of a batch-of-1 item (its ``lengths`` capped)."""
    lengths = None if tree.lengths is None else np.minimum(np.asarray(tree.lengths), samples).astype(np.int32)
    # Loudness and codes described the whole file: cleared.
    return tree.replace_audio(waveform=tree.waveform[..., :samples], lengths=lengths)


def _stamp_group(tree: Any, name: str) -> Any:
    from audiotree.provenance import encode_strings

    metadata = tree.provenance
    metadata["source"] = encode_strings([name] * tree.batch_size)
    return tree.replace(_metadata=metadata)


def _filler(template: Any) -> Any:
    """An empty slot shaped like ``template``: no samples, ``lengths == 0``, blank provenance."""
    from audiotree.provenance import encode_strings

    metadata = template.provenance
    if "filepath" in metadata:
        metadata["filepath"] = encode_strings([""])
    if "offset" in metadata:
        metadata["offset"] = np.full((1,), np.nan)
    waveform = np.zeros(template.waveform.shape[:-1] + (0,), dtype=template.waveform.dtype)
    updates: dict = {"waveform": waveform, "lengths": np.zeros((1,), np.int32), "_metadata": metadata}
    if template.lufs is not None:
        updates["lufs"] = np.full((1,), -np.inf, np.float32)
    if template.lufs_windows is not None:
        updates["lufs_windows"] = np.zeros((1, 0), np.float32)
    filler = template.replace(**updates)
    extras = getattr(template, "extras", None)
    if extras:
        filler = filler.replace_extras(**{name: neutral_label(value) for name, value in extras.items()})
    return filler


def neutral_label(value: Any) -> Any:
    """A filler slot's label shaped like ``value``: -1 (integers), NaN (floats), False (booleans), "" (text)."""
    if isinstance(value, str):
        return ""
    if isinstance(value, (list, tuple)):
        return type(value)(neutral_label(v) for v in value)
    array = np.asarray(value)
    kind = array.dtype.kind
    if kind == "i":
        return np.full(array.shape, -1, dtype=array.dtype)
    if kind in "fc":
        return np.full(array.shape, np.nan, dtype=array.dtype)
    if kind in "USO":
        return np.full(array.shape, "", dtype=array.dtype if kind != "O" else object)
    return np.zeros_like(array)  # unsigned, booleans and the rest: zeros


def _sample_rate_of(items: Any) -> int | None:
    """The output rate of items built by our builders (``None`` when unknown)."""
    plan = _item_plan(items)
    return None if plan is None else plan.sample_rate


def _round_edges(edges: Any, rate: int, multiple: int) -> np.ndarray:
    """Edges (seconds) rounded up to a whole multiple of ``multiple`` samples at ``rate``."""
    e = np.asarray(edges, dtype=np.float64)
    samples = np.ceil(np.round(e * rate, 6) / multiple) * multiple
    return np.unique(samples / rate)


@renamed_keywords(seed="shuffle_seed", **MOVED_TO_BUCKET_CONFIG)
def batch_by_duration(
    items: grain.MapDataset,
    durations: Sequence[float] | Mapping[str, float] | None = None,
    bucketing: BucketConfig | None = None,
    *,
    shuffle_seed: int = 0,
    num_epochs: int | None = None,
    groups: Sequence[str] | None = None,
    shard_options: Any = None,
    plan: BucketPlan | None = None,
    pad_to: Literal["bucket", "longest"] = "bucket",
    pad_multiple: int = 1,
) -> grain.MapDataset:
    """Duration-bucketed batches of whole utterances, as a Grain ``MapDataset``.

    Args:
      items: a ``MapDataset`` of batch-of-1 items, e.g.
        ``create_audio_dataset(corpus=Corpus(index="corpus.parquet"), duration=None)`` (an
        index of files or of segments) or ``create_audio_dataset(filepaths=files,
        duration=None)``. Shuffled or not, endless or not: batch_by_duration
        owns the order (it reads epoch ``e``'s item ``i`` wherever the items'
        own order put it, as the builder's plan, ``items.plan``, says). Transforms mapped over it
        (``items.map(f)``) run per item.
      durations: seconds per item in the items' file (row) order; default:
        the index's ``duration`` column when ``items`` was built from an index
        (segments: each segment's length). Plain folders need them:
        ``scan_durations(files)``. Planning reads no audio.
      bucketing: the batches' size (``max_seconds``: padded seconds of audio
        per batch, all hosts together), buckets, order and policies: a
        :class:`~audiotree.sources.BucketConfig`, the one :func:`~audiotree.sources.plan_buckets` takes
        (its ``weights`` may be a :class:`~audiotree.sources.WeightSchedule` whose keys count batches).
      shuffle_seed, groups: see :func:`~audiotree.sources.plan_buckets`.
      num_epochs: epochs of the plan; ``None`` repeats forever.
      shard_options: a ``grain.sharding.ShardOptions`` to split every batch
        across hosts (host ``i`` of ``n`` gets slots ``i::n``); ``None``: one host.
      plan: a ready :class:`BucketPlan` instead of ``durations``/``bucketing``.
      pad_to: ``"bucket"`` pads every batch to its bucket's edge (one shape per
        bucket: a jitted step compiles at most once per bucket); ``"longest"``
        to its longest item (less padding, more shapes).
      pad_multiple: pad every batch to a multiple of this many samples (e.g.
        a hop length, so frames reshape exactly). With the items' sample rate
        known (our builders' plan), the bucket edges themselves are rounded up to
        it, so ``max_seconds`` still bounds each batch.

    Returns:
      A ``MapDataset`` whose element ``k`` is a padded ``AudioTree`` with
      ``lengths`` (or ``None`` if every item of the batch was dropped by
      ``on_read_error``). ``ds.plan`` is the :class:`BucketPlan`.

    Raises:
      ValueError: see ``plan_buckets``; items that do not match the durations.
      TypeError: a keyword of an earlier release (``max_seconds=``,
        ``buckets=``, ``shuffle=``, ...), naming its spelling in ``BucketConfig``.

    >>> import tempfile, numpy as np, soundfile as sf
    >>> from audiotree.sources import BucketConfig, create_audio_dataset
    >>> folder = tempfile.mkdtemp()
    >>> files = []
    >>> for i, seconds in enumerate([0.5, 1.0, 0.7, 1.9]):
    ...     files.append(f"{folder}/{i}.wav")
    ...     sf.write(files[-1], np.zeros(int(seconds * 8000)), 8000)
    >>> items = create_audio_dataset(filepaths=files, duration=None, shuffle=False, sample_rate=8000)
    >>> batches = batch_by_duration(items, [0.5, 1.0, 0.7, 1.9], BucketConfig(max_seconds=4, buckets=[1.0, 2.0]))
    >>> sorted((b.waveform.shape, sorted(b.lengths.tolist())) for b in (batches[0], batches[1]))
    [((2, 1, 16000), [0, 15200]), ((4, 1, 8000), [0, 4000, 5600, 8000])]
    """
    if pad_to not in _PAD_TO:
        raise ValueError(f"pad_to must be one of {_PAD_TO}, got {pad_to!r}.")
    shard_index, shard_count = 0, 1
    if shard_options is not None:
        shard_index, shard_count = check_shard_options(shard_options)
    if not is_int(pad_multiple) or pad_multiple < 1:
        raise ValueError(f"pad_multiple must be a positive int of samples, got {pad_multiple!r}.")
    if plan is None:
        if bucketing is None:
            raise ValueError("batch_by_duration needs bucketing=BucketConfig(max_seconds=...) (padded seconds per "
                             "batch), or a ready plan=.")
        if not isinstance(bucketing, BucketConfig):
            raise TypeError(f"bucketing must be a BucketConfig, got {type(bucketing).__name__}.")
        if durations is None:
            durations = durations_of(items)
        rate = _sample_rate_of(items) if pad_multiple > 1 else None
        if rate is not None and not isinstance(bucketing.buckets, numbers.Integral):
            bucketing = dataclasses.replace(bucketing, buckets=_round_edges(bucketing.buckets, rate, pad_multiple))
        plan = plan_buckets(durations, bucketing, shuffle_seed=shuffle_seed, groups=groups, num_shards=shard_count)
        if rate is not None and isinstance(bucketing.buckets, numbers.Integral):
            edges = _round_edges(plan.edges, rate, pad_multiple)
            if edges[-1] <= plan.max_seconds + 1e-9:  # else the rounding happens when each batch is padded
                plan = plan_buckets(durations, dataclasses.replace(bucketing, buckets=edges), shuffle_seed=shuffle_seed,
                                    groups=groups, num_shards=shard_count)
    elif durations is not None or bucketing is not None:
        raise ValueError("Pass either plan= or durations=/bucketing=, not both.")
    elif plan.num_shards != shard_count:
        raise ValueError(f"The plan splits batches over {plan.num_shards} hosts, but shard_options has {shard_count}.")
    ds = DurationBatchDataset(items, plan, num_epochs=num_epochs, pad_to=pad_to, shard_index=shard_index,
                              pad_multiple=pad_multiple)
    from audiotree.sources.audio_datasets import AudioMapDataset

    # Size read buffers in bytes of batches, not Grain's 500 elements: from the
    # items' own estimate when they carry one, else for the worst case we serve
    # (max_seconds of 48 kHz stereo float32 per batch).
    known = next((node for node in _walk(items) if isinstance(node, AudioMapDataset)), None)
    if known is not None:
        per_batch = known.item_bytes * int(np.ceil(plan.batch_sizes.mean() / shard_count))
    else:
        per_batch = int(math.ceil(plan.max_seconds / shard_count * WORST_CASE_BYTES_PER_SECOND))
    wrapped = AudioMapDataset(ds, item_bytes=per_batch, plan=plan)
    if shard_count > 1:  # every host reads its slice of every batch: checkpoints resume on the same host count
        from audiotree.sources.global_stream import HostShare

        wrapped.host_share = HostShare(None, shard_index, shard_count)
    return wrapped

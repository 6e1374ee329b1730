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

import math
import sys
from typing import Any, Literal, Mapping, Sequence

import grain
import numpy as np

from audiotree.sources.bucketing import DEFAULT_NUM_BUCKETS, FILLER, BucketPlan, endless_length, plan_buckets

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


def _check_items(items: Any, plan: BucketPlan) -> int:
    if not isinstance(items, grain.MapDataset):
        raise TypeError(f"items must be a grain.MapDataset of AudioTree items, got {type(items).__name__}.")
    n = len(items)
    if n >= sys.maxsize:
        raise ValueError(
            "items is endless; build it with num_epochs=1 and shuffle=False (one item per duration, in order): "
            "batch_by_duration plans the epochs and the shuffling itself."
        )
    if n != plan.num_items:
        raise ValueError(
            f"items has {n} elements but {plan.num_items} durations were planned; give one duration per item, "
            "in the items' order."
        )
    from audiotree.sources.ordering import EpochShuffledMapDataset

    for node in _walk(items):
        if isinstance(node, EpochShuffledMapDataset) and node._shuffle:  # pylint: disable=protected-access
            raise ValueError(
                "items is shuffled, so item i is no longer the file of durations[i]; build it with shuffle=False "
                "(batch_by_duration shuffles with its own seed)."
            )
    return n


class DurationBatchDataset(grain.MapDataset):
    """Batches of ``items`` as planned by ``plan``; see the module docstring.

    Filler slots (``remainder="pad"``, or items dropped by ``on_read_error``)
    are empty items: zeros, ``lengths == 0``, ``filepath == ""``, ``offset``
    NaN, with the labels and ``extras`` of the batch's first real item (so the
    batch keeps one structure). Weight losses by ``lengths > 0`` or use
    :meth:`~audiotree.AudioTree.mask`.
    """

    def __init__(self, items: grain.MapDataset, plan: BucketPlan, *, num_epochs: int | None = None,
                 pad_to: str = "bucket", shard_index: int = 0):
        super().__init__(items)
        self._n = _check_items(items, plan)
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
        return self._parent[epoch * self._n + int(item)]

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
        pad_to = edge_samples if self.pad_to == "bucket" else None
        return AudioTree.batch(filled, pad_to=pad_to)


def _crop(tree: Any, samples: int) -> Any:
    """The first ``samples`` samples of a batch-of-1 item (its ``lengths`` capped)."""
    lengths = None if tree.lengths is None else np.minimum(np.asarray(tree.lengths), samples).astype(np.int32)
    # Loudness and codes described the whole file: cleared.
    return tree._invalidate_derived(waveform=tree.waveform[..., :samples], lengths=lengths)  # pylint: disable=protected-access


def _stamp_group(tree: Any, name: str) -> Any:
    from audiotree.provenance import encode_strings

    metadata = dict(tree._metadata)  # pylint: disable=protected-access
    metadata["source"] = encode_strings([name] * tree.batch_size)
    return tree.replace(_metadata=metadata)


def _filler(template: Any) -> Any:
    """An empty slot shaped like ``template``: no samples, ``lengths == 0``, blank provenance."""
    from audiotree.provenance import encode_strings

    metadata = dict(template._metadata)  # pylint: disable=protected-access
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
    return template.replace(**updates)


def batch_by_duration(
    items: grain.MapDataset,
    durations: Sequence[float] | Mapping[str, float] | None = None,
    *,
    max_seconds: float | None = None,
    buckets: int | Sequence[float] = DEFAULT_NUM_BUCKETS,
    pad_to: Literal["bucket", "longest"] = "bucket",
    seed: int = 0,
    num_epochs: int | None = None,
    shuffle: bool = True,
    too_long: Literal["raise", "crop", "skip"] = "raise",
    remainder: Literal["pad", "drop", "keep"] = "pad",
    groups: Sequence[str] | None = None,
    weights: Mapping[str, float] | None = None,
    weight_by: Literal["duration", "count"] = "duration",
    shard_options: Any = None,
    plan: BucketPlan | None = None,
) -> grain.MapDataset:
    """Duration-bucketed batches of whole utterances, as a Grain ``MapDataset``.

    Args:
      items: a ``MapDataset`` of batch-of-1 items, one per duration, in the
        same order and unshuffled, e.g. ``create_audio_dataset(filepaths=files,
        duration=None, shuffle=False)``. Transforms mapped over it run per item.
      durations: seconds per item (an index's ``duration`` column, or
        ``scan_durations(files)``); planning reads no audio.
      max_seconds: padded seconds of audio per batch (all hosts together).
      buckets: bucket count (edges minimising padding) or increasing edges, s.
      pad_to: ``"bucket"`` pads every batch to its bucket's edge (one shape per
        bucket: a jitted step compiles at most once per bucket); ``"longest"``
        to its longest item (less padding, more shapes).
      seed, shuffle, too_long, remainder, groups, weights, weight_by: see
        :func:`~audiotree.sources.bucketing.plan_buckets`.
      num_epochs: epochs of the plan; ``None`` repeats forever.
      shard_options: a ``grain.sharding.ShardOptions`` to split every batch
        across hosts (host ``i`` of ``n`` gets slots ``i::n``); ``None``: one host.
      plan: a ready :class:`BucketPlan` instead of the planning arguments.

    Returns:
      A ``MapDataset`` whose element ``k`` is a padded ``AudioTree`` with
      ``lengths`` (or ``None`` if every item of the batch was dropped by
      ``on_read_error``). ``ds.plan`` is the plan.

    Raises:
      ValueError: see ``plan_buckets``; items that do not match the durations.

    >>> import tempfile, numpy as np, soundfile as sf
    >>> from audiotree.sources import create_audio_dataset
    >>> folder = tempfile.mkdtemp()
    >>> files = []
    >>> for i, seconds in enumerate([0.5, 1.0, 0.7, 1.9]):
    ...     files.append(f"{folder}/{i}.wav")
    ...     sf.write(files[-1], np.zeros(int(seconds * 8000)), 8000)
    >>> items = create_audio_dataset(filepaths=files, duration=None, shuffle=False, sample_rate=8000)
    >>> batches = batch_by_duration(items, [0.5, 1.0, 0.7, 1.9], max_seconds=4, buckets=[1.0, 2.0])
    >>> sorted((b.waveform.shape, sorted(b.lengths.tolist())) for b in (batches[0], batches[1]))
    [((2, 1, 16000), [0, 15200]), ((4, 1, 8000), [0, 4000, 5600, 8000])]
    """
    if pad_to not in _PAD_TO:
        raise ValueError(f"pad_to must be one of {_PAD_TO}, got {pad_to!r}.")
    shard_index, shard_count = 0, 1
    if shard_options is not None:
        shard_index, shard_count = int(shard_options.shard_index), int(shard_options.shard_count)
        if not 0 <= shard_index < shard_count:
            raise ValueError(f"shard_index must be in [0, {shard_count}), got {shard_index}.")
    if plan is None:
        if durations is None or max_seconds is None:
            raise ValueError("batch_by_duration needs durations= and max_seconds= (or a ready plan=).")
        plan = plan_buckets(
            durations, max_seconds=max_seconds, buckets=buckets, seed=seed, shuffle=shuffle, too_long=too_long,
            remainder=remainder, groups=groups, weights=weights, weight_by=weight_by, num_shards=shard_count,
        )
    elif durations is not None or max_seconds is not None:
        raise ValueError("Pass either plan= or durations=/max_seconds=, not both.")
    elif plan.num_shards != shard_count:
        raise ValueError(f"The plan splits batches over {plan.num_shards} hosts, but shard_options has {shard_count}.")
    ds = DurationBatchDataset(items, plan, num_epochs=num_epochs, pad_to=pad_to, shard_index=shard_index)
    from audiotree.sources.memory import AudioMapDataset

    # Size read buffers in bytes of batches, not Grain's 500 elements: from the
    # items' own estimate when they carry one, else for the worst case we serve
    # (max_seconds of 48 kHz stereo float32 per batch).
    known = next((node for node in _walk(items) if isinstance(node, AudioMapDataset)), None)
    if known is not None:
        per_batch = known.item_bytes * int(np.ceil(plan.batch_sizes.mean() / shard_count))
    else:
        per_batch = int(math.ceil(plan.max_seconds / shard_count * WORST_CASE_BYTES_PER_SECOND))
    wrapped = AudioMapDataset(ds, item_bytes=per_batch)
    wrapped.plan = plan
    return wrapped

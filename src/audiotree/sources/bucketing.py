"""Duration-bucketed batches of whole utterances, planned up front.

The plan
--------
:class:`BucketPlan` turns a sequence of item durations (seconds; from the corpus
index's ``duration`` column, or :func:`~audiotree.sources.scan_durations` over
the files) into batches of item indices, without reading any audio:

1. Each item goes to the smallest bucket whose *edge* (seconds) is at least its
   duration. Every batch of bucket ``b`` holds ``batch_sizes[b] =
   floor(max_seconds / edge_b)`` items (rounded down to a multiple of the host
   count) and is padded to ``edge_b`` seconds, so a batch never holds more
   than ``max_seconds`` of padded audio and a jitted step sees one shape per
   bucket: it compiles at most ``len(edges)`` times.
2. Epoch ``e`` orders the items with a permutation keyed on ``(seed, e)``,
   fills each bucket's batches in that order, then shuffles the batches (same
   key), so buckets interleave. The items left over by a bucket's last,
   partial batch ride up into the next bucket (they fit, at a little more
   padding). With ``remainder="pad"`` they stay when filling their batch with
   *filler* slots (empty items, ``lengths == 0``) pads fewer seconds than
   riding up would. The longest bucket's leftovers are padded with filler
   (``"pad"``), dropped (``"drop"``) or kept as a short batch (``"keep"``:
   one more shape).
3. With ``groups`` and ``weights``, epoch ``e`` instead draws from each group
   its share of the epoch, by seconds of audio (``weight_by="duration"``) or by
   item count (``"count"``): group ``g`` walks its own permutations keyed on
   ``(seed, e, g)``, so small groups are revisited and large ones subsampled.

Everything is a pure function of ``(seed, epoch)``: batch ``k`` is the same for
any number of Grain or PyTorch workers, a checkpoint is just the batch index
(Grain's ``get_state``/``set_state`` work unchanged), and the plan of a
resumed run is recomputed, never stored. Hosts split every batch (host ``i``
of ``n`` gets slots ``i, i + n, ...``), so all hosts see the same bucket at
the same step with disjoint items.

Default edges (``buckets=<int>``) minimise the total padded seconds of the
corpus over all choices of that many edges (an exact dynamic program on the
durations rounded up to a 10 ms grid). Planning an epoch is ``O(n log n)``
NumPy work (~tens of ms for 10^5 items), done once per epoch per process.

Reading the plan: :func:`batch_by_duration` maps it over an item dataset
(whole files in the order of the durations) and returns a Grain
``MapDataset`` whose element ``k`` is a padded :class:`~audiotree.AudioTree`.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from audiotree.io.byte_cache import BoundedCache, FirstInFirstOut
from audiotree.process_local import ProcessLocal
from audiotree.validation import is_int, is_real, renamed_keywords

__all__ = ["BucketConfig", "BucketPlan", "plan_buckets", "optimal_bucket_edges", "DEFAULT_NUM_BUCKETS", "FILLER"]

#: Buckets used when ``buckets`` is not given.
DEFAULT_NUM_BUCKETS = 16
#: The index of a filler slot (an empty item that keeps a bucket's batch size fixed).
FILLER = -1
_GRID_SECONDS = 0.01
_MAX_GRID = 640
_TOO_LONG = ("raise", "crop", "skip")
_REMAINDER = ("pad", "drop", "keep")
_WEIGHT_BY = ("duration", "count")


# ------------------------------------------------------------------ edges
def optimal_bucket_edges(durations: Sequence[float], num_buckets: int) -> np.ndarray:
    """Bucket edges (seconds, increasing) minimising the padded seconds of ``durations``.

    Durations are rounded up to a grid of 10 ms (coarser for long ranges: at
    most 640 points); among edges on that grid the choice is exact. The
    last edge is the longest duration (rounded up). Fewer edges come back when
    there are fewer distinct grid values than ``num_buckets``.

    >>> optimal_bucket_edges([1.0, 1.0, 2.0, 9.0], 2).tolist()
    [2.0, 9.0]
    """
    d = np.asarray(durations, dtype=np.float64)
    k = _check_count("buckets", num_buckets)
    if d.size == 0:
        raise ValueError("Cannot choose bucket edges for an empty list of durations.")
    lo, hi = float(d.min()), float(d.max())
    step = max(_GRID_SECONDS, (hi - lo) / _MAX_GRID)
    grid = np.ceil(np.round(d / step, 6)) * step
    values, counts = np.unique(grid, return_counts=True)
    m = values.size
    k = min(k, m)
    cum = np.concatenate([[0], np.cumsum(counts)])
    # cost[i, j]: items of grid values i..j padded to values[j]  (i <= j)
    i_idx = np.arange(m)[:, None]
    j_idx = np.arange(m)[None, :]
    cost = np.where(i_idx <= j_idx, (cum[1:][None, :] - cum[:-1][:, None]) * values[None, :], np.inf)
    best = cost[0].copy()  # one bucket covering 0..j
    choice = []
    for _ in range(1, k):
        # best_new[j] = min over i >= 1 of best[i - 1] + cost[i, j]
        total = best[:-1, None] + cost[1:, :]
        arg = np.argmin(total, axis=0)
        choice.append(arg + 1)
        best = total[arg, np.arange(m)]
    edges = [m - 1]
    for starts in reversed(choice):
        edges.append(int(starts[edges[-1]]) - 1)
    return np.round(values[np.array(sorted(edges))], 6)


# ----------------------------------------------------------------- checks
def _check_count(name: str, value: Any) -> int:
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")
    return int(value)


def _check_seconds(name: str, value: Any) -> float:
    if not is_real(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}.")
    return float(value)


def _choice(name: str, value: Any, allowed: tuple) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}.")
    return value


def _as_durations(durations: Any) -> tuple[np.ndarray, list[str] | None]:
    """(durations array, item names or None) from a sequence or a ``{name: seconds}`` mapping."""
    names = None
    if isinstance(durations, Mapping):
        names = [str(k) for k in durations]
        durations = list(durations.values())
    d = np.asarray(durations, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError(f"durations must be a non-empty 1-D sequence of seconds, got shape {d.shape}.")
    bad = np.flatnonzero(~np.isfinite(d) | (d <= 0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"Item {_name(names, i)} has duration {d[i]!r} s; every duration must be positive and finite "
            f"({bad.size} bad item(s)). Re-scan the file or drop it from the corpus."
        )
    return d, names


def _name(names: list[str] | None, i: int) -> str:
    return f"{i} ({names[i]})" if names else str(i)


def _check_edges(edges: Any) -> np.ndarray:
    e = np.asarray(edges, dtype=np.float64)
    if e.ndim != 1 or e.size == 0:
        raise ValueError(f"buckets must be an int or a non-empty list of edges in seconds, got {edges!r}.")
    if not np.all(np.isfinite(e)) or e[0] <= 0:
        raise ValueError(f"Bucket edges must be positive, finite seconds, got {e.tolist()}.")
    if np.any(np.diff(e) <= 0):
        i = int(np.flatnonzero(np.diff(e) <= 0)[0])
        raise ValueError(
            f"Bucket edges must be strictly increasing, but edge {i + 1} ({e[i + 1]} s) follows {e[i]} s: "
            f"{e.tolist()}. Sort them and remove duplicates."
        )
    return e


# ------------------------------------------------------------------ plan
@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """One epoch's batches: ``batches[k]`` item indices (``FILLER`` = empty slot), ``buckets[k]`` its bucket."""

    batches: tuple
    buckets: np.ndarray

    def __len__(self) -> int:
        return len(self.batches)


def _epoch_cache() -> BoundedCache:
    """The three most recently planned epochs of a :class:`BucketPlan`, per process."""
    return BoundedCache("bucket_epochs", max_entries=3, policy=FirstInFirstOut)


class BucketPlan(ProcessLocal):
    """Batches of item indices by duration bucket: a pure function of ``(shuffle_seed, epoch)``.

    Build it with :func:`plan_buckets`. See the module docstring for the
    algorithm. Picklable (caches are per process and rebuilt on demand).

    Attributes:
      durations: ``(n,)`` seconds per item, as planned (cropped items at the top edge).
      edges: ``(K,)`` increasing bucket edges, seconds; batches of bucket ``b`` are
        padded to ``edges[b]``.
      batch_sizes: ``(K,)`` slots per batch of each bucket (all hosts together).
      bucket_of: ``(n,)`` bucket of each item, ``-1`` for skipped items.
    """

    #: Rebuilt fresh in every process this object is unpickled in (see audiotree.process_local).
    process_local = {"_lock": threading.Lock, "_cache": lambda: _epoch_cache(), "_starts": lambda: [0]}

    def __init__(self, durations, *, edges, max_seconds, shuffle_seed, shuffle, remainder, groups, weight_by,
                 num_shards, names, too_long):
        self.durations = durations
        self.edges = edges
        self.max_seconds = max_seconds
        self.shuffle_seed = int(shuffle_seed)
        self.shuffle = bool(shuffle)
        self.remainder = remainder
        self.num_shards = num_shards
        self.names = names
        self.too_long = too_long
        self.weight_by = weight_by
        sizes = np.floor(max_seconds / edges + 1e-9).astype(np.int64)
        self.batch_sizes = (sizes // num_shards) * num_shards
        if np.any(self.batch_sizes < 1):
            b = int(np.flatnonzero(self.batch_sizes < 1)[0])
            raise ValueError(
                f"max_seconds={max_seconds} holds {sizes[b]} item(s) of the {edges[b]} s bucket, fewer than the "
                f"{num_shards} hosts that split each batch; raise max_seconds to at least {edges[b] * num_shards}."
            )
        self.bucket_of = np.searchsorted(edges, durations - 1e-9, side="left")
        self.bucket_of[durations > edges[-1] + 1e-9] = -1
        self.bucket_of = self.bucket_of.astype(np.int64)
        self.kept = np.flatnonzero(self.bucket_of >= 0)
        if self.kept.size == 0:
            raise ValueError("Every item was skipped as too long; raise max_seconds or the last bucket edge.")
        # groups: None, or (group index per item, weight per group, group names)
        self.group_of, self.group_weights, self.group_names = groups if groups is not None else (None, None, None)
        self._lock = threading.Lock()
        self._cache = _epoch_cache()
        self._starts: list[int] = [0]  # batch index where each planned epoch starts

    def __repr__(self) -> str:
        return (f"BucketPlan(items={self.durations.size}, edges={self.edges.tolist()}, "
                f"batch_sizes={self.batch_sizes.tolist()}, shuffle_seed={self.shuffle_seed})")

    @property
    def num_items(self) -> int:
        return int(self.durations.size)

    @property
    def constant_epochs(self) -> bool:
        """True when every epoch has the same number of batches (no group sampling)."""
        return self.group_of is None

    # ------------------------------------------------------------ epochs
    def _epoch_items(self, epoch: int) -> np.ndarray:
        """The item indices of ``epoch`` in their epoch order."""
        rng = np.random.default_rng([self.shuffle_seed, epoch, 0])
        if self.group_of is None:
            return rng.permutation(self.kept) if self.shuffle else self.kept
        chosen = []
        total = self.durations[self.kept].sum() if self.weight_by == "duration" else float(self.kept.size)
        share = self._shares(epoch)
        for g in range(share.size):
            members = self.kept[self.group_of[self.kept] == g]
            target = share[g] * total
            chosen.append(self._draw_group(epoch, g, members, target))
        items = np.concatenate(chosen)
        return rng.permutation(items) if self.shuffle else np.sort(items, kind="stable")

    def _shares(self, epoch: int) -> np.ndarray:
        """Each group's share of ``epoch``: its weight, or a schedule's weights at the epoch's first batch."""
        weights = self.group_weights
        if isinstance(weights, np.ndarray):
            return weights / weights.sum()
        start = 0 if epoch == 0 else self.epoch_start(epoch)
        return weights.proportions(start)[[weights.names.index(n) for n in self.group_names]]

    def _draw_group(self, epoch: int, g: int, members: np.ndarray, target: float) -> np.ndarray:
        """Group ``g``'s share of ``epoch``: its own permutations, walked until ``target`` is reached."""
        if target <= 0:  # weight 0 (a schedule's): none of the group's items
            return members[:0]
        weights = self.durations[members] if self.weight_by == "duration" else np.ones(members.size)
        per_pass = float(weights.sum())
        passes = max(1, int(math.ceil(target / per_pass)) + 1)
        order = np.concatenate([
            np.random.default_rng([self.shuffle_seed, epoch, 1, g, k]).permutation(members.size) for k in range(passes)
        ])
        cum = np.cumsum(weights[order])
        if self.weight_by == "count":
            take = int(round(target))
        else:  # the first items whose seconds reach the target (overshoot < one item)
            take = int(np.searchsorted(cum, target - 1e-9, side="left")) + 1
        return members[order[: max(take, 1)]]

    def epoch(self, epoch: int) -> EpochPlan:
        """The batches of ``epoch`` (cached per process, a few at a time)."""
        epoch = int(epoch)
        cached = self._cache.get(epoch)
        if cached is not None:
            return cached
        items = self._epoch_items(epoch)
        buckets = self.bucket_of[items]
        batches: list[np.ndarray] = []
        labels: list[int] = []
        carry = np.zeros(0, dtype=np.int64)  # leftovers riding up from the bucket below
        last = self.edges.size - 1
        for b in range(self.edges.size):
            members = np.concatenate([carry, items[buckets == b]]).astype(np.int64)
            size = int(self.batch_sizes[b])
            whole = (members.size // size) * size
            for start in range(0, whole, size):
                batches.append(members[start : start + size])
                labels.append(b)
            carry = members[whole:]
            if carry.size == 0:
                continue
            if b < last:
                # Leftovers ride up into the next bucket (they fit: edges increase)
                # unless filling this bucket's batch with filler pads less.
                up = carry.size * float(self.edges[b + 1])
                if self.remainder != "pad" or up < size * float(self.edges[b]):
                    continue
            elif self.remainder == "drop":
                continue
            if self.remainder == "pad":
                carry = np.concatenate([carry, np.full(size - carry.size, FILLER, dtype=np.int64)])
            batches.append(carry)
            labels.append(b)
            carry = np.zeros(0, dtype=np.int64)
        order = np.random.default_rng([self.shuffle_seed, epoch, 2]).permutation(len(batches)) if self.shuffle \
            else np.arange(len(batches))
        plan = EpochPlan(tuple(batches[i] for i in order), np.asarray(labels, dtype=np.int64)[order])
        self._cache.put(epoch, plan)
        return plan

    def batches_in_epoch(self, epoch: int) -> int:
        """Batches of ``epoch`` (the same for every epoch without groups)."""
        return len(self.epoch(0 if self.constant_epochs else epoch))

    def epoch_start(self, epoch: int) -> int:
        """Global batch index where ``epoch`` starts."""
        if self.constant_epochs:
            return int(epoch) * self.batches_in_epoch(0)
        while True:  # each start is published before the next epoch is planned (a schedule reads it)
            with self._lock:
                starts = list(self._starts)
            if len(starts) > epoch:
                return starts[epoch]
            batches = len(self.epoch(len(starts) - 1))
            with self._lock:
                if len(self._starts) == len(starts):
                    self._starts.append(starts[-1] + batches)

    def locate(self, index: int) -> tuple[int, int]:
        """``(epoch, position)`` of global batch ``index``."""
        index = int(index)
        if index < 0:
            raise IndexError(f"Batch index {index} is negative.")
        if self.constant_epochs:
            return divmod(index, self.batches_in_epoch(0))
        with self._lock:
            starts = list(self._starts)
        # Jump to the last planned epoch that starts at or before index, then walk on.
        epoch = max(0, int(np.searchsorted(starts, index, side="right")) - 1)
        while self.epoch_start(epoch + 1) <= index:
            epoch += 1
        return epoch, index - self.epoch_start(epoch)

    def batch(self, index: int) -> tuple[int, np.ndarray, int]:
        """``(epoch, item indices, bucket)`` of global batch ``index``."""
        epoch, position = self.locate(index)
        plan = self.epoch(epoch)
        return epoch, plan.batches[position], int(plan.buckets[position])

    def shard(self, slots: np.ndarray, shard_index: int) -> np.ndarray:
        """Host ``shard_index``'s slots of one batch: ``slots[shard_index::num_shards]``."""
        return slots[shard_index :: self.num_shards]

    def describe(self) -> dict:
        """Padding efficiency and batch-size spread of epoch 0 (what the benchmark reports)."""
        plan = self.epoch(0)
        real = padded = 0.0
        sizes = []
        for slots, b in zip(plan.batches, plan.buckets):
            items = slots[slots != FILLER]
            real += float(np.minimum(self.durations[items], self.edges[b]).sum())
            padded += float(slots.size * self.edges[b])
            sizes.append(int(items.size))
        return {"batches": len(plan), "efficiency": real / padded if padded else 0.0,
                "batch_size_min": min(sizes), "batch_size_max": max(sizes),
                "batch_size_mean": float(np.mean(sizes)), "batch_size_std": float(np.std(sizes))}


# ------------------------------------------------------------- settings
@dataclasses.dataclass(frozen=True)
class BucketConfig:
    """How items are bucketed into batches: the settings :func:`plan_buckets` and
    :func:`~audiotree.sources.batch_by_duration` share. Validated when constructed.

    Args:
      max_seconds: padded seconds per batch across all hosts (a bucket of edge
        ``e`` holds ``floor(max_seconds / e)`` items). Must be at least the
        shortest duration.
      buckets: number of buckets (edges chosen to minimise padding, see
        :func:`optimal_bucket_edges`), or the increasing edges in seconds.
      shuffle: shuffle items and batches every epoch (``False``: file order, for
        validation; batches then come bucket by bucket).
      too_long: items longer than ``max_seconds`` or the last edge: ``"raise"``
        ``ValueError`` naming the first, ``"crop"`` them to the last edge (the
        reader keeps their first seconds), or ``"skip"`` them.
      remainder: leftovers of a bucket's last batch ride up a bucket; the
        longest bucket's (and, with ``"pad"``, any bucket's where that pads
        less) are ``"pad"``-ded with filler slots (empty items, ``lengths ==
        0``; shapes stay fixed), ``"drop"``-ped, or ``"keep"``-t as a smaller
        batch (one more shape).
      weights: ``{group: weight}`` to mix the items' groups (``groups=`` of the
        planners) by weight rather than by corpus size; groups left out weigh 1.
        Or a :class:`~audiotree.sources.WeightSchedule` (or a callable) naming
        every group, whose keys count *batches*: epoch ``e`` is planned with
        the weights at its first batch.
      weight_by: groups share each epoch by seconds of audio (``"duration"``)
        or by number of items (``"count"``).

    >>> BucketConfig(max_seconds=6, buckets=[1.5, 3.0]).buckets
    (1.5, 3.0)
    """

    max_seconds: float
    buckets: int | Sequence[float] = DEFAULT_NUM_BUCKETS
    shuffle: bool = True
    too_long: Literal["raise", "crop", "skip"] = "raise"
    remainder: Literal["pad", "drop", "keep"] = "pad"
    weights: Mapping[str, float] | Any = None
    weight_by: Literal["duration", "count"] = "duration"

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_seconds", _check_seconds("max_seconds", self.max_seconds))
        if is_int(self.buckets):
            object.__setattr__(self, "buckets", _check_count("buckets", self.buckets))
        else:
            object.__setattr__(self, "buckets", tuple(float(e) for e in _check_edges(self.buckets)))
        _choice("too_long", self.too_long, _TOO_LONG)
        _choice("remainder", self.remainder, _REMAINDER)
        _choice("weight_by", self.weight_by, _WEIGHT_BY)
        if isinstance(self.weights, Mapping):
            object.__setattr__(self, "weights", dict(self.weights))
        elif self.weights is not None and not callable(self.weights):  # a WeightSchedule, or a callable, is kept
            raise TypeError(f"weights must be a {{group: weight}} mapping or a WeightSchedule, got "
                            f"{type(self.weights).__name__}.")


#: The keywords of earlier releases that are fields of a BucketConfig now.
MOVED_TO_BUCKET_CONFIG = {field.name: f"bucketing=BucketConfig({field.name}=...)"
                          for field in dataclasses.fields(BucketConfig)}


@renamed_keywords(seed="shuffle_seed", **MOVED_TO_BUCKET_CONFIG)
def plan_buckets(
    durations: Sequence[float] | Mapping[str, float],
    bucketing: BucketConfig,
    *,
    shuffle_seed: int = 0,
    groups: Sequence[str] | None = None,
    num_shards: int = 1,
) -> BucketPlan:
    """Plans duration-bucketed batches from item durations alone (no audio is read).

    Args:
      durations: seconds per item, in item order: an index's ``duration``
        column, or ``scan_durations(files)`` (a ``{path: seconds}`` mapping,
        whose keys then name items in error messages).
      bucketing: the edges, batch size, order and policies (:class:`BucketConfig`).
      shuffle_seed: the plan's seed; epoch ``e``'s batches depend only on ``(shuffle_seed, e)``.
      groups: a group name per item, to mix groups by ``bucketing.weights``
        rather than by corpus size.
      num_shards: hosts that split every batch; batch sizes are multiples of it.

    Raises:
      ValueError: bad durations, ``max_seconds`` below the shortest item, edges
        longer than ``max_seconds``, or a too-long item under ``too_long="raise"``.
      TypeError: a keyword of an earlier release (``max_seconds=``, ``buckets=``,
        ...), naming its spelling in :class:`BucketConfig`.

    >>> plan = plan_buckets([1.0, 1.5, 3.0, 2.9, 1.2], BucketConfig(max_seconds=6, buckets=[1.5, 3.0]), shuffle_seed=0)
    >>> plan.batch_sizes.tolist(), sorted(sorted(b.tolist()) for b in plan.epoch(0).batches)
    ([4, 2], [[-1, 0, 1, 4], [2, 3]])
    """
    if not isinstance(bucketing, BucketConfig):
        raise TypeError(f"bucketing must be a BucketConfig, got {type(bucketing).__name__}.")
    max_seconds, buckets, shuffle = bucketing.max_seconds, bucketing.buckets, bucketing.shuffle
    too_long, remainder, weights, weight_by = bucketing.too_long, bucketing.remainder, bucketing.weights, \
        bucketing.weight_by
    d, names = _as_durations(durations)
    num_shards = _check_count("num_shards", num_shards)
    if not is_int(shuffle_seed) or shuffle_seed < 0:
        raise ValueError(f"shuffle_seed must be a non-negative int, got {shuffle_seed!r}.")
    shortest = int(np.argmin(d))
    if max_seconds < d[shortest]:
        raise ValueError(
            f"max_seconds={max_seconds} is below the shortest item, {_name(names, shortest)} at {d[shortest]:.3f} s, "
            "so no batch could hold a single item; raise max_seconds (a batch holds max_seconds of padded audio)."
        )
    if remainder == "keep" and num_shards > 1:
        raise ValueError("remainder='keep' gives hosts unequal batches; use 'pad' or 'drop' with num_shards > 1.")
    if is_int(buckets):
        limit = max_seconds
        fit = d[d <= limit + 1e-9] if too_long != "crop" else np.minimum(d, limit)
        if fit.size == 0:
            fit = np.minimum(d, limit)
        edges = optimal_bucket_edges(fit, int(buckets))
    else:
        edges = _check_edges(buckets)
    if edges[-1] > max_seconds + 1e-9:
        raise ValueError(
            f"The last bucket edge {edges[-1]} s is longer than max_seconds={max_seconds}, so its batches could not "
            "hold one item; lower the edge or raise max_seconds."
        )
    too = np.flatnonzero(d > edges[-1] + 1e-9)
    if too.size:
        i = int(too[0])
        if too_long == "raise":
            raise ValueError(
                f"Item {_name(names, i)} lasts {d[i]:.3f} s, longer than the longest bucket ({edges[-1]} s, bounded by "
                f"max_seconds={max_seconds}); {too.size} item(s) are. Pass too_long='crop' (keep their first "
                f"{edges[-1]} s) or too_long='skip', or raise max_seconds / the last edge."
            )
        if too_long == "crop":
            d = np.minimum(d, edges[-1])
    group_spec = None
    if groups is not None:
        labels = [str(g) for g in groups]
        if len(labels) != d.size:
            raise ValueError(f"groups has {len(labels)} entries for {d.size} durations; give one group per item.")
        from audiotree.sources.mixing import check_mix_weights  # the same rules as balanced datasets

        names_of_groups = sorted(set(labels))
        w = check_mix_weights(weights, names_of_groups)
        index = {name: i for i, name in enumerate(names_of_groups)}
        group_spec = (np.asarray([index[g] for g in labels], dtype=np.int64),
                      np.asarray(w) if isinstance(w, list) else w, names_of_groups)
    elif weights:
        raise ValueError("weights= needs groups= (a group name per item).")
    plan = BucketPlan(
        d, edges=edges, max_seconds=max_seconds, shuffle_seed=int(shuffle_seed), shuffle=shuffle, remainder=remainder,
        groups=group_spec, weight_by=weight_by, num_shards=num_shards, names=names, too_long=too_long,
    )
    if group_spec is not None:
        kept_groups = set(group_spec[0][plan.kept].tolist())
        empty = [n for i, n in enumerate(group_spec[2]) if i not in kept_groups]
        if empty:
            raise ValueError(f"Groups {empty} have no items left after too_long='skip'.")
    return plan


def endless_length(num_epochs: int | None, plan: BucketPlan) -> int:
    """Batches in ``num_epochs`` epochs of ``plan`` (``sys.maxsize`` for ``None``)."""
    if num_epochs is None:
        return sys.maxsize
    return plan.epoch_start(int(num_epochs))

"""Weighted mixing that stays mixed at every scale, for any worker count.

Grain's ``MapDataset.mix`` interleaves its components in a fixed, proportional
pattern. ``mp_prefetch`` hands worker ``w`` of ``k`` the indices
``w, w + k, w + 2k, ...``, and a periodic pattern sampled with stride ``k`` can
alias into runs of one source: batches built inside workers came out 32/0/0,
0/20/12, ... in the published AudioTree 1.0.

:class:`ShuffledProportionalSelection` is a Grain ``DatasetSelectionMap``:

1. The stream is cut into blocks of ``block_size`` positions (default 4096).
   Group ``g`` gets ``floor(n * p_g)`` of the first ``n = b * block_size``
   positions (the largest group takes the remainder), so every block holds each
   group in proportion to its weight, to within a few items; over 10,000 items
   the totals match the weights to a fraction of a percent.
2. Inside a block, the group labels are shuffled with a generator seeded by
   ``(seed, block)``. Any subset of a block's positions (a batch of 32
   consecutive items, or every ``k``-th item for a worker) is therefore a
   uniformly random draw without replacement: per-batch counts follow a
   hypergeometric law, slightly tighter than independent draws from the weights.
3. Each group's items are consumed **in that group's own order**: position ``i``
   maps to item ``j`` of group ``g`` where ``j`` counts the earlier ``g``
   positions. So a group's stream, and every file visit in it, does not change
   when other groups are added, and each file of a finite group is used once
   per epoch of that group.

Everything is a pure function of the index: random access, checkpoints and
worker-count invariance are unaffected.

Scheduled weights (a :class:`~audiotree.sources.WeightSchedule`) change step 1
only: block ``b`` holds each group's mean share of the schedule over the
block's items (rounded, the error carried to the next block; see
:mod:`audiotree.sources.weight_schedule`), in blocks of the schedule's
``block_size``. Steps 2 and 3 are unchanged, so the mix is still a pure
function of ``(seed, index)`` and a group's position is a lookup in cached
running counts, never a walk from item 0.

:func:`realised_proportions` reads the group of every item of a mixed dataset
(no audio is loaded) and reports each group's share per window of items next
to the share the weights ask for.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Mapping, NamedTuple, Sequence

import grain
import numpy as np

from audiotree.seeds import epoch_rng
from audiotree.io.byte_cache import BoundedCache, FirstInFirstOut
from audiotree.sources.weight_schedule import ScheduledCounts, WeightSchedule, as_schedule
from audiotree.validation import is_int, is_real

__all__ = ["ShuffledProportionalSelection", "mix_shuffled", "check_weights", "DEFAULT_BLOCK_SIZE",
           "realised_proportions", "MixProportions", "check_mix_weights"]

DEFAULT_BLOCK_SIZE = 4096
#: Blocks scanned for the end of a finite group under a callable schedule before giving up.
_MAX_SCAN_BLOCKS = 1 << 16


class ShuffledProportionalSelection(grain.transforms.DatasetSelectionMap):
    """Maps mixed index -> (group, index within group); see the module docstring."""

    def __init__(self, lengths: Sequence[int], weights: Sequence[float] | WeightSchedule, *, seed: int,
                 block_size: int = DEFAULT_BLOCK_SIZE, names: Sequence[str] | None = None):
        schedule = as_schedule(weights)
        self._counts: ScheduledCounts | None = None
        if schedule is not None:
            names = list(schedule.names) if names is None else list(names)
            if len(names) != len(lengths) or not lengths:
                raise ValueError("lengths and the schedule's groups must be non-empty and of equal length.")
            block_size = schedule.block_size
            self._counts = ScheduledCounts(schedule, names, block_size)
            weights = schedule.mean(0, 1)[[list(schedule.names).index(n) for n in names]]
        elif len(lengths) != len(weights) or not lengths:
            raise ValueError("lengths and weights must be non-empty and of equal length.")
        if block_size < 4 * len(lengths):
            raise ValueError(f"block_size must be at least {4 * len(lengths)}.")
        weights = np.asarray(weights, dtype=np.float64)
        if schedule is None and (not np.all(np.isfinite(weights)) or np.any(weights <= 0)):
            raise ValueError(f"weights must be finite and > 0, got {weights.tolist()}.")
        self._p = weights / weights.sum()
        self._largest = int(np.argmax(self._p))
        self.names = None if names is None else list(names)
        self._lengths = [int(n) for n in lengths]
        if min(self._lengths) <= 0:
            raise ValueError("Every dataset in a mix must have at least one item.")
        self._seed = int(seed)
        self._block = int(block_size)
        # The most recent blocks' labels (pickled empty: a worker computes its own).
        self._cache = BoundedCache("mix_blocks", max_entries=8, policy=FirstInFirstOut)
        self._length = self._compute_length()

    def _cumulative(self, n: int) -> np.ndarray:
        """Items of each group among the first ``n`` positions (``n`` a block boundary)."""
        if self._counts is not None:
            return self._counts.at(n // self._block)
        counts = np.floor(n * self._p).astype(np.int64)
        counts[self._largest] += n - int(counts.sum())
        return counts

    def _labels(self, block: int) -> tuple[np.ndarray, np.ndarray]:
        """(group label, index within group) for every position of ``block``."""
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        start = self._cumulative(block * self._block)
        counts = self._cumulative((block + 1) * self._block) - start
        labels = np.repeat(np.arange(len(self._p)), counts)
        epoch_rng(self._seed, block).shuffle(labels)
        inner = np.empty(labels.shape[0], dtype=np.int64)
        for g in range(len(self._p)):
            where = np.flatnonzero(labels == g)
            inner[where] = start[g] + np.arange(where.shape[0])
        self._cache.put(block, (labels, inner))
        return labels, inner

    def _compute_length(self) -> int:
        lengths = np.asarray(self._lengths, dtype=np.float64)
        if min(self._lengths) >= sys.maxsize:
            return sys.maxsize
        if self._counts is not None:
            block = self._last_whole_block(lengths)
            if block is None:
                return sys.maxsize
            return self._length_in(block, lengths)
        # Whole blocks that fit every group, then the longest prefix of the next.
        estimate = int(min(lengths / self._p))
        block = max(estimate // self._block - 1, 0)
        while block > 0 and not np.all(self._cumulative(block * self._block) <= lengths):
            block -= 1
        while np.all(self._cumulative((block + 1) * self._block) <= lengths):
            block += 1
        return self._length_in(block, lengths)

    def _length_in(self, block: int, lengths: np.ndarray) -> int:
        """The mix's length when ``block`` is the first block some group cannot fill."""
        labels, inner = self._labels(block)
        fits = inner < lengths[labels]
        prefix = int(np.argmin(fits)) if not fits.all() else labels.shape[0]
        return min(block * self._block + prefix, sys.maxsize)

    def _last_whole_block(self, lengths: np.ndarray) -> int | None:
        """Scheduled: the first block some finite group cannot fill (``None``: none ever runs out)."""
        def fits(b: int) -> bool:
            return bool(np.all(self._cumulative((b + 1) * self._block) <= lengths))

        counts = self._counts
        horizon = counts.horizon_block
        scan = _MAX_SCAN_BLOCKS if horizon is None else horizon + 1
        if horizon is not None:
            counts.at(horizon)  # the running counts up to the last key in one vectorised step, not per probe
        for b in range(scan):
            if not fits(b):
                return b
        if horizon is None:
            raise ValueError(
                f"A finite group does not run out within {scan * self._block} items under the callable schedule; "
                "make every group endless (num_epochs=None) or give the schedule as WeightSchedule points.")
        finite = lengths < sys.maxsize
        if not np.any(counts.final[finite] > 0):
            return None  # the finite groups weigh 0 from the last key on: the endless ones go on alone
        lo, step = horizon + 1, 1
        while fits(lo + step):
            step *= 2
        hi = lo + step  # fits(lo - 1) and not fits(hi)
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> tuple[int, int]:
        if index < 0:
            index += self._length
        block, position = divmod(int(index), self._block)
        labels, inner = self._labels(block)
        return int(labels[position]), int(inner[position])


    def groups(self, start: int, stop: int) -> np.ndarray:
        """The group (an index into the mix's groups) of every position ``start .. stop - 1``."""
        out = []
        for block in range(start // self._block, -(-stop // self._block)):
            lo = block * self._block
            labels = self._labels(block)[0]
            out.append(labels[max(start - lo, 0): stop - lo])
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def expected(self, start: int, stop: int) -> np.ndarray:
        """The share of every group that the weights ask for over positions ``start .. stop - 1``."""
        if self._counts is None:
            return self._p.copy()
        schedule = self._counts.schedule
        return schedule.mean(start, stop)[[list(schedule.names).index(n) for n in self.names]]


def mix_shuffled(
    datasets: Sequence[grain.MapDataset], weights: Sequence[float] | WeightSchedule, *, seed: int,
    block_size: int = DEFAULT_BLOCK_SIZE, names: Sequence[str] | None = None,
) -> grain.MapDataset:
    """Mixes ``datasets`` by ``weights`` (or a schedule) with :class:`ShuffledProportionalSelection`.

    The returned dataset carries the selection as ``mix_selection`` (read by
    :func:`realised_proportions`).
    """
    if len(datasets) == 1:
        return datasets[0]
    selection = ShuffledProportionalSelection(
        [len(ds) for ds in datasets], weights, seed=seed, block_size=block_size, names=names,
    )
    mixed = grain.MapDataset.select_from_datasets(list(datasets), selection)
    mixed.mix_selection = selection
    return mixed


class MixProportions(NamedTuple):
    """Each group's share per window of items: what the mix served and what its weights ask for."""

    names: list[str]
    starts: list[int]  # the first item of each window
    window: int
    realised: np.ndarray  # (windows, groups): share of the window's items from each group
    expected: np.ndarray  # (windows, groups): the weights' mean share over the window

    def to_dict(self) -> dict:
        """JSON-ready: ``{"names", "window", "windows": [{"start", "realised": {...}, "expected": {...}}]}``."""
        return {"names": list(self.names), "window": self.window, "windows": [
            {"start": s, "realised": dict(zip(self.names, map(float, r))),
             "expected": dict(zip(self.names, map(float, e)))}
            for s, r, e in zip(self.starts, self.realised, self.expected)]}

    def worst_deviation(self) -> float:
        """The largest ``|realised - expected|`` in binomial standard deviations of a window."""
        sd = np.sqrt(np.maximum(self.expected * (1 - self.expected), 1e-12) / self.window)
        return float(np.max(np.abs(self.realised - self.expected) / sd)) if self.starts else 0.0


def find_mix(dataset: Any) -> ShuffledProportionalSelection | None:
    """The selection of the first mix found in ``dataset`` or its parents (``None``: not a mix)."""
    todo = [dataset]
    while todo:
        node = todo.pop()
        selection = getattr(node, "mix_selection", None)
        if isinstance(selection, ShuffledProportionalSelection):
            return selection
        todo.extend(getattr(node, "parents", ()) or ())
    return None


def realised_proportions(dataset: Any, stop: int, *, window: int = 100, start: int = 0) -> MixProportions:
    """Each group's share of items ``start .. stop - 1`` of a mixed dataset, per ``window`` items.

    ``dataset`` is what :func:`~audiotree.sources.create_balanced_audio_dataset`
    returned (or a ``MapDataset`` built on it). Items count the global stream
    (the unsharded dataset); no audio is read. ``expected`` holds the weights'
    (or the schedule's) mean share over each window.

    Raises:
      ValueError: ``dataset`` holds no mix of several groups, or a bad range.
    """
    selection = find_mix(dataset)
    if selection is None:
        raise ValueError("realised_proportions needs a dataset from create_balanced_audio_dataset with two or "
                         "more groups (or one built on it); this one mixes nothing.")
    for name, value in (("start", start), ("stop", stop), ("window", window)):
        if not is_int(value) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}.")
    if window < 1 or stop <= start or stop > len(selection):
        raise ValueError(f"Need window >= 1 and start < stop <= {len(selection)} (the mix's length); got "
                         f"start={start}, stop={stop}, window={window}.")
    labels = selection.groups(start, stop)
    count = len(selection.names or []) or int(labels.max()) + 1
    starts = list(range(start, stop - window + 1, window))
    realised = np.stack([np.bincount(labels[s - start: s - start + window], minlength=count) / window
                         for s in starts]) if starts else np.zeros((0, count))
    expected = np.stack([selection.expected(s, s + window) for s in starts]) if starts else np.zeros((0, count))
    names = selection.names or [str(g) for g in range(count)]
    return MixProportions(list(names), starts, int(window), realised, expected)


def check_mix_weights(weights: Any, names: Sequence[str]) -> list[float] | WeightSchedule:
    """:func:`check_weights`, or a schedule (a :class:`WeightSchedule` or a callable) checked against ``names``."""
    schedule = as_schedule(weights)
    if schedule is None:
        return check_weights(weights, names)
    if set(schedule.names) != set(names):
        missing, unknown = sorted(set(names) - set(schedule.names)), sorted(set(schedule.names) - set(names))
        raise ValueError(f"The weight schedule must name every group of the mix: the groups are {list(names)}; "
                         f"missing {missing}, unknown {unknown}.")
    return schedule


def check_weights(weights: Mapping[str, Any] | None, names: Sequence[str]) -> list[float]:
    """Group weights in the order of ``names``: missing ones are 1.0, each finite and > 0.

    >>> check_weights({"music": 3}, ["speech", "music"])
    [1.0, 3.0]
    """
    weights = dict(weights or {})
    unknown = sorted(set(weights) - set(names))
    if unknown:
        raise ValueError(f"weights name unknown groups {unknown}; the groups are {list(names)}.")
    out = []
    for name in names:
        w = weights.get(name, 1.0)
        if not is_real(w) or not math.isfinite(w) or w <= 0:
            raise ValueError(f"Weight for group {name!r} must be a finite number > 0, got {w!r}.")
        out.append(float(w))
    return out

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
"""

from __future__ import annotations

import math
import sys
from typing import Any, Mapping, Sequence

import grain
import numpy as np

from audiotree.seeds import epoch_rng
from audiotree.io.byte_cache import BoundedCache, FirstInFirstOut
from audiotree.validation import is_real

__all__ = ["ShuffledProportionalSelection", "mix_shuffled", "check_weights", "DEFAULT_BLOCK_SIZE"]

DEFAULT_BLOCK_SIZE = 4096


class ShuffledProportionalSelection(grain.transforms.DatasetSelectionMap):
    """Maps mixed index -> (group, index within group); see the module docstring."""

    def __init__(self, lengths: Sequence[int], weights: Sequence[float], *, seed: int, block_size: int = DEFAULT_BLOCK_SIZE):
        if len(lengths) != len(weights) or not lengths:
            raise ValueError("lengths and weights must be non-empty and of equal length.")
        if block_size < 4 * len(lengths):
            raise ValueError(f"block_size must be at least {4 * len(lengths)}.")
        weights = np.asarray(weights, dtype=np.float64)
        if not np.all(np.isfinite(weights)) or np.any(weights <= 0):
            raise ValueError(f"weights must be finite and > 0, got {weights.tolist()}.")
        self._p = weights / weights.sum()
        self._largest = int(np.argmax(self._p))
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
        # Whole blocks that fit every group, then the longest prefix of the next.
        estimate = int(min(lengths / self._p))
        block = max(estimate // self._block - 1, 0)
        while block > 0 and not np.all(self._cumulative(block * self._block) <= lengths):
            block -= 1
        while np.all(self._cumulative((block + 1) * self._block) <= lengths):
            block += 1
        labels, inner = self._labels(block)
        fits = inner < lengths[labels]
        prefix = int(np.argmin(fits)) if not fits.all() else labels.shape[0]
        return min(block * self._block + prefix, sys.maxsize)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> tuple[int, int]:
        if index < 0:
            index += self._length
        block, position = divmod(int(index), self._block)
        labels, inner = self._labels(block)
        return int(labels[position]), int(inner[position])


def mix_shuffled(
    datasets: Sequence[grain.MapDataset], weights: Sequence[float], *, seed: int,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> grain.MapDataset:
    """Mixes ``datasets`` by ``weights`` with :class:`ShuffledProportionalSelection`."""
    if len(datasets) == 1:
        return datasets[0]
    selection = ShuffledProportionalSelection(
        [len(ds) for ds in datasets], weights, seed=seed, block_size=block_size
    )
    return grain.MapDataset.select_from_datasets(list(datasets), selection)


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

"""A builder's plan: what it decided before building, carried by the dataset it returns as ``ds.plan``.

Every builder runs in three steps: *check* (a
:class:`~audiotree.sources.datasets.options.BuildRequest`, before anything is
read), *plan* (the files or index rows, this host's share, the per-item loader
and the epoch order: a :class:`DatasetPlan`) and *build* (the Grain graph).
The dataset keeps the plan as a public attribute, and keeps it through
per-item maps (``ds.map(f)``, ``ds.random_map(f)``, ``ds.filter(f)``), which
leave item ``i`` the item of the plan's position ``i``. Steps that move items
(``shuffle``, ``slice``, ``repeat``, ``batch``, :func:`~audiotree.sources.shard_dataset`)
return a dataset whose ``plan`` is ``None``.

Readers of the plan (``batch_by_duration``, checkpoints) use these public
attributes instead of walking Grain's graph.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["DatasetPlan"]


@dataclasses.dataclass(frozen=True, eq=False)
class DatasetPlan:
    """How item ``i`` of a builder's dataset is made.

    Attributes:
      request: the checked :class:`~audiotree.sources.datasets.options.BuildRequest`.
      sample_rate: the items' rate in Hz.
      order: the epoch order of the items
        (:class:`~audiotree.sources.epoch_order.EpochShuffledMapDataset`:
        position ``p`` of epoch ``e`` is file or row ``order.permutation(e)[p]``);
        ``None`` when the items are a mix of groups or windows.
      loader: the per-item loader mapped over ``order`` (an
        ``ExcerptLoader``, or an ``IndexedLoader`` over index rows); ``None`` for a mix.
      rows: the index rows of the items, item ``i`` of an epoch reading row
        ``order.permutation(e)[i]`` (``IndexRows``); ``None`` without an index,
        and for windows (an item is a window, not a row).
    """

    request: Any
    sample_rate: int
    order: Any = None
    loader: Any = None
    rows: Any = None

    @property
    def items_per_epoch(self) -> int | None:
        """Items of one epoch in the plan's order (``None`` without one)."""
        return None if self.order is None else int(self.order.items_per_epoch)

    @property
    def durations(self) -> np.ndarray | None:
        """Seconds per item in row order, from the index rows (``None`` without an index)."""
        return None if self.rows is None else np.asarray(self.rows.durations, dtype=np.float64)

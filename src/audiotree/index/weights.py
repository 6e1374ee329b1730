"""``Corpus(weight_by=...)``: rows drawn in proportion to a weight from the index's columns.

``weight_by`` is a numeric index column (any column ``where=`` accepts: a
quality column such as ``"snr_db"``, ``duration``, a numeric label...) or a
function that receives a mapping ``{column: float64 values of the rows}``
(columns read on first use) and returns one weight per row. Weights must be
finite and non-negative; a missing value (NaN) weighs 0.

The rows of each group (of the pool, for ``create_audio_dataset``) are then
*resampled systematically*: the group keeps its number of items ``n``, and row
``i`` fills ``n * w_i / sum(w)`` of them, rounded up or down (the ``k``-th item
is the row where the running share of the weights passes ``(k + 1/2) / n``).
No randomness is involved, so the items stay a function of
``(seed, index)`` and the same for any worker count; the dataset's own shuffle
orders them. A row whose share is under half an item may get none.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

__all__ = ["resample_positions", "row_weights"]


def resample_positions(weights, what: str = "weight_by") -> np.ndarray:
    """Positions ``0..n-1`` resampled by ``weights`` (see the module); int64 ``(n,)``, ascending.

    >>> resample_positions([1, 0, 3, 0]).tolist()
    [0, 2, 2, 2]
    >>> resample_positions([1.0, np.nan, 1.0]).tolist()
    [0, 2, 2]
    """
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    w = np.where(np.isnan(w), 0.0, w)
    if np.any(~np.isfinite(w)) or np.any(w < 0):
        bad = int(np.flatnonzero(~np.isfinite(w) | (w < 0))[0])
        raise ValueError(f"{what}: weights must be finite and >= 0, but row {bad} weighs {w[bad]!r}.")
    total = float(w.sum())
    if w.size and total <= 0:
        raise ValueError(f"{what}: every row weighs 0 (or has no value), so nothing could be drawn; choose another "
                         "weight or filter the rows with where=.")
    edges = np.cumsum(w) / total * w.size
    positions = np.searchsorted(edges, np.arange(w.size) + 0.5, side="right")
    return np.minimum(positions, w.size - 1).astype(np.int64)


class _Columns(Mapping):
    """The selected rows' columns, read from the store on first use."""

    def __init__(self, column: Callable[[str], np.ndarray], rows: np.ndarray):
        self._column, self._rows, self._cache = column, rows, {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._cache:
            self._cache[name] = self._column(name)[self._rows]
        return self._cache[name]

    def __iter__(self):
        return iter(self._cache)

    def __len__(self) -> int:
        return len(self._cache)


def row_weights(weight_by: Any, store: Any, index_path: str, meta: dict, rows: np.ndarray) -> np.ndarray:
    """The weight of each of ``rows`` (store rows) under ``weight_by`` (a column name or a function)."""
    from audiotree.index.where import index_columns

    if isinstance(weight_by, str):
        what = f"weight_by={weight_by!r}"
        return index_columns(store, index_path, meta, [weight_by], what)(weight_by)[rows]
    if not callable(weight_by):
        raise TypeError(f"weight_by must be a column name or a function of the columns, got {weight_by!r}.")
    what = f"weight_by={getattr(weight_by, '__name__', 'function')}"
    values = np.asarray(weight_by(_Columns(index_columns(store, index_path, meta, (), what), rows)), dtype=np.float64)
    if values.shape != (rows.size,):
        raise ValueError(f"{what} returned shape {values.shape}; it must return one weight per row ({rows.size},).")
    return values

"""The corpus index: scan a corpus once, start training instantly, carry labels,
know where the loud parts are.

One Parquet file, one row per audio file (see :mod:`audiotree.index.schema`):
header facts, readability, label columns and a loudness profile on BS.1770's
100 ms block grid. Build it with :func:`build_index` (or ``audiotree index``),
open it with :func:`open_index`, or hand it to the dataset builders
(``create_audio_dataset(index="corpus.parquet")``). Plain pyarrow, pandas,
polars or DuckDB read it without audiotree.

>>> import audiotree.index as ai
>>> sorted(ai.ON_STALE)
['error', 'reprobe', 'skip']
"""

from __future__ import annotations

from audiotree.index.build import IndexBuildReport, build_index
from audiotree.index.labels import LabelSource
from audiotree.index.profile import file_profile, window_blocks, window_loudness
from audiotree.index.reader import ON_STALE, CorpusIndex, StaleFileError, open_index

__all__ = [
    "build_index",
    "IndexBuildReport",
    "LabelSource",
    "open_index",
    "CorpusIndex",
    "ON_STALE",
    "StaleFileError",
    "file_profile",
    "window_loudness",
    "window_blocks",
]

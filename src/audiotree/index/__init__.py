"""The corpus index: scan a corpus once, start training instantly, carry labels,
know where the loud parts are.

One Parquet file, one row per audio file (see :mod:`audiotree.index.table_schema`):
header facts, readability, label columns and a loudness profile on BS.1770's
100 ms block grid. Build it with :func:`build_index` (or ``audiotree index``),
open it with :func:`open_index`, or hand it to the dataset builders
(``create_audio_dataset(corpus=Corpus(index="corpus.parquet"))``). Plain pyarrow, pandas,
polars or DuckDB read it without audiotree.

>>> import audiotree.index as ai
>>> sorted(ai.ON_STALE)
['raise', 'reprobe', 'skip', 'trust']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from audiotree.lazy_exports import lazy_exports

__all__ = [
    "build_index",
    "IndexBuildReport",
    "LabelSource",
    "open_index",
    "CorpusIndex",
    "ColumnStore",
    "open_columns",
    "ON_STALE",
    "StaleFileError",
    "file_profile",
    "window_loudness",
    "window_blocks",
    "read_segments",
    "import_kaldi",
    "import_lhotse",
    "import_nemo",
    "export_lhotse",
]

# Loaded on first use: a dataset opening an index must not pay for SciPy (the
# profile's filter) or the build machinery at start-up.
_LAZY = {
    "build_index": "audiotree.index.build",
    "IndexBuildReport": "audiotree.index.build",
    "LabelSource": "audiotree.index.labels",
    "open_index": "audiotree.index.reader",
    "CorpusIndex": "audiotree.index.reader",
    "ColumnStore": "audiotree.index.columns",
    "open_columns": "audiotree.index.columns",
    "ON_STALE": "audiotree.index.reader",
    "StaleFileError": "audiotree.index.reader",
    "file_profile": "audiotree.index.profile",
    "window_loudness": "audiotree.index.profile",
    "window_blocks": "audiotree.index.profile",
    "read_segments": "audiotree.index.segments",
    "import_kaldi": "audiotree.index.imports",
    "import_lhotse": "audiotree.index.imports",
    "import_nemo": "audiotree.index.imports",
    "export_lhotse": "audiotree.index.imports",
}

if TYPE_CHECKING:  # pragma: no cover
    from audiotree.index.build import IndexBuildReport, build_index
    from audiotree.index.columns import ColumnStore, open_columns
    from audiotree.index.imports import export_lhotse, import_kaldi, import_lhotse, import_nemo
    from audiotree.index.segments import read_segments
    from audiotree.index.labels import LabelSource
    from audiotree.index.profile import file_profile, window_blocks, window_loudness
    from audiotree.index.reader import ON_STALE, CorpusIndex, StaleFileError, open_index


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

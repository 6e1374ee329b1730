"""Grain datasets of audio excerpts, and the readers of pre-rendered datasets.

The public face of three subpackages, re-exported here: the builders
(:mod:`audiotree.sources.datasets`), the readers of pre-rendered data
(:mod:`audiotree.sources.readers`) and the set-up of worker processes
(:mod:`audiotree.sources.workers`). The modules at this level are the sampling
pieces the builders share (index rows, loaders, files, ordering, mixing).

Importing this module changes nothing outside it. The ``mp_prefetch`` of the
datasets built here starts workers that run from plain, unguarded scripts; see
:mod:`audiotree.sources.workers.start` for what that prepares and for which processes.
"""

from __future__ import annotations

from audiotree.lazy_exports import lazy_exports

from audiotree.errors import AudioReadError
from audiotree.excerpts.config import ExcerptConfig
from audiotree.sources.datasets.builders import create_audio_dataset, create_balanced_audio_dataset, create_windowed_audio_dataset
from audiotree.sources.datasets.by_file import shard_dataset
from audiotree.io.read_ahead import ReadAhead
from audiotree.sources.datasets.options import Corpus, Order, Output
from audiotree.sources.datasets.windowed import (
    WindowConfig,
    WindowLufsCache,
    build_window_lufs_cache,
    load_window_lufs,
    precompute_window_lufs,
    save_window_lufs,
    scan_durations,
)
from audiotree.discovery.files import find_audio_files
from audiotree.sources.global_stream import CheckpointError, checkpoint_position, merge_checkpoints
from audiotree.sources.loading import OnReadError
from audiotree.sources.mixing import MixProportions, realised_proportions
from audiotree.sources.weight_schedule import WeightSchedule

__all__ = [
    "ExcerptConfig",
    "AudioReadError",
    "OnReadError",
    "create_audio_dataset",
    "create_balanced_audio_dataset",
    "create_windowed_audio_dataset",
    "Output",
    "Order",
    "Corpus",
    "ReadAhead",
    "find_audio_files",
    "shard_dataset",
    "merge_checkpoints",
    "checkpoint_position",
    "CheckpointError",
    "build_window_lufs_cache",
    "load_window_lufs",
    "save_window_lufs",
    "precompute_window_lufs",
    "scan_durations",
    "WindowLufsCache",
    "WindowConfig",
    "AudioDataSource",
    "TreeDataSource",
    "open_render",
    "batch_by_duration",
    "plan_buckets",
    "BucketConfig",
    "BucketPlan",
    "ArrayRecordAudioSource",
    "open_arrayrecord",
    "WeightSchedule",
    "realised_proportions",
    "MixProportions",
]

# Modules loaded on first use, so `import audiotree.sources` stays quick.
_LAZY = {
    "AudioDataSource": "audiotree.sources.readers.audio",
    "TreeDataSource": "audiotree.sources.readers.tree",
    "batch_by_duration": "audiotree.sources.datasets.duration_batches",
    "plan_buckets": "audiotree.sources.bucketing",
    "BucketPlan": "audiotree.sources.bucketing",
    "BucketConfig": "audiotree.sources.bucketing",
    # Reads what `audiotree render` wrote (finished parts, in item order).
    "open_render": "audiotree.sources.readers.render_parts",
    "ArrayRecordAudioSource": "audiotree.sources.readers.arrayrecord_source",
    "open_arrayrecord": "audiotree.sources.readers.arrayrecord_source",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

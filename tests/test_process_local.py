"""State of one process is listed in a ``ProcessLocal`` table, never left out of a pickle by hand (issue 38).

A class that keeps a cache, an open file or a lock for its own process lists it
in ``process_local`` (:mod:`audiotree.process_local`); the scan below finds any
``__getstate__``/``__setstate__``/``__reduce__`` written elsewhere, and each one
that remains is listed with its reason. The classes moved to the table still
travel to a worker started by spawn, arrive without the parent's state, and read
the same items there.
"""

from __future__ import annotations

import ast
import copy
import multiprocessing
import pickle
from pathlib import Path

import grain
import numpy as np
import pytest
import soundfile

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "src" / "audiotree"
HAND_PICKLING = ("__getstate__", "__setstate__", "__reduce__", "__reduce_ex__")

# Hand-written pickling that is not per-process state, with its reason. An entry that no longer matches fails.
KNOWN_HAND_PICKLING = {
    "errors.AudioReadError.__reduce__": "an exception pickles its args only; this gives the constructor's arguments",
    "errors.ChannelMismatchError.__reduce__": "an exception pickles its args only; this gives the constructor's arguments",
    "errors.ColumnStoreError.__reduce__": "an exception pickles its args only; this gives the constructor's arguments",
    "index.reader.StaleFileError.__reduce__": "an exception pickles its args only; this gives the constructor's arguments",
    "io.excerpt.OffsetPastEndError.__reduce__": "an exception pickles its args only; this gives the constructor's arguments",
    "transforms.base.TransformFactory.__reduce__": "a transform factory pickles by reference to its module-level name",
    "sources.workers.start.WorkerInit.__reduce__": "records the pickling process's pid and prepares spawn as it pickles",
    "process_local.ExitsWithPickler.__getstate__": "the base that records the pickling process",
    "process_local.ExitsWithPickler.__setstate__": "the base that records the pickling process",
    "process_local.ProcessLocal.__getstate__": "the base itself",
    "process_local.ProcessLocal.__setstate__": "the base itself",
    "io.byte_cache.BoundedCache.__getstate__": "the one cache type: ProcessLocal's pickling, plus its settings kept",
    "io.byte_cache.BoundedCache.__setstate__": "the one cache type: ProcessLocal's pickling, plus its settings kept",
    # The on-disk range cache is shared by the processes of a machine (files, not memory): what travels is its
    # folder and limit; not yet a BoundedCache (issue 39 moves it under the read-ahead).
    "io.ranges.RangeCache.__getstate__": "an on-disk cache shared across processes: its folder and limit travel",
    "io.ranges.RangeCache.__setstate__": "an on-disk cache shared across processes: its folder and limit travel",
    "io.ranges.RemoteFolder.__getstate__": "holds the on-disk RangeCache above; its filesystem is rebuilt",
    "io.ranges.RemoteFolder.__setstate__": "holds the on-disk RangeCache above; its filesystem is rebuilt",
}


def hand_pickling(root: Path = PACKAGE_ROOT) -> set[str]:
    """``module.Class.method`` for every pickling method defined in a class body under ``root``."""
    found = set()
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        module = ".".join(parts)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in HAND_PICKLING:
                        found.add(f"{module}.{node.name}.{item.name}")
    return found


def test_per_process_state_is_listed_not_pickled_by_hand():
    found = hand_pickling()
    assert sorted(found - set(KNOWN_HAND_PICKLING)) == [], "list the state in a ProcessLocal table"
    assert sorted(set(KNOWN_HAND_PICKLING) - found) == [], "an exception outlived its reason: remove it"


def test_the_scan_can_fail(tmp_path):
    (tmp_path / "cache.py").write_text(
        "class Cache:\n    def __getstate__(self):\n        state = self.__dict__.copy()\n"
        "        state['_cache'] = {}\n        return state\n")
    assert hand_pickling(tmp_path) == {"cache.Cache.__getstate__"}


# ------------------------------------------------------------ the classes, across a spawned worker
def read(obj) -> list:
    """What each class gives: the mix's (group, index) pairs, the epochs' items, batches' files, the store's rows."""
    kind = type(obj).__name__
    if kind == "ShuffledProportionalSelection":
        return [[int(v) for v in obj[i]] for i in range(40)]
    if kind == "EpochShuffledMapDataset":
        return [int(obj[i]) for i in range(12)]
    if kind == "DurationBatchDataset":
        return [obj[i].filepath for i in range(6)]
    if kind == "ScheduledCounts":
        return [obj.at(block).tolist() for block in range(6)]
    return [float(obj.value("duration", row)) for row in range(len(obj))]


def state(obj, attr: str):
    """The per-process state of ``obj``: a ``BoundedCache``'s number of entries, or a ``ProcessLocal`` table's value."""
    from audiotree.io.byte_cache import BoundedCache

    value = getattr(obj, attr)
    return len(value) if isinstance(value, BoundedCache) else copy.copy(value)


def arrive(obj, attr: str) -> tuple:
    """In the worker: the per-process state the object arrived with, and what it reads there."""
    arrived_with = state(obj, attr)
    return arrived_with, read(obj)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("process_local")
    out = []
    for i in range(6):
        path = root / f"tone{i}.wav"
        soundfile.write(path, np.full(8000 * (i + 1) // 2, 0.1, np.float32), 8000)
        out.append(str(path))
    return out


def _objects(files, tmp_path):
    from audiotree.index import build_index
    from audiotree.index.columns import open_columns
    from audiotree.sources import BucketConfig, batch_by_duration, create_audio_dataset, scan_durations
    from audiotree.sources.datasets.duration_batches import DurationBatchDataset
    from audiotree.sources.epoch_order import EpochShuffledMapDataset
    from audiotree.sources.mixing import ShuffledProportionalSelection
    from audiotree.sources.weight_schedule import ScheduledCounts, WeightSchedule

    selection = ShuffledProportionalSelection([50, 50], [1.0, 2.0], seed=3, block_size=16)
    epochs = EpochShuffledMapDataset(grain.MapDataset.range(5), seed=1, num_epochs=3)
    items = create_audio_dataset(filepaths=files, duration=None, shuffle=True, shuffle_seed=4, sample_rate=8000)
    batches = batch_by_duration(items, scan_durations(files), BucketConfig(max_seconds=4.0, buckets=2),
                                shuffle_seed=0)
    while not isinstance(batches, DurationBatchDataset):  # the batches under the dataset's public wrapper
        batches = batches.parents[0]
    index = tmp_path / "corpus.parquet"
    build_index({"tones": str(Path(files[0]).parent)}, index, executor="serial", show_progress=False)
    store = open_columns(str(index))
    schedule = WeightSchedule({0: {"a": 0.9, "b": 0.1}, 100_000: {"a": 0.1, "b": 0.9}})
    counts = ScheduledCounts(schedule, ["b", "a"], schedule.block_size)
    # (object, its per-process attribute, that attribute's value in a new process)
    return [(selection, "_cache", 0), (epochs, "_cache", 0), (batches, "_positions", 0), (store, "_files", {}),
            (counts, "_rows", 1)]


@pytest.mark.slow  # a spawned interpreter imports audiotree and Grain
def test_the_classes_travel_to_a_spawned_worker_without_their_state(files, tmp_path):
    objects = _objects(files, tmp_path)
    expected = []
    for obj, attr, fresh in objects:
        assert attr in getattr(type(obj), "process_local", {}) or fresh == 0  # a table entry, or a BoundedCache
        expected.append(read(obj))
        assert state(obj, attr) != fresh, f"{type(obj).__name__} filled no {attr} in this process"
        clone = pickle.loads(pickle.dumps(obj))
        assert state(clone, attr) == fresh and read(clone) == expected[-1]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        arrived = pool.starmap(arrive, [(obj, attr) for obj, attr, _ in objects])
    assert [state for state, _ in arrived] == [fresh for _, _, fresh in objects]
    assert [items for _, items in arrived] == expected

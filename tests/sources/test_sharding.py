"""Sharding over hosts is written once (:mod:`audiotree.discovery.sharding`) and every reader uses it.

The pure shares are checked on every small length and host count: disjoint,
together complete, and of equal size with ``drop_remainder``. Every public
entry that takes ``shard_options`` refuses the same bad options with the same
message, and no module outside ``discovery/sharding.py`` reads the options'
fields itself.
"""

from __future__ import annotations

import ast
import types
from pathlib import Path

import grain
import numpy as np
import pytest
import soundfile as sf

from audiotree.discovery.sharding import check_shard_options, host_range, strided_share
from audiotree.sources import BucketConfig, batch_by_duration, create_audio_dataset, shard_dataset

SRC = Path(__file__).resolve().parents[2] / "src" / "audiotree"
SHARDING = SRC / "discovery" / "sharding.py"


def _options(index, count, drop=False):
    return types.SimpleNamespace(shard_index=index, shard_count=count, drop_remainder=drop)


def test_the_shard_options_are_read_in_one_module():
    readers = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SHARDING:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr in ("shard_index", "shard_count")
                    and isinstance(node.ctx, ast.Load)
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
                readers.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert readers == [], "read shard_options through audiotree.discovery.sharding.check_shard_options"


@pytest.mark.parametrize("drop", [False, True])
def test_strided_and_contiguous_shares_partition_the_items(drop):
    for length in range(0, 13):
        for count in range(1, 5):
            for share in (strided_share, host_range):
                taken = []
                for index in range(count):
                    got = share(length, _options(index, count, drop))
                    taken.append(list(range(length))[got] if isinstance(got, slice) else list(range(*got)))
                flat = sorted(i for t in taken for i in t)
                assert len(flat) == len(set(flat))
                if drop:
                    assert {len(t) for t in taken} == {length // count}
                else:
                    assert flat == list(range(length))


def test_shard_dataset_keeps_its_shares():
    assert list(shard_dataset(grain.MapDataset.range(7), grain.sharding.ShardOptions(1, 3))) == [1, 4]
    assert list(shard_dataset(grain.MapDataset.range(7), grain.sharding.ShardOptions(2, 3))) == [2, 5]
    dropped = grain.sharding.ShardOptions(0, 3, drop_remainder=True)
    assert list(shard_dataset(grain.MapDataset.range(7), dropped)) == [0, 3]


def test_every_entry_refuses_bad_options_alike(tmp_path):
    files = []
    for k in range(2):
        files.append(str(tmp_path / f"{k}.wav"))
        sf.write(files[-1], np.zeros(4000, np.float32), 8000)
    items = create_audio_dataset(filepaths=files, duration=None, shuffle=False, sample_rate=8000)
    entries = {
        "check_shard_options": check_shard_options,
        "shard_dataset": lambda o: shard_dataset(grain.MapDataset.range(3), o),
        "batch_by_duration": lambda o: batch_by_duration(items, [0.5, 0.5], BucketConfig(max_seconds=2, buckets=[1.0]),
                                                         shard_options=o),
        "host_range": lambda o: host_range(3, o),
    }
    for name, entry in entries.items():
        with pytest.raises(TypeError, match="shard_options must be a grain.sharding.ShardOptions"):
            entry(2)
        with pytest.raises(ValueError, match=r"shard_index must be in \[0, shard_count\), got 2 of 2"):
            entry(_options(2, 2))


def test_the_moved_discovery_names_still_import_from_sources():
    """``audiotree.sources.files`` and ``.containers`` keep re-exporting what moved to ``audiotree.discovery``."""
    import audiotree.discovery.containers as containers
    import audiotree.discovery.files as files
    import audiotree.discovery.sharding as sharding
    import audiotree.sources.containers as old_containers
    import audiotree.sources.files as old_files

    for old in (old_files, old_containers):
        for name in old.__all__:
            homes = [getattr(m, name) for m in (files, containers, sharding) if hasattr(m, name)]
            assert homes and getattr(old, name) is homes[0], f"{old.__name__}.{name}"

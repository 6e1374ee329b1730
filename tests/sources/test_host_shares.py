"""Per-host splits by container (``shard_options=``) in the balanced and windowed builders.

Each host of ``n`` gets whole tar shards, Parquet row groups or plain files,
dealt round robin (:func:`audiotree.discovery.sharding.host_share`). The
shares must be disjoint and together complete, a host must never open
another host's shard (checked by deleting those shards before it reads), and
the balanced builder must split every group, so each host mixes every group.
"""

from __future__ import annotations

import shutil
import sys
import types

import grain
import pytest

from audiotree.index import StaleFileError, build_index
from audiotree.io.members import is_member, parse
from audiotree.sources import (
    Corpus,
    Order,
    Output,
    create_audio_dataset,
    create_balanced_audio_dataset,
    create_windowed_audio_dataset,
    WindowConfig,
    find_audio_files,
)
from container_factories import RATE, make_corpus

HOSTS = 2


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    """Group ``a``: 4 tar shards of 2 members; group ``b``: 2 Parquet files of 2 row groups of 2 rows."""
    root = tmp_path_factory.mktemp("host-shares")
    a = make_corpus(root / "a", files=8, per_shard=2, seed=0)
    b = make_corpus(root / "b", files=8, per_shard=2, seed=50)
    sources = {"a": str(a["shards"] / "train-{000000..000003}.tar"), "b": str(b["parquet"] / "train-*.parquet")}
    index = root / "groups.parquet"
    build_index(sources, index, executor="serial", show_progress=False, loudness=False)
    return {"a": a, "b": b, "sources": sources, "index": index, "root": root}


def _unit(path: str) -> tuple:
    """The container an item is read from: a shard, a (file, row group), or a plain file."""
    if not is_member(path):
        return (path,)
    ref = parse(path)
    return (ref.container,) if ref.kind == "tar" else (ref.container, ref.offset)


def _items(ds) -> list[tuple[str, str]]:
    """``(group, path)`` of every item of a finite dataset, by random access."""
    items = [ds[i] for i in range(len(ds))]
    return [(x.source[0] if x.source else None, x.filepath[0]) for x in items]


def _host(i: int) -> grain.sharding.ShardOptions:
    return grain.sharding.ShardOptions(i, HOSTS)


def _check_partition(per_host: list[list[str]], everything: list[str]) -> list[set]:
    """Disjoint, complete shares of whole containers; returns each host's containers."""
    units = [{_unit(p) for p in paths} for paths in per_host]
    assert not set.intersection(*units), "two hosts read the same container"
    assert sorted(p for paths in per_host for p in set(paths)) == sorted(everything)
    assert all(len(u) == len(units[0]) for u in units)  # 4 containers dealt to 2 hosts: 2 each
    return units


# ------------------------------------------------------------------ balanced


@pytest.mark.parametrize("by", ["sources", "index"])
def test_balanced_splits_every_group_and_keeps_the_balance_per_host(groups, by):
    build = dict(sources=groups["sources"]) if by == "sources" else dict(corpus=Corpus(index=groups["index"], group_by="group"))
    per_host = {name: [] for name in groups["sources"]}
    for host in range(HOSTS):
        ds = create_balanced_audio_dataset(**build, sample_rate=RATE, duration=0.2, num_epochs=1, shuffle_seed=3,
                                           order=Order(shard_options=_host(host)))
        items = _items(ds)
        counts = {name: sum(g == name for g, _ in items) for name in per_host}
        assert counts["a"] == counts["b"] == 4, counts  # both groups, equal weights: balanced on this host
        for name in per_host:
            per_host[name].append([p for g, p in items if g == name])
    for name, source in groups["sources"].items():
        units = _check_partition(per_host[name], find_audio_files(source))
        assert all(len(u) == 2 for u in units)


def test_balanced_index_host_never_opens_another_hosts_shard(groups, tmp_path):
    """With an index the host reads nothing but its own shards: the others are deleted first."""
    shards = tmp_path / "shards"
    shutil.copytree(groups["a"]["shards"], shards)
    index = tmp_path / "ix.parquet"
    build_index({"a": str(shards / "train-{000000..000003}.tar")}, index, executor="serial", show_progress=False,
                loudness=False)
    for name in ("train-000001.tar", "train-000003.tar"):  # host 1's shards
        (shards / name).unlink()
    ds = create_balanced_audio_dataset(corpus=Corpus(index=index, group_by="group"), order=Order(shard_options=_host(0)), sample_rate=RATE, duration=0.2, num_epochs=1)
    assert {parse(p).container.rsplit("/", 1)[-1] for _, p in _items(ds)} == {"train-000000.tar", "train-000002.tar"}
    other = create_balanced_audio_dataset(corpus=Corpus(index=index, group_by="group"), order=Order(shard_options=_host(1)), sample_rate=RATE, duration=0.2,
                                          num_epochs=1)
    with pytest.raises(StaleFileError, match=r"train-00000[13]\.tar.*no longer exists"):  # so the test can fail
        other[0]


def test_balanced_datasets_groups_are_split_by_item(groups):
    folder = str(groups["a"]["unpacked"])
    seen = []
    for host in range(HOSTS):
        ready = create_audio_dataset(sources=folder, sample_rate=RATE, duration=0.2, shuffle=False, output=Output(source="x"))
        ds = create_balanced_audio_dataset(sources={**{"a": groups["sources"]["a"]}, **{"ready": ready}}, order=Order(shard_options=_host(host)),
                                           sample_rate=RATE, duration=0.2, num_epochs=1)
        paths = [p for g, p in _items(ds) if g == "ready"]
        assert len(paths) == len(set(paths)) == 4
        seen += paths
    assert sorted(seen) == find_audio_files(folder)


def test_balanced_endless_datasets_group_stays_endless_and_window_groups_split(groups):
    """An endless ``datasets=`` group keeps ``len == sys.maxsize`` on each host (so the mix stays endless);
    ``window=`` groups plan their windows over the host's own shards."""
    ready = create_audio_dataset(sources=str(groups["a"]["unpacked"]), sample_rate=RATE, duration=0.2,
                                 num_epochs=None)
    firsts, windowed = [], []
    for host in range(HOSTS):
        mix = create_balanced_audio_dataset(sources={**{"a": groups["sources"]["a"]}, **{"ready": ready}}, order=Order(shard_options=_host(host)),
                                            sample_rate=RATE, duration=0.2)
        assert len(mix) == sys.maxsize
        firsts.append({(g, p) for g, p in (_items(mix[:40]))})
        win = create_balanced_audio_dataset(sources={"a": groups["sources"]["a"]}, window=WindowConfig(duration=0.3),
                                            sample_rate=RATE, num_epochs=1, order=Order(shard_options=_host(host)))
        windowed.append([p for _, p in _items(win)])
    shards = [{parse(p).container for g, p in items if g == "a"} for items in firsts]
    assert not shards[0] & shards[1] and all(len(s) == 2 for s in shards)
    _check_partition(windowed, find_audio_files(groups["sources"]["a"]))


def test_balanced_refuses_more_hosts_than_a_group_has_containers(groups):
    with pytest.raises(ValueError, match=r"Host 4 of 5 gets no items: there are only 4 .* in group 'a'"):
        create_balanced_audio_dataset(sources=groups["sources"], sample_rate=RATE,
                                      order=Order(shard_options=grain.sharding.ShardOptions(4, 5)))
    with pytest.raises(ValueError, match=r"Host 4 of 5 .* only 4 .* in group 'a'"):
        create_balanced_audio_dataset(corpus=Corpus(index=groups["index"], group_by="group"), order=Order(shard_options=grain.sharding.ShardOptions(4, 5)), sample_rate=RATE)
    with pytest.raises(TypeError, match="shard_options must be a grain.sharding.ShardOptions"):
        create_balanced_audio_dataset(sources=groups["sources"], sample_rate=RATE, order=Order(shard_options=2))
    with pytest.raises(ValueError, match=r"shard_index must be in \[0, shard_count\), got 2 of 2"):
        create_balanced_audio_dataset(sources={"x": grain.MapDataset.range(3)}, order=Order(shard_options=types.SimpleNamespace(shard_index=2, shard_count=2)), sample_rate=RATE)


# ------------------------------------------------------------------ windowed


@pytest.mark.parametrize("shape", ["shards", "parquet", "index"])
def test_windowed_shares_are_disjoint_complete_whole_containers(groups, shape):
    if shape == "index":
        build, everything = dict(corpus=Corpus(index=groups["index"])), find_audio_files(list(groups["sources"].values()))
    else:
        source = groups["sources"]["a" if shape == "shards" else "b"]
        build, everything = dict(sources=source), find_audio_files(source)
    per_host, lengths = [], []
    for host in range(HOSTS):
        ds = create_windowed_audio_dataset(**build, window=WindowConfig(duration=0.3), sample_rate=RATE, shuffle_seed=1,
                                           order=Order(shard_options=_host(host)))
        per_host.append([p for _, p in _items(ds)])
        lengths.append(len(ds))
    _check_partition(per_host, everything)
    # The windows are planned over the host's own files: together, the one-host plan's slots.
    whole = create_windowed_audio_dataset(**build, window=WindowConfig(duration=0.3), sample_rate=RATE, shuffle_seed=1)
    assert sum(lengths) == len(whole)


def test_windowed_index_host_never_opens_another_hosts_shard(groups, tmp_path):
    shards = tmp_path / "shards"
    shutil.copytree(groups["a"]["shards"], shards)
    index = tmp_path / "ix.parquet"
    build_index(str(shards / "train-{000000..000003}.tar"), index, executor="serial", show_progress=False,
                loudness=False)
    for name in ("train-000000.tar", "train-000002.tar"):  # host 0's shards
        (shards / name).unlink()
    ds = create_windowed_audio_dataset(corpus=Corpus(index=index), order=Order(shard_options=_host(1)), window=WindowConfig(duration=0.3), sample_rate=RATE)
    assert {parse(p).container.rsplit("/", 1)[-1] for _, p in _items(ds)} == {"train-000001.tar", "train-000003.tar"}
    other = create_windowed_audio_dataset(corpus=Corpus(index=index), order=Order(shard_options=_host(0)), window=WindowConfig(duration=0.3), sample_rate=RATE)
    with pytest.raises(StaleFileError, match=r"train-00000[02]\.tar.*no longer exists"):
        other[0]


def test_windowed_drop_remainder_and_bad_shard_options(groups):
    source = groups["sources"]["a"]
    files = [{p for _, p in _items(create_windowed_audio_dataset(
        sources=source, window=WindowConfig(duration=0.3), sample_rate=RATE, order=Order(shard_options=grain.sharding.ShardOptions(h, 3,
                                                                                          drop_remainder=True))))}
        for h in range(3)]
    assert [len(f) for f in files] == [2, 2, 2]  # 4 shards of 2 over 3 hosts, trimmed to the smallest share
    assert not (files[0] & files[1]) and not (files[1] & files[2]) and not (files[0] & files[2])
    with pytest.raises(ValueError, match=r"Host 5 of 6 gets no items: there are only 4 shard"):
        create_windowed_audio_dataset(sources=source, window=WindowConfig(duration=0.3), sample_rate=RATE,
                                      order=Order(shard_options=grain.sharding.ShardOptions(5, 6)))
    with pytest.raises(TypeError, match="shard_options must be a grain.sharding.ShardOptions"):
        create_windowed_audio_dataset(sources=source, window=WindowConfig(duration=0.3), sample_rate=RATE, order=Order(shard_options=(0, 2)))


def test_windowed_with_shard_by_jax_process_on_one_host_is_the_whole_corpus(groups):
    pytest.importorskip("jax")
    source = groups["sources"]["a"]
    one = create_windowed_audio_dataset(sources=source, window=WindowConfig(duration=0.3), sample_rate=RATE, shuffle_seed=2,
                                        order=Order(shard_options=grain.sharding.ShardByJaxProcess()))
    whole = create_windowed_audio_dataset(sources=source, window=WindowConfig(duration=0.3), sample_rate=RATE, shuffle_seed=2)
    assert _items(one) == _items(whole)

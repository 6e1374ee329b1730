"""Bad tar shards: each fault is an AudioReadError naming the shard and the member, through on_read_error.

Never silent zeros, never a hang, never a quietly shorter corpus.
"""

from __future__ import annotations

import tarfile
import warnings

import numpy as np
import pytest

from audiotree.errors import AudioReadError
from audiotree.index import build_index, open_index
from audiotree.io import AudioFile
from audiotree.io.tar_shards import list_shard
from audiotree.sources import Corpus, create_audio_dataset, find_audio_files
from container_factories import RATE, add_member, flac_bytes


def _shard(path, names=("a", "b", "c"), seconds=1.0):
    data = {n: flac_bytes(seconds, i) for i, n in enumerate(names)}
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for n in names:
            add_member(tar, f"{n}.flac", data[n])
            add_member(tar, f"{n}.json", b'{"x": 1}')
    return data


def _offsets(path):
    with tarfile.open(path) as tar:
        return {m.name: (m.offset, m.offset_data, m.size) for m in tar.getmembers()}


def test_truncated_shard_member_runs_past_the_end(tmp_path):
    shard = tmp_path / "cut.tar"
    _shard(shard)
    header, data_at, size = _offsets(shard)["c.flac"]
    raw = shard.read_bytes()
    shard.write_bytes(raw[: data_at + size // 2])  # cut inside the last audio member
    listing = list_shard(str(shard))
    assert [m.name for m in listing.members][-1] == "c.flac" and not listing.problems
    ds = create_audio_dataset(sources=str(shard), sample_rate=RATE, duration=None, shuffle=False)
    assert ds[0] is not None and ds[1] is not None
    with pytest.raises(AudioReadError) as err:
        ds[2]
    message = str(err.value)
    assert "c.flac" in message and str(shard) in message
    skipping = create_audio_dataset(sources=str(shard), sample_rate=RATE, duration=None, shuffle=False,
                                    corpus=Corpus(on_read_error="skip"))
    assert skipping[2] is None  # dropped, never zeros
    assert np.abs(np.asarray(skipping[1].waveform)).max() > 0


def test_member_size_past_the_end_is_named_even_for_random_excerpts(tmp_path):
    shard = tmp_path / "short.tar"
    _shard(shard, names=("a", "b"))
    _, data_at, size = _offsets(shard)["b.flac"]
    shard.write_bytes(shard.read_bytes()[: data_at + size - 100])
    url = [p for p in find_audio_files(str(shard)) if "b.flac" in p][0]
    with pytest.raises(AudioReadError, match="run past the end of the shard"):
        with AudioFile(url) as f:
            f.read(0, f.info.frames)


def test_shard_cut_inside_a_header(tmp_path):
    shard = tmp_path / "cut_header.tar"
    _shard(shard)
    header, _, _ = _offsets(shard)["b.flac"]
    shard.write_bytes(shard.read_bytes()[: header + 200])
    listing = list_shard(str(shard))
    assert [m.name for m in listing.members] == ["a.flac", "a.json"]
    assert len(listing.problems) == 1 and f"byte {header}" in str(listing.problems[0])
    with pytest.raises(AudioReadError, match="cut off"):
        create_audio_dataset(sources=str(shard), sample_rate=RATE)


def test_corrupt_header_is_named_through_on_read_error(tmp_path):
    shard = tmp_path / "corrupt.tar"
    _shard(shard)
    header, _, _ = _offsets(shard)["b.flac"]
    raw = bytearray(shard.read_bytes())
    raw[header:header + 100] = b"\x13" * 100  # the name and mode fields: the checksum no longer matches
    shard.write_bytes(bytes(raw))
    with pytest.raises(AudioReadError) as err:
        create_audio_dataset(sources=str(shard), sample_rate=RATE)
    assert str(shard) in str(err.value) and f"byte {header}" in str(err.value)
    with pytest.warns(UserWarning, match="does not parse"):
        ds = create_audio_dataset(sources=str(shard), sample_rate=RATE, corpus=Corpus(on_read_error="warn"), shuffle=False)
    assert len(ds) == 1 and ds[0] is not None  # the members before the fault
    out = tmp_path / "ix.parquet"
    with pytest.warns(UserWarning, match="marked unreadable"):
        report = build_index(str(shard), out, executor="serial", show_progress=False, loudness=False)
    assert (report.rows, report.unreadable) == (2, 1)
    ix = open_index(out, columns="all")
    row = ix.table.column("path").to_pylist().index(str(shard))
    assert "does not parse" in ix.table.column("error").to_pylist()[row]


def test_duplicate_key_in_one_shard(tmp_path):
    shard = tmp_path / "dupes.tar"
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        add_member(tar, "a.flac", flac_bytes(0.5, 1))
        add_member(tar, "b.flac", flac_bytes(0.5, 2))
        add_member(tar, "a.flac", flac_bytes(0.5, 3))
    with pytest.raises(AudioReadError, match=r"member 'a\.flac' at byte \d+ repeats the key 'a'"):
        create_audio_dataset(sources=str(shard), sample_rate=RATE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = create_audio_dataset(sources=str(shard), sample_rate=RATE, corpus=Corpus(on_read_error="skip"), shuffle=False)
    assert len(ds) == 2


def test_not_a_tar_and_empty_shard(tmp_path):
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"PK\x03\x04 a zip, not a tar" * 40)
    with pytest.raises(AudioReadError, match="bad.tar"):
        create_audio_dataset(sources=str(bad), sample_rate=RATE)
    empty = tmp_path / "empty.tar"
    empty.write_bytes(b"")
    with pytest.raises(AudioReadError, match="empty"):
        create_audio_dataset(sources=str(empty), sample_rate=RATE)


def test_parquet_null_cell_is_named(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"audio": pa.array([{"bytes": flac_bytes(0.5, 1), "path": "a.flac"}, None], type=struct)})
    pq.write_table(table, tmp_path / "nulls.parquet")
    ds = create_audio_dataset(sources=str(tmp_path / "nulls.parquet"), sample_rate=RATE, duration=None, shuffle=False)
    assert ds[0] is not None
    with pytest.raises(AudioReadError, match=r"row=1::.*nulls\.parquet.*empty \(null\)"):
        ds[1]


def test_tar_writer_shards_pass_the_listing(tmp_path):
    """Our own writer's shards list cleanly (a regression guard for the header checks above)."""
    from audiotree import AudioTree
    from audiotree.writers.webdataset import WebDatasetWriter

    tree = AudioTree.create(np.full((3, 1, 800), 0.25, np.float32), 8000)
    with WebDatasetWriter(tmp_path, items_per_shard=2) as w:
        w.write(tree)
    listings = [list_shard(str(p)) for p in sorted(tmp_path.glob("*.tar"))]
    assert [len(x.members) for x in listings] == [4, 2] and not any(x.problems for x in listings)


def test_compressed_shards_are_named_not_silently_ignored(tmp_path):
    _shard(tmp_path / "ok.tar", names=("a",))
    (tmp_path / "more.tar.gz").write_bytes(b"\x1f\x8b compressed")
    with pytest.warns(UserWarning, match=r"compressed tar shard.*more\.tar\.gz.*Decompress"):
        assert len(find_audio_files(str(tmp_path))) == 1

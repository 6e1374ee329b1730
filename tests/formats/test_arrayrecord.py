"""ArrayRecord: writer, record codec, reader through Grain workers, host shards, bad input, render."""

from __future__ import annotations

import json
import os

import grain
import numpy as np
import pytest

from helpers import assert_same_render


def _batch(n: int, start: int = 0):
    from audiotree import AudioTree

    rng = np.random.default_rng(start)
    return AudioTree.create(
        rng.standard_normal((n, 2, 50)).astype(np.float32), 8_000,
        lufs=rng.standard_normal(n).astype(np.float32), pitch=np.arange(start, start + n, dtype=np.int16),
        extras={"mel": rng.standard_normal((n, 3, 4)), "tag": [f"é-{i}" for i in range(start, start + n)]},
        filepath=[f"/data/ü/{i}.wav" for i in range(start, start + n)], source="speech",
        offset=np.linspace(0.0, 1.0, n) + start,
    )


def _assert_item(item, batch, row):
    assert item.sample_rate == batch.sample_rate
    for name in ("waveform", "lufs", "pitch"):
        got, want = np.asarray(getattr(item, name)), np.asarray(getattr(batch, name))[row:row + 1]
        assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes(), name
    np.testing.assert_array_equal(item.extras["mel"], batch.extras["mel"][row:row + 1])
    assert item.extras["tag"] == batch.extras["tag"][row]
    assert item.filepath == [batch.filepath[row]] and item.source == ["speech"]
    np.testing.assert_array_equal(item.offset, batch.offset[row:row + 1])


@pytest.fixture()
def written(tmp_path):
    from audiotree.writers import ArrayRecordWriter

    batches = [_batch(4, 0), _batch(3, 4), _batch(5, 7)]
    with ArrayRecordWriter(tmp_path / "ds", records_per_shard=5, metadata={"note": "test"}) as writer:
        for batch in batches:
            writer.write(batch)
    return tmp_path / "ds", batches


def test_round_trip_keeps_every_leaf(written):
    from audiotree.sources import ArrayRecordAudioSource

    folder, batches = written
    index = json.loads((folder / "arrayrecord.json").read_text())
    assert index["format"] == "audiotree-arrayrecord" and index["format_version"] == [1, 0]
    assert [s["num_records"] for s in index["shards"]] == [5, 5, 2] and index["num_records"] == 12
    source = ArrayRecordAudioSource(folder)
    assert len(source) == 12
    rows = [(b, r) for b in batches for r in range(len(b))]
    for i, (batch, row) in enumerate(rows):
        _assert_item(source[i], batch, row)
    assert [x.pitch[0] for x in source.__getitems__([11, 0, 5])] == [11, 0, 5]


def test_same_items_give_the_same_bytes_however_batched(tmp_path, written):
    from audiotree.core import AudioTree
    from audiotree.writers import ArrayRecordWriter

    folder, batches = written
    items = [b[r] for b in batches for r in range(len(b))]
    with ArrayRecordWriter(tmp_path / "again", records_per_shard=5, metadata={"note": "test"}) as writer:
        writer.write(AudioTree.batch(items[:9]))
        for item in items[9:]:
            writer.write(item)
    for name in sorted(os.listdir(folder)):
        assert (folder / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name


@pytest.mark.slow
def test_grain_workers_read_it_back(written):
    from audiotree.sources import open_arrayrecord

    folder, batches = written
    ds = open_arrayrecord(folder).map(lambda tree: (int(tree.pitch[0]), np.asarray(tree.waveform).tobytes()))
    it = ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    got = list(it)
    want = [(int(b.pitch[r]), np.asarray(b.waveform)[r:r + 1].tobytes()) for b in batches for r in range(len(b))]
    assert got == want


def test_hosts_read_disjoint_shard_files_that_cover_everything(written):
    from audiotree.sources import ArrayRecordAudioSource

    folder, _ = written
    pitches, files = [], []
    for host in range(3):
        source = ArrayRecordAudioSource(folder, shard_options=grain.sharding.ShardOptions(host, 3))
        files.append(source.shard_files)
        pitches.extend(int(source[i].pitch[0]) for i in range(len(source)))
    assert [len(f) for f in files] == [1, 1, 1] and len({f[0] for f in files}) == 3
    assert sorted(pitches) == list(range(12))
    with pytest.raises(ValueError, match="3 ArrayRecord shard file.*4 hosts"):
        ArrayRecordAudioSource(folder, shard_options=grain.sharding.ShardOptions(0, 4))


def test_bad_datasets_are_refused_naming_the_file(written, tmp_path):
    from audiotree import AudioTree
    from audiotree.formats.arrayrecord_codec import decode_item, encode_items
    from audiotree.sources import ArrayRecordAudioSource
    from audiotree.writers import ArrayRecordWriter

    folder, _ = written
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no arrayrecord.json"):
        ArrayRecordAudioSource(tmp_path / "empty")
    with pytest.raises(FileExistsError, match="exist_ok"):
        ArrayRecordWriter(folder)

    index = json.loads((folder / "arrayrecord.json").read_text())
    for change, message in [
        ({"num_records": 13}, "not the sum"),
        ({"format": "audiotree-tree"}, "format is 'audiotree-tree'"),
        ({"format_version": [2, 0]}, "different major version"),
        ({"record_codec_version": 9}, "record_codec_version 9"),
        ({"shards": [{"file": "../x", "num_records": 12}]}, "plain file name"),
        ({"surprise": 1}, "unknown field"),
    ]:
        (folder / "arrayrecord.json").write_text(json.dumps({**index, **change}))
        with pytest.raises(ValueError, match=message):
            ArrayRecordAudioSource(folder)
    (folder / "arrayrecord.json").write_text(json.dumps(
        {**index, "shards": [{"file": "items-00000.array_record", "num_records": 12}]}))
    with pytest.raises(ValueError, match="hold 5 records but their indexes list 12"):
        ArrayRecordAudioSource(folder)

    good = encode_items(_batch(1), tree_class=AudioTree)[0]
    header_end = 10 + int.from_bytes(good[6:10], "little")
    for record, message in [
        (b"ATR", "shorter than"), (b"XXXX" + good[4:], "starts with"), (good[:-3], "past the end"),
        (good + b"\0", "bytes follow the last leaf"), (good[:4] + b"\x07\x00" + good[6:], "codec version 7"),
        (good[:10] + b"{" * (header_end - 10) + good[header_end:], "not UTF-8 JSON"),
        (good.replace(b'"<f4"', b'"|O8"'), "dtype"), (good.replace(b'"<f4",[2,50]', b'"<f4",[2,51]'), "needs 408 bytes, not 400"),
    ]:
        with pytest.raises(ValueError, match=message) as info:
            decode_item(record, "shard-x record 3", tree_class=AudioTree)
        assert "shard-x record 3" in str(info.value)


@pytest.mark.slow
def test_render_to_arrayrecord_equals_the_tree_render(corpus, tmp_path):
    from audiotree.cli import main
    from audiotree.sources import open_render

    common = [str(corpus["speech"]), str(corpus["effects"]), "-n", "14", "--part-size", "5", "--batch-size", "3",
              "--duration", "0.5", "--sample-rate", "16000"]
    assert main(["render", *common, "--out", str(tmp_path / "tree")]) == 0
    assert main(["render", *common, "--out", str(tmp_path / "ar"), "--format", "arrayrecord"]) == 0
    tree, ar = open_render(tmp_path / "tree"), open_render(tmp_path / "ar")
    assert len(tree) == len(ar) == 14
    for i in range(14):
        a, b = tree[i], ar[i]
        assert a.filepath == b.filepath and a.source == b.source
        assert np.asarray(a.waveform).tobytes() == np.asarray(b.waveform).tobytes()
        assert np.asarray(a.offset).tobytes() == np.asarray(b.offset).tobytes()
    # the parts of a render are its shards: three hosts read disjoint parts
    from audiotree.sources import open_arrayrecord

    shares = [open_arrayrecord(tmp_path / "ar", shard_options=grain.sharding.ShardOptions(h, 3)) for h in range(3)]
    assert sorted(x.filepath[0] + str(x.offset[0]) for s in shares for x in s) == \
        sorted(x.filepath[0] + str(x.offset[0]) for x in ar)


@pytest.mark.slow
def test_render_resumed_on_a_process_pool_equals_the_local_render_byte_for_byte(corpus, tmp_path):
    import shutil

    from audiotree.cli import main

    common = ["render", str(corpus["music"]), "-n", "13", "--part-size", "4", "--batch-size", "3", "--duration", "0.4",
              "--sample-rate", "16000"]
    local, resumed = tmp_path / "local", tmp_path / "resumed"
    assert main([*common, "--out", str(local)]) == 0
    # An interrupted run: one part recorded, one unrecorded part folder, an attempt left in .staging.
    shutil.copytree(local, resumed)
    record = json.loads((resumed / "render.json").read_text())
    record.update(parts=record["parts"][:1], complete=False)
    (resumed / "render.json").write_text(json.dumps(record, indent=2) + "\n")
    for name in ("part-00002", "part-00003"):
        shutil.rmtree(resumed / name)
    (resumed / ".staging" / "part-000000000004.123-abcd").mkdir(parents=True)
    # (tests/parallel/test_ray.py renders from scratch on Ray, in both formats, against local renders)
    assert main([*common, "--out", str(resumed), "--executor", "process"]) == 0
    assert not (resumed / ".staging").exists()
    assert_same_render(local, resumed)

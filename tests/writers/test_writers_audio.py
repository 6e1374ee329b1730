"""AudioWriter / AudioDataSource: round trips, filters, read errors, atomic writes, schema pinning."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import soundfile

from audiotree import AudioTree, AudioWriter
from audiotree.formats import manifest as _manifest
from audiotree.errors import AudioReadError
from audiotree.sources import AudioDataSource

RATE = 8000


def _tree(batch=3, start=0, channels=2, samples=400, **overrides):
    rng = np.random.default_rng(start)
    kwargs = dict(
        lufs=np.linspace(-30, -10, batch).astype(np.float32),
        lufs_windows=rng.standard_normal((batch, 2)).astype(np.float32),
        pitch=np.arange(start, start + batch, dtype=np.int32) + 60,
        velocity=np.arange(batch, dtype=np.int16) + 90,
        note_duration=np.full(batch, 0.25, np.float32),
        codes=rng.integers(0, 9, (batch, 3, 2)).astype(np.int32),
        latents=rng.standard_normal((batch, 2, 2)).astype(np.float32),
        extras={"energy": np.arange(batch, dtype=np.float32) / 8, "label": [f"l{start + i}" for i in range(batch)],
                "emb": rng.standard_normal((batch, 4)).astype(np.float32), "const": 7},
        filepath=[f"/corpus/{start + i}.flac" for i in range(batch)],
        source="music",
        offset=np.arange(batch, dtype=np.float64) + 0.5,
    )
    kwargs.update(overrides)
    wave = (rng.uniform(-0.9, 0.9, (batch, channels, samples))).astype(np.float32)
    return AudioTree.create(wave, RATE, **kwargs)


def test_round_trip_every_field_and_tags(tmp_path):
    a, b = _tree(3, 0), _tree(2, 3)
    with AudioWriter(tmp_path) as writer:
        paths = writer.write(a, tags={"split": "train", "fold": 1})
        paths += writer.write(b, tags={"split": "valid"})
    assert [p.name for p in paths] == [f"audio_{i:04d}.wav" for i in range(5)]
    assert soundfile.info(paths[0]).subtype == "FLOAT"
    src = AudioDataSource(tmp_path)
    assert len(src) == 5
    flat = [a[i] for i in range(3)] + [b[i] for i in range(2)]
    for k, want in enumerate(flat):
        got = src[k]
        np.testing.assert_array_equal(got.waveform, want.waveform)
        for field in ("lufs", "lufs_windows", "pitch", "velocity", "note_duration", "codes", "latents"):
            value = getattr(got, field)
            assert value.dtype == getattr(want, field).dtype, field
            np.testing.assert_array_equal(value, getattr(want, field))
        assert got.filepath == want.filepath and got.source == ["music"]
        np.testing.assert_array_equal(got.offset, want.offset)
        np.testing.assert_array_equal(got.extras["emb"], want.extras["emb"])
        assert got.extras["label"] == want.extras["label"][0]
        assert got.extras["const"].tolist() == [7]
        assert got.extras["energy"].shape == (1,)
    entry = src.get_entry(0)
    assert entry["tags"] == {"split": "train", "fold": 1} and entry["index"] == 0
    assert src.get_entry(4)["tags"] == {"split": "valid"}
    assert isinstance(entry["sample_rate"], int) and entry["filename"] == "audio_0000.wav"
    entry["tags"]["split"] = "changed"
    assert src.get_entry(0)["tags"]["split"] == "train"  # copies
    batch = AudioTree.batch([src[0], src[1]])
    assert batch.waveform.shape == (2, 2, 400) and batch.extras["label"] == ["l0", "l1"]
    # The manifest holds no object arrays and loads without pickling.
    with np.load(tmp_path / "manifest.npz", allow_pickle=False) as npz:
        assert all(npz[k].dtype != object for k in npz.files)
        assert "__mask_tags_fold" in npz.files


def test_derived_fields_only_when_audio_unchanged(tmp_path):
    with AudioWriter(tmp_path) as w:
        w.write(_tree(2))
    same = AudioDataSource(tmp_path, duration=400 / RATE)[0]
    assert same.lufs is not None and same.codes is not None
    for src in (
        AudioDataSource(tmp_path, sample_rate=16000),
        AudioDataSource(tmp_path, mono=True),
        AudioDataSource(tmp_path, duration=0.01),
    ):
        item = src[1]
        assert item.lufs is None and item.lufs_windows is None and item.codes is None and item.latents is None
        assert item.pitch.tolist() == [61] and item.velocity.tolist() == [91]
    assert AudioDataSource(tmp_path, sample_rate=16000)[0].waveform.shape == (1, 2, 800)
    assert AudioDataSource(tmp_path, mono=True)[0].waveform.shape == (1, 1, 400)
    padded = AudioDataSource(tmp_path, duration=0.1)[0]
    assert padded.waveform.shape == (1, 2, 800) and not np.any(padded.waveform[..., 400:])


def test_filters_compose_and_validate(tmp_path):
    with AudioWriter(tmp_path) as w:
        w.write(_tree(3, 0), tags={"split": "train"})  # lufs -30, -20, -10
        w.write(_tree(3, 3), tags={"split": "test"})
    src = AudioDataSource(tmp_path)
    assert len(src.filter_by_tag("split", "train")) == 3
    assert len(src.filter_by_lufs(min_lufs=-20)) == 4  # inclusive
    assert len(src.filter_by_lufs(-20, -20)) == 2
    view = src.filter_by_tag("split", "test").filter_by_lufs(max_lufs=-20)
    assert [view.get_entry(i)["index"] for i in range(len(view))] == [3, 4]
    assert len(src) == 6  # views leave the source alone
    assert len(src.filter(lambda e: e["pitch"] % 2 == 0)) == 3
    with pytest.raises(ValueError, match="No entries left after filter_by_tag"):
        src.filter_by_tag("split", "nope")
    filtered = AudioDataSource(tmp_path, filter_fn=lambda e: e["tags"]["split"] == "test", num_records=2)
    assert [filtered.get_entry(i)["index"] for i in range(2)] == [3, 4]
    with pytest.raises(ValueError, match="No valid entries"):
        AudioDataSource(tmp_path, filter_fn=lambda e: False)
    with pytest.raises(IndexError):
        src[6]
    with pytest.raises(IndexError):
        src[-1]


def test_filter_by_lufs_drops_entries_without_lufs(tmp_path):
    with AudioWriter(tmp_path) as w:
        w.write(AudioTree.create(np.zeros((2, 1, 10), np.float32), RATE))
    with pytest.raises(ValueError, match="No entries left after filter_by_lufs"):
        AudioDataSource(tmp_path).filter_by_lufs(min_lufs=-100)


def test_on_read_error_policies(tmp_path):
    with AudioWriter(tmp_path) as w:
        w.write(_tree(3))
    (tmp_path / "audio_0001.wav").unlink()
    with pytest.raises(AudioReadError, match="audio_0001.wav") as info:
        AudioDataSource(tmp_path)[1]
    assert info.value.file_path.endswith("audio_0001.wav")
    with pytest.warns(UserWarning, match="audio_0001.wav"):
        assert AudioDataSource(tmp_path, on_read_error="warn")[1] is None
    assert AudioDataSource(tmp_path, on_read_error="skip")[1] is None
    assert AudioDataSource(tmp_path, on_read_error="skip")[0] is not None
    # A file replaced by a shorter one is an error, never a silently short item.
    soundfile.write(tmp_path / "audio_0002.wav", np.zeros((100, 2), np.float32), RATE, subtype="FLOAT")
    with pytest.raises(AudioReadError, match="does not match its manifest entry"):
        AudioDataSource(tmp_path)[2]
    with pytest.raises(ValueError, match="on_read_error"):
        AudioDataSource(tmp_path, on_read_error="ignore")


def test_manifest_only_dataset(tmp_path):
    with AudioWriter(tmp_path, write_audio=False) as w:
        paths = w.write(_tree(2, samples=441))
    assert not any(p.exists() for p in paths)
    src = AudioDataSource(tmp_path)
    item = src[1]
    assert item.waveform.shape == (1, 2, 441) and not np.any(item.waveform)
    assert item.pitch.tolist() == [61] and item.lufs is not None
    assert src.get_entry(0)["files_written"] is False and "subtype" not in src.get_entry(0)
    assert AudioDataSource(tmp_path, sample_rate=16000, mono=True)[0].waveform.shape == (1, 1, 882)
    assert AudioDataSource(tmp_path, sample_rate=11025)[0].waveform.shape == (1, 2, 608)  # ceil(441*11025/8000)
    assert AudioDataSource(tmp_path, duration=0.5)[0].waveform.shape == (1, 2, 4000)


def test_writer_validation(tmp_path):
    with pytest.raises(ValueError, match=r"\{index\}"):
        AudioWriter(tmp_path / "a", pattern="audio.wav")
    with pytest.raises(ValueError, match="extension"):
        AudioWriter(tmp_path / "a", pattern="audio_{index}.xyz")
    with pytest.raises(ValueError, match="only use the \\{index\\} field"):
        AudioWriter(tmp_path / "a", pattern="{name}_{index}.wav")
    with pytest.raises(ValueError, match="'..'"):
        AudioWriter(tmp_path / "a", pattern="../{index}.wav")
    with pytest.raises(ValueError, match="subtype"):
        AudioWriter(tmp_path / "a", pattern="{index}.flac", subtype="FLOAT")
    with pytest.raises(ValueError, match="manifest_every"):
        AudioWriter(tmp_path / "a", manifest_every=-1)
    w = AudioWriter(tmp_path / "a")
    w.write(_tree(1))
    with pytest.raises(ValueError, match="16000 Hz"):
        w.write(AudioTree.create(np.zeros((1, 1, 4), np.float32), 16000))
    with pytest.raises(ValueError, match="label fields: missing \\['codes'\\]"):
        w.write(_tree(1, codes=None))
    with pytest.raises(ValueError, match="extras: missing \\[\\], extra \\['more'\\]"):
        w.write(_tree(1).replace_extras(more=np.zeros(1)))
    with pytest.raises(ValueError, match="provenance: missing \\['source'\\]"):
        w.write(_tree(1, source=None))
    with pytest.raises(ValueError, match="rank 4"):
        w.write(_tree(2).reshape_mini_batches(1))
    with pytest.raises(ValueError, match="needs a waveform"):
        w.write(AudioTree(waveform=None, sample_rate=RATE, codes=np.zeros((1, 2))))
    with pytest.raises(TypeError, match="AudioTree"):
        w.write({"waveform": np.zeros((1, 1, 4))})
    with pytest.raises(ValueError, match="Column 'pitch'"):  # int column, then a float
        w.write(_tree(1, pitch=np.array([1.5], np.float32)))
    with pytest.raises(ValueError, match="Column 'extras_emb'"):  # cell shape drift
        w.write(_tree(1).replace_extras(emb=np.zeros((1, 5), np.float32)))
    with pytest.raises(ValueError, match="NUL"):
        w.write(_tree(1).replace_extras(label=["bad\x00"]))
    with pytest.raises(ValueError, match="object"):
        w.write(_tree(1).replace_extras(energy=np.array([None], dtype=object)))
    with pytest.raises(ValueError, match="scalar"):
        w.write(_tree(1), tags={"t": [1, 2]})
    w.write(_tree(1), tags={"t": 1})
    with pytest.raises(ValueError, match="Column 'tags_t'"):
        w.write(_tree(1), tags={"t": "one"})
    w.close()
    assert len(AudioDataSource(tmp_path / "a")) == 2
    with pytest.raises(RuntimeError, match="closed"):
        w.write(_tree(1))
    nested = AudioWriter(tmp_path / "n")
    with pytest.raises(ValueError, match="nested dict"):
        nested.write(_tree(1).replace_extras(deep={"x": np.zeros(1)}))
    short = AudioTree(waveform=np.zeros((2, 1, 4), np.float32), sample_rate=RATE,
                      _metadata={"filepath": np.zeros((1, 1024), np.int32)})
    with pytest.raises(ValueError, match="1 filepath for a batch of 2"):
        nested.write(short)


def test_writer_refuses_bad_keys_and_offsets(tmp_path):
    w = AudioWriter(tmp_path)
    with pytest.raises(ValueError, match="tag names must be strings"):
        w.write(_tree(1), tags={1: "a"})
    with pytest.raises(ValueError, match="extras keys must be strings"):
        w.write(_tree(1).replace(extras={3: np.zeros(1)}))
    bad = _tree(2)
    bad = bad.replace(_metadata={**bad._metadata, "offset": np.zeros(1)})
    with pytest.raises(ValueError, match="offset has shape"):
        w.write(bad)
    with pytest.raises(ValueError, match="strings for a batch of 2"):
        w.write(_tree(2).replace_extras(label=["only one"]))
    with pytest.raises(ValueError, match="has 1 rows for a batch of 2"):
        w.write(_tree(2).replace_extras(emb=np.zeros((1, 4), np.float32)))
    assert not list(tmp_path.glob("*.wav"))


def test_source_argument_validation(tmp_path):
    with AudioWriter(tmp_path) as w:
        w.write(_tree(1))
    for kwargs, match in (({"sample_rate": 0}, "sample_rate"), ({"sample_rate": 8000.5}, "sample_rate"),
                          ({"duration": -1}, "duration"), ({"duration": float("nan")}, "duration"),
                          ({"num_records": -1}, "num_records"), ({"num_records": True}, "num_records")):
        with pytest.raises(ValueError, match=match):
            AudioDataSource(tmp_path, **kwargs)
    with pytest.raises(TypeError, match="integers"):
        AudioDataSource(tmp_path)["0"]


def test_exist_ok_and_replacement(tmp_path):
    with AudioWriter(tmp_path) as w:
        w.write(_tree(3))
    with pytest.raises(FileExistsError, match="exist_ok=True"):
        AudioWriter(tmp_path)
    w = AudioWriter(tmp_path, exist_ok=True)
    assert (tmp_path / "manifest.npz").exists()  # nothing happens until the first write
    w.write(_tree(1, start=9))
    assert not (tmp_path / "manifest.npz").exists()  # the old manifest is retired first
    w.close()
    src = AudioDataSource(tmp_path)
    assert len(src) == 1 and src.get_entry(0)["pitch"] == 69


def test_write_is_atomic_per_call(tmp_path, monkeypatch):
    w = AudioWriter(tmp_path, manifest_every=1)
    w.write(_tree(2))
    real_write = soundfile.write
    calls = {"n": 0}

    def flaky(path, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            real_write(path, *args, **kwargs)  # leave a partial file behind
            raise OSError("disk full")
        return real_write(path, *args, **kwargs)

    monkeypatch.setattr(soundfile, "write", flaky)
    with pytest.raises(OSError, match="disk full"):
        w.write(_tree(3, start=2))
    monkeypatch.setattr(soundfile, "write", real_write)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audio_0000.wav", "audio_0001.wav", "manifest.npz"]
    assert w.get_stats()["current_index"] == 2
    w.write(_tree(1, start=5))
    w.close()
    src = AudioDataSource(tmp_path)
    assert [src.get_entry(i)["index"] for i in range(3)] == [0, 1, 2] and src.get_entry(2)["pitch"] == 65


def test_subtypes_clipping_and_subfolders(tmp_path):
    with AudioWriter(tmp_path / "f", pattern="clips/{index:03d}.flac") as w:
        paths = w.write(_tree(1, channels=1))
    assert paths[0] == tmp_path / "f" / "clips" / "000.flac"
    assert soundfile.info(paths[0]).subtype == "PCM_24"
    assert AudioDataSource(tmp_path / "f")[0].waveform.shape == (1, 1, 400)
    loud = _tree(2, channels=1)
    loud = loud.replace(waveform=loud.waveform * 3)
    with AudioWriter(tmp_path / "p", subtype="PCM_16") as w:
        with pytest.warns(RuntimeWarning, match="clipped by the PCM_16 subtype.*audio_000"):
            w.write(loud)


def test_progress_stats_and_timestamps(tmp_path, capsys):
    with AudioWriter(tmp_path, show_progress=True, progress_desc="exporting", include_timestamp=True, manifest_every=0) as w:
        w.write(_tree(2))
        w.write(_tree(1, start=2))
        assert not (tmp_path / "manifest.npz").exists()  # manifest_every=0: only on close
        stats = w.get_stats()
    assert stats["total_files"] == 3 and stats["total_batches"] == 2 and stats["current_index"] == 3
    assert "exporting" in capsys.readouterr().err
    entries = AudioDataSource(tmp_path).get_all_entries()
    assert entries[0]["timestamp"] == entries[1]["timestamp"] != entries[2]["timestamp"]


def test_source_pickles_with_standard_pickle(tmp_path):
    with AudioWriter(tmp_path) as w:
        w.write(_tree(2), tags={"k": "v"})
    src = AudioDataSource(tmp_path, mono=True).filter_by_tag("k", "v")
    clone = pickle.loads(pickle.dumps(src))
    assert len(clone) == 2 and "AudioDataSource(" in repr(clone)
    np.testing.assert_array_equal(clone[1].waveform, src[1].waveform)


def test_missing_or_unsupported_manifest(tmp_path):
    with pytest.raises(FileNotFoundError, match="Manifest not found"):
        AudioDataSource(tmp_path)
    (tmp_path / "m.json").write_text("{}")
    with pytest.raises(ValueError, match="Unsupported manifest format"):
        AudioDataSource(tmp_path / "m.json")


def test_manifest_encoder_rules():
    with pytest.raises(ValueError, match="mixes value kinds"):
        _manifest.encode({"c": [1, "a"]}, 2)
    with pytest.raises(ValueError, match="mixes value kinds"):
        _manifest.encode({"c": [1, 1.5]}, 2)
    with pytest.raises(ValueError, match="int64 and uint64"):
        _manifest.encode({"c": [np.int64(-1), np.uint64(2)]}, 2)
    with pytest.raises(ValueError, match="NUL"):
        _manifest.encode({"c": [b"x\x00"]}, 1)
    with pytest.raises(ValueError, match="reserved"):
        _manifest.encode({"tags": [1]}, 1)
    with pytest.raises(ValueError, match="reserved"):
        _manifest.encode({"__mask_x": [1]}, 1)
    with pytest.raises(ValueError, match="has 1 rows"):
        _manifest.encode({"c": [1]}, 2)
    with pytest.raises(ValueError, match="array cells"):
        _manifest.encode({"c": [np.zeros(2), np.zeros(3)]}, 2)
    with pytest.raises(ValueError, match="array cells"):
        _manifest.encode({"c": [np.zeros(2, np.int8), np.zeros(2, np.uint8)]}, 2)
    arrays = _manifest.encode({"a": [np.int8(1), np.int16(2)], "b": [1, None], "n": [None, None],
                               "s": ["x", "yz"], "w": [np.zeros(2, np.int8), np.ones(2, np.int32)]}, 2)
    assert arrays["a"].dtype == np.int16 and arrays["b"].dtype == np.int64
    assert arrays["__mask_b"].tolist() == [True, False] and arrays["__mask_n"].tolist() == [False, False]
    assert arrays["s"].dtype == np.dtype("<U2") and arrays["w"].dtype == np.int32


def test_from_manifest_loads_the_whole_dataset(tmp_path):
    import numpy as np

    from audiotree import AudioTree, AudioWriter

    rng = np.random.default_rng(0)
    with AudioWriter(tmp_path / "ds") as writer:
        for i in range(3):
            tree = AudioTree.create(
                (rng.standard_normal((1, 2, 400)) * 0.1).astype(np.float32), 8000,
                pitch=np.array([60 + i], np.float32), filepath=f"src{i}.wav",
            )
            writer.write(tree, tags={"split": "train" if i < 2 else "val"})
    loaded = AudioTree.from_manifest(tmp_path / "ds")
    assert loaded.waveform.shape == (3, 2, 400)
    np.testing.assert_array_equal(loaded.pitch, [60, 61, 62])
    assert loaded.filepath == ["src0.wav", "src1.wav", "src2.wav"]
    train = AudioTree.from_manifest(tmp_path / "ds", filter_fn=lambda e: e.get("tags", {}).get("split") == "train")
    assert train.batch_size == 2
    import pytest

    with pytest.raises(ValueError):
        AudioTree.from_manifest(tmp_path / "ds", filter_fn=lambda e: False)

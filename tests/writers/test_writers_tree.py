"""TreeWriter / TreeDataSource: round trips of every structure, policies, pickling, workers."""

from __future__ import annotations

import concurrent.futures
import json
import pickle
import warnings

import numpy as np
import pytest

from audiotree import AudioTree, TreeWriter
from audiotree.sources import TreeDataSource


def _tree(batch=3, offset=0, rate=16000):
    rng = np.random.default_rng(offset)
    return AudioTree.create(
        rng.standard_normal((batch, 2, 32)).astype(np.float32),
        rate,
        lufs=np.arange(batch, dtype=np.float32) - 20 + offset,
        lufs_windows=rng.standard_normal((batch, 3)).astype(np.float32),
        pitch=np.arange(batch, dtype=np.float32) + 60,
        velocity=np.arange(batch, dtype=np.int16) + 100,
        note_duration=np.full(batch, 0.5, np.float32),
        codes=rng.integers(0, 1024, (batch, 4, 6)).astype(np.int32),
        latents=rng.standard_normal((batch, 8, 6)).astype(np.float16),
        extras={
            "mel": rng.standard_normal((batch, 4, 5)),
            "flag": np.arange(batch) % 2 == 0,
            "name": [f"item {offset + i} ünïcødé ✓" for i in range(batch)],
            "nested": {"deep": {"x": np.arange(batch, dtype=np.uint8)}, "empty": [""] * batch},
        },
        filepath=[f"/data/file_{offset + i}.wav" for i in range(batch)],
        source="speech",
        offset=np.arange(batch, dtype=np.float64) * 1.5,
    )


def _assert_item_equal(got, batch, i):
    """``got`` (a batch-of-1 read back) equals item ``i`` of ``batch``."""
    want = batch[i]
    if isinstance(want, AudioTree):
        assert isinstance(got, AudioTree) and got.sample_rate == want.sample_rate
        for field in ("waveform", "lufs", "lufs_windows", "pitch", "velocity", "note_duration", "codes", "latents"):
            a, b = getattr(got, field), getattr(want, field)
            assert (a is None) == (b is None), field
            if a is not None:
                assert a.dtype == b.dtype and a.shape == b.shape, field
                np.testing.assert_array_equal(a, b)
        assert got.filepath == want.filepath and got.source == want.source
        np.testing.assert_array_equal(got.offset, want.offset)
        _assert_extras_equal(got.extras, want.extras)
    else:
        raise AssertionError(type(want))


def _assert_extras_equal(got, want):
    assert set(got) == set(want)
    for key, value in want.items():
        if isinstance(value, dict):
            _assert_extras_equal(got[key], value)
        elif isinstance(value, list):
            assert len(value) == 1 and got[key] == value[0]
        else:
            assert got[key].dtype == value.dtype
            np.testing.assert_array_equal(got[key], value)


def test_audio_tree_with_every_field_round_trips(tmp_path):
    batches = [_tree(3, 0), _tree(2, 3)]
    with TreeWriter(tmp_path / "ds", 4, metadata={"note": "golden"}) as writer:
        assert writer.write(batches[0]) == 3
        assert writer.write(batches[1]) == 2
    src = TreeDataSource(tmp_path / "ds")
    assert len(src) == 5
    assert src.get_metadata() == {"note": "golden"}
    flat = [b[i] for b in batches for i in range(b.batch_size)]
    for k, want in enumerate(flat):
        _assert_item_equal(src[k], want, 0)
    item = src[4]
    assert item.extras["name"] == "item 4 ünïcødé ✓"
    assert item.extras["nested"]["empty"] == ""
    assert item._metadata["filepath"].shape == (1, 1024)
    # The on-disk names follow the dotted paths; provenance is stored as text, not 4 KiB rows.
    names = sorted(p.name for p in (tmp_path / "ds").iterdir())
    assert "waveform.bin" in names and "extras.nested.deep.x.bin" in names
    assert "metadata.filepath.utf8" in names and "metadata.filepath.bin" not in names
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["format"] == "audiotree-tree" and manifest["format_version"] == [1, 1]
    assert manifest["min_reader_version"] == [1, 0] and manifest["complete"] is True
    # Read-back items batch with AudioTree.batch.
    batched = AudioTree.batch([src[0], src[1], src[2]])
    np.testing.assert_array_equal(batched.waveform, batches[0].waveform)
    assert batched.extras["name"] == batches[0].extras["name"]
    assert batched.filepath == batches[0].filepath


def test_dict_of_trees_nested_dicts_and_arrays(tmp_path):
    rng = np.random.default_rng(1)
    dry = AudioTree.create(rng.standard_normal((2, 1, 16)).astype(np.float32), 8000)
    wet = AudioTree.create(rng.standard_normal((2, 1, 16)).astype(np.float32), 8000, extras={"gain": np.ones((2, 1))})
    data = {
        "dry": dry,
        "wet": wet,
        "label": np.array([3, 4], dtype=np.int64),
        "info": {"weights": rng.standard_normal((2, 2, 2)).astype(np.float64), "ok": np.array([True, False]),
                 "z": np.array([1 + 2j, 3j], dtype=np.complex64), "text": ["a", "β"]},
    }
    with TreeWriter(tmp_path / "d", 2) as w:
        w.write(data)
    src = TreeDataSource(tmp_path / "d")
    for i in range(2):
        item = src[i]
        assert set(item) == {"dry", "wet", "label", "info"}
        np.testing.assert_array_equal(item["dry"].waveform, dry.waveform[i : i + 1])
        assert item["dry"].extras == {} and item["dry"]._metadata == {}
        np.testing.assert_array_equal(item["wet"].extras["gain"], np.ones((1, 1)))
        assert item["label"].dtype == np.int64 and item["label"].tolist() == [3 + i]
        assert item["info"]["z"].dtype == np.complex64 and item["info"]["z"][0] == data["info"]["z"][i]
        assert item["info"]["ok"].dtype == np.bool_
        np.testing.assert_array_equal(item["info"]["weights"], data["info"]["weights"][i : i + 1])
        assert item["info"]["text"] == ["a", "β"][i]


def test_bare_array_and_strings(tmp_path):
    with TreeWriter(tmp_path / "arr") as w:
        w.write(np.arange(12, dtype=np.float32).reshape(3, 4))
    src = TreeDataSource(tmp_path / "arr")
    assert len(src) == 3
    np.testing.assert_array_equal(src[2], [[8, 9, 10, 11]])

    with TreeWriter(tmp_path / "s") as w:
        w.write(["", "a", "日本語", "x" * 5000])
        w.write("single")
    src = TreeDataSource(tmp_path / "s")
    assert [src[i] for i in range(len(src))] == ["", "a", "日本語", "x" * 5000, "single"]


def test_zero_size_leaves_and_zero_samples(tmp_path):
    with TreeWriter(tmp_path / "z") as w:
        w.write({"empty": np.zeros((2, 0), np.float32), "s": ["", ""]})
    src = TreeDataSource(tmp_path / "z")
    assert src[1]["empty"].shape == (1, 0) and src[1]["s"] == ""
    with TreeWriter(tmp_path / "none") as w:
        w.write({"x": np.zeros((0, 3), np.float32)})
    assert len(TreeDataSource(tmp_path / "none")) == 0


def test_writer_refuses_bad_pytrees_before_writing(tmp_path):
    with TreeWriter(tmp_path / "a") as w:
        with pytest.raises(ValueError, match="0-d"):
            w.write({"x": np.float32(1.0)})
        with pytest.raises(ValueError, match="dtype"):
            w.write({"x": np.array(["a"], dtype=object)})
        with pytest.raises(ValueError, match="datetime64|does not store"):
            w.write({"x": np.array(["2020-01-01"], dtype="datetime64[D]")})
        with pytest.raises(ValueError, match="share the file"):
            w.write({"a.b": np.zeros(1), "a": {"b": np.zeros(1)}})
        with pytest.raises(ValueError, match="share the file"):
            w.write({"A": np.zeros(1), "a": np.zeros(1)})
        with pytest.raises(ValueError, match="cannot name a leaf file"):
            w.write({"../x": np.zeros(1)})
        with pytest.raises(TypeError, match="strings"):
            w.write({1: np.zeros(1)})
        with pytest.raises(ValueError, match="no leaves"):
            w.write({})
        with pytest.raises(TypeError, match="non-strings"):
            w.write({"x": [np.zeros(1)]})
        with pytest.raises(ValueError, match="0-d"):
            w.write({"x": 3})
        with pytest.raises(TypeError, match="leaves must be"):
            w.write({"x": None})
        with pytest.raises(ValueError, match="batch size"):
            w.write({"x": np.zeros((2, 1)), "y": np.zeros((3, 1))})
        with pytest.raises(ValueError, match="UTF-8"):
            w.write({"s": ["\ud800"]})
        assert w.get_stats()["samples_written"] == 0
    assert not (tmp_path / "a" / "manifest.json").exists()


def test_schema_is_pinned_by_first_write(tmp_path):
    with TreeWriter(tmp_path / "a", 10) as w:
        w.write({"x": np.zeros((1, 2), np.float32), "s": ["a"]})
        with pytest.raises(ValueError, match="unexpected leaves \\['y'\\]"):
            w.write({"x": np.zeros((1, 2), np.float32), "s": ["a"], "y": np.zeros(1)})
        with pytest.raises(ValueError, match="missing leaves \\['s'\\]"):
            w.write({"x": np.zeros((1, 2), np.float32)})
        with pytest.raises(ValueError, match="per-sample shape"):
            w.write({"x": np.zeros((1, 3), np.float32), "s": ["a"]})
        with pytest.raises(ValueError, match="dtype float64"):
            w.write({"x": np.zeros((1, 2), np.float64), "s": ["a"]})
        with pytest.raises(ValueError, match="between string and array"):
            w.write({"x": np.zeros((1, 2), np.float32), "s": np.zeros(1)})
        assert w.write({"x": np.ones((2, 2), np.float32), "s": ["b", "c"]}) == 2
    with TreeWriter(tmp_path / "b", 10) as w:
        w.write(AudioTree.create(np.zeros((1, 1, 4), np.float32), 8000))
        with pytest.raises(ValueError, match="sample_rate"):
            w.write(AudioTree.create(np.zeros((1, 1, 4), np.float32), 16000))
    assert len(TreeDataSource(tmp_path / "a")) == 3


def test_overflow_policies(tmp_path):
    with TreeWriter(tmp_path / "err", 3, on_overflow="raise") as w:
        w.write({"x": np.zeros((2, 1))})
        with pytest.raises(ValueError, match=r"2 written, 3 allocated \(expected_samples=3\), 2 offered"):
            w.write({"x": np.zeros((2, 1))})
        assert w.write({"x": np.ones((1, 1))}) == 1
    assert len(TreeDataSource(tmp_path / "err")) == 3

    with TreeWriter(tmp_path / "trim", 3, on_overflow="trim") as w:
        w.write({"x": np.arange(2.0)[:, None], "s": ["a", "b"]})
        with pytest.warns(UserWarning, match="dropping 1 of 2 offered samples"):
            assert w.write({"x": np.arange(2.0, 4.0)[:, None], "s": ["c", "d"]}) == 1
        with pytest.warns(UserWarning, match="dropping 1 of 1"):
            assert w.write({"x": np.ones((1, 1)), "s": ["e"]}) == 0
    src = TreeDataSource(tmp_path / "trim")
    assert [float(src[i]["x"][0, 0]) for i in range(3)] == [0.0, 1.0, 2.0]
    assert [src[i]["s"] for i in range(3)] == ["a", "b", "c"]

    with TreeWriter(tmp_path / "grow", 1) as w:  # grows and keeps every sample, strings included
        for k in range(10):
            w.write({"x": np.full((k + 1, 2), k, np.int32), "s": [f"{k}-{j}" for j in range(k + 1)]})
        assert w.get_stats()["allocated_samples"] >= 55
    src = TreeDataSource(tmp_path / "grow")
    assert len(src) == 55
    pos = 0
    for k in range(10):
        for j in range(k + 1):
            assert src[pos]["x"].tolist() == [[k, k]] and src[pos]["s"] == f"{k}-{j}"
            pos += 1
    # close() trims files to exactly their content.
    assert (tmp_path / "grow" / "x.bin").stat().st_size == 55 * 2 * 4


def test_constructor_and_lifecycle_errors(tmp_path):
    with pytest.raises(ValueError, match="on_overflow"):
        TreeWriter(tmp_path / "x", 1, on_overflow="explode")
    with pytest.raises(ValueError, match="expected_samples"):
        TreeWriter(tmp_path / "x", -1)
    with pytest.raises(TypeError, match="JSON"):
        TreeWriter(tmp_path / "x", 1, metadata={"f": object()})
    with pytest.raises(ValueError, match="manifest_interval"):
        TreeWriter(tmp_path / "x", 1, manifest_interval=-1)
    w = TreeWriter(tmp_path / "x", 1)
    with pytest.raises(RuntimeError, match="not open"):
        w.write({"a": np.zeros(1)})
    w.open()
    with pytest.raises(RuntimeError, match="already open"):
        w.open()
    w.write({"a": np.zeros(1)})
    w.close()
    w.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        w.write({"a": np.zeros(1)})
    with pytest.raises(RuntimeError, match="closed"):
        w.open()
    with pytest.raises(FileExistsError, match="exist_ok=True"):
        TreeWriter(tmp_path / "x", 1).open()
    old = TreeDataSource(tmp_path / "x")
    assert old[0]["a"].tolist() == [0.0]  # maps the old files
    with TreeWriter(tmp_path / "x", 1, exist_ok=True) as w2:
        w2.write({"a": np.full((2,), 5.0)})
    src = TreeDataSource(tmp_path / "x")
    assert len(src) == 2 and src[1]["a"].tolist() == [5.0]
    assert old[0]["a"].tolist() == [0.0]  # a reader of the replaced dataset is not pulled under


def test_failed_write_poisons_writer_but_close_keeps_prefix(tmp_path, monkeypatch):
    import audiotree.writers.tree as tree_mod

    w = TreeWriter(tmp_path / "p", 2, manifest_interval=0).open()
    w.write({"x": np.arange(2.0)[:, None]})
    real = tree_mod.os.ftruncate

    def broken(fd, size):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tree_mod.os, "ftruncate", broken)
    with pytest.raises(OSError, match="No space"):
        w.write({"x": np.arange(5.0)[:, None]})
    with pytest.raises(RuntimeError, match="failed earlier"):
        w.write({"x": np.zeros((1, 1))})
    monkeypatch.setattr(tree_mod.os, "ftruncate", real)
    w.close()
    src = TreeDataSource(tmp_path / "p")
    assert len(src) == 2 and float(src[1]["x"][0, 0]) == 1.0


def test_readable_prefix_while_writing_and_flush(tmp_path):
    w = TreeWriter(tmp_path / "live", 100, manifest_interval=0).open()
    w.write({"x": np.arange(3.0)[:, None], "s": ["a", "b", "c"]})
    assert len(TreeDataSource(tmp_path / "live")) == 0  # committed schema only
    w.flush()
    w.write({"x": np.arange(3.0, 5.0)[:, None], "s": ["d", "e"]})
    src = TreeDataSource(tmp_path / "live")
    assert len(src) == 3 and src[2]["s"] == "c"
    with pytest.raises(IndexError):
        src[3]
    w.close()
    assert len(TreeDataSource(tmp_path / "live")) == 5


def test_index_errors_and_exclude_prefixes(tmp_path):
    with TreeWriter(tmp_path / "e", 4) as w:
        w.write({"dry": _tree(2, 0), "dryness": np.zeros((2, 1)), "wet": _tree(2, 5)})
    src = TreeDataSource(tmp_path / "e")
    with pytest.raises(IndexError, match="negative"):
        src[-1]
    with pytest.raises(IndexError):
        src[2]
    with pytest.raises(TypeError):
        src["a"]
    item = TreeDataSource(tmp_path / "e", exclude_prefixes=["dry"])[0]
    assert set(item) == {"dryness", "wet"}
    item = TreeDataSource(tmp_path / "e", exclude_prefixes=["wet.waveform", "wet.extras.nested", "wet.metadata"])[1]
    assert item["wet"].waveform is None and item["wet"].lufs is not None
    assert set(item["wet"].extras) == {"mel", "flag", "name"} and item["wet"]._metadata == {}
    item = TreeDataSource(tmp_path / "e", exclude_prefixes="wet.extras.name")[0]
    assert "name" not in item["wet"].extras
    with pytest.raises(ValueError, match="match nothing"):
        TreeDataSource(tmp_path / "e", exclude_prefixes=["drty"])
    with TreeWriter(tmp_path / "bare") as w:
        w.write(np.zeros((1, 2)))
    with pytest.raises(ValueError, match="only leaf"):
        TreeDataSource(tmp_path / "bare", exclude_prefixes=["root"])
    with pytest.raises(FileNotFoundError, match="Manifest not found"):
        TreeDataSource(tmp_path / "nothing")


def test_load_into_memory_matches_lazy_and_survives_pickle(tmp_path):
    with TreeWriter(tmp_path / "m", 4) as w:
        w.write(_tree(3, 0))
    lazy = TreeDataSource(tmp_path / "m")
    eager = TreeDataSource(tmp_path / "m", load_into_memory=True, exclude_prefixes=["extras.mel"])
    restored = pickle.loads(pickle.dumps(eager))
    expected = [lazy[i] for i in range(3)]
    # Data travels with the pickle: the files are no longer needed, while a lazy source notices the damage.
    for path in (tmp_path / "m").glob("*.bin"):
        path.write_bytes(b"")
    lazy.close()
    with pytest.raises(ValueError, match="truncated"):
        lazy[0]
    for i in range(3):
        a, b = expected[i], restored[i]
        assert "mel" not in b.extras
        np.testing.assert_array_equal(a.waveform, b.waveform)
        assert a.extras["name"] == b.extras["name"] and a.filepath == b.filepath
        b.waveform[...] = 0  # items are copies
        assert np.any(restored[i].waveform != 0)


def test_pickle_close_reopen_and_threads(tmp_path):
    with TreeWriter(tmp_path / "t", 64) as w:
        for k in range(8):
            w.write({"x": np.full((8, 3), k * 8, np.int64) + np.arange(8)[:, None], "s": [f"#{k * 8 + j}" for j in range(8)]})
    with TreeDataSource(tmp_path / "t") as src:
        assert int(src[5]["x"][0, 0]) == 5
    assert src._handles is None  # closed by the context manager
    assert src[6]["s"] == "#6"  # reopens lazily
    clone = pickle.loads(pickle.dumps(src))
    assert clone._handles is None and clone[63]["s"] == "#63"
    assert "TreeDataSource(" in repr(clone)
    src.close()

    def read(i):
        item = src[i]
        return int(item["x"][0, 0]), item["s"]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(read, list(range(64)) * 4))
    assert results == [(i, f"#{i}") for i in range(64)] * 4


def test_progress_bar_and_stats(tmp_path, capsys):
    with TreeWriter(tmp_path / "pb", 4, show_progress=True, progress_desc="rendering") as w:
        w.write({"x": np.zeros((4, 1))})
        stats = w.get_stats()
    assert stats["samples_written"] == 4 and stats["is_open"] and stats["leaves"] == ["x"]
    assert "rendering" in capsys.readouterr().err
    assert not w.get_stats()["is_open"]


def test_jax_arrays_are_written(tmp_path):
    import jax.numpy as jnp

    tree = AudioTree.create(jnp.ones((2, 1, 8), dtype=jnp.float32), 8000, extras={"e": jnp.arange(2)})
    with TreeWriter(tmp_path / "j", 2) as w:
        w.write(tree)
    item = TreeDataSource(tmp_path / "j")[1]
    assert isinstance(item.waveform, np.ndarray) and item.waveform.shape == (1, 1, 8)
    assert item.extras["e"].tolist() == [1]


@pytest.mark.slow
def test_mp_prefetch_two_workers(tmp_path, absl_flags_parsed):  # plain Grain: flags parsed as Grain requires
    import grain

    with TreeWriter(tmp_path / "mp", 40) as w:
        for k in range(4):
            w.write({"audio": _tree(10, 10 * k), "label": np.arange(10 * k, 10 * k + 10, dtype=np.int32)})
    ds = (
        grain.MapDataset.source(TreeDataSource(tmp_path / "mp"))
        .to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        items = list(ds)
    assert [int(x["label"][0]) for x in items] == list(range(40))
    assert items[17]["audio"].extras["name"] == "item 17 ünïcødé ✓"
    assert items[17]["audio"].filepath == ["/data/file_17.wav"]


def test_writer_refuses_unstorable_trees(tmp_path):
    deep: dict = {"x": np.zeros(1)}
    for _ in range(70):
        deep = {"k": deep}
    raw = np.zeros((1, 1, 4), np.float32)
    with TreeWriter(tmp_path / "w") as w:
        with pytest.raises(ValueError, match="nested more than 64"):
            w.write(deep)
        with pytest.raises(ValueError, match="too long for a file name"):
            w.write({"k" * 250: np.zeros(1)})
        with pytest.raises(ValueError, match="unknown keys \\['path'\\]"):
            w.write(AudioTree(raw, 8000, _metadata={"path": np.zeros((1, 1024), np.int32)}))
        with pytest.raises(ValueError, match="flatten_mini_batches"):
            w.write(AudioTree(raw, 8000, _metadata={"offset": np.zeros((1, 1))}))
        with pytest.raises(ValueError, match="flatten_mini_batches"):
            w.write(AudioTree(raw, 8000, _metadata={"source": np.zeros((1, 1, 1024), np.int32)}))
        with pytest.raises(TypeError, match="must be a dict"):
            w.write(AudioTree(raw, 8000, extras=["a"]))
        with pytest.raises(TypeError, match="unsupported type"):
            w.write({"x": object()})


def test_manifest_is_world_readable_like_the_data(tmp_path):
    with TreeWriter(tmp_path / "perm") as w:
        w.write({"x": np.zeros((1, 1))})
    assert (tmp_path / "perm" / "manifest.json").stat().st_mode & 0o777 == 0o644

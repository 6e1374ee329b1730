"""Readers refuse tampered, foreign, future and damaged artifacts with messages that name the file."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from audiotree import AudioTree, AudioWriter, TreeWriter
from audiotree.sources import AudioDataSource, TreeDataSource, load_window_lufs, save_window_lufs


# ---------------------------------------------------------------------- tree
@pytest.fixture(scope="module")
def tree_template(tmp_path_factory) -> Path:
    tree = AudioTree.create(np.ones((2, 1, 8), np.float32), 8000, filepath=["a", "b"], offset=0.0,
                            extras={"t": ["x", "y"]})
    root = tmp_path_factory.mktemp("tree_template")
    with TreeWriter(root / "ds", 2) as w:
        w.write({"x": np.arange(4, dtype=np.float32).reshape(2, 2), "s": ["hello", "wörld"], "a": tree})
    return root / "ds"


@pytest.fixture()
def tree_dir(tree_template, tmp_path) -> Path:
    return Path(shutil.copytree(tree_template, tmp_path / "ds"))


def _deep(levels: int) -> dict:
    node: dict = {"type": "array", "leaf": "x"}
    for _ in range(levels):
        node = {"type": "dict", "children": {"k": node}}
    return node


def _edit(directory: Path, fn) -> None:
    path = directory / "manifest.json"
    obj = json.loads(path.read_text())
    fn(obj)
    path.write_text(json.dumps(obj))


def test_untampered_dataset_reads(tree_dir):
    src = TreeDataSource(tree_dir)
    assert src[1]["s"] == "wörld" and src[1]["a"].filepath == ["b"]


@pytest.mark.parametrize(
    "file, message",
    [
        ("../x.bin", "containing '..'"),
        ("..\\x.bin", "containing '..'"),
        ("sub/../../x.bin", "containing '..'"),
        ("/etc/passwd", "absolute path"),
        ("C:\\x.bin", "absolute path"),
        ("\\\\server\\share\\x.bin", "absolute path"),
        ("sub/x.bin", "not a plain file name"),
        (7, "must be a string"),
    ],
)
def test_tree_paths_are_refused(tree_dir, file, message):
    _edit(tree_dir, lambda m: m["leaves"]["x"].__setitem__("file", file))
    with pytest.raises(ValueError, match=message) as info:
        TreeDataSource(tree_dir)
    assert "manifest.json" in str(info.value)


def test_tree_symlink_escape_is_refused(tree_dir, tmp_path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes((tree_dir / "x.bin").read_bytes())
    (tree_dir / "x.bin").unlink()
    os.symlink(outside, tree_dir / "x.bin")
    with pytest.raises(ValueError, match="resolves outside the dataset folder"):
        TreeDataSource(tree_dir)
    # A symlink that stays inside the folder is fine.
    (tree_dir / "x.bin").unlink()
    (tree_dir / "real.data").write_bytes(outside.read_bytes())
    os.symlink("real.data", tree_dir / "x.bin")
    assert TreeDataSource(tree_dir)[0]["x"].tolist() == [[0.0, 1.0]]


def test_tree_file_sizes_are_checked(tree_dir):
    data = (tree_dir / "x.bin").read_bytes()
    (tree_dir / "x.bin").write_bytes(data[:-1])
    with pytest.raises(ValueError, match=r"'x.bin' is 15 bytes.*need exactly 16 bytes"):
        TreeDataSource(tree_dir)
    (tree_dir / "x.bin").write_bytes(data + b"\0" * 4)
    with pytest.raises(ValueError, match="need exactly 16"):
        TreeDataSource(tree_dir)
    (tree_dir / "x.bin").write_bytes(data)
    _edit(tree_dir, lambda m: m["leaves"]["x"].__setitem__("dtype", "<f8"))
    with pytest.raises(ValueError, match="dtype <f8 need exactly 32"):
        TreeDataSource(tree_dir)


def test_incomplete_dataset_needs_at_least_the_committed_rows(tree_dir):
    _edit(tree_dir, lambda m: m.update(complete=False))
    (tree_dir / "x.bin").write_bytes((tree_dir / "x.bin").read_bytes() + b"\0" * 64)
    assert len(TreeDataSource(tree_dir)) == 2  # spare capacity of a live writer is fine
    _edit(tree_dir, lambda m: m.update(num_samples=7))
    with pytest.raises(ValueError, match="at least"):
        TreeDataSource(tree_dir)


def test_tree_string_leaves_are_checked(tree_dir):
    index = np.fromfile(tree_dir / "s.offsets", dtype="<u8")
    np.array([index[1], index[0]], dtype="<u8").tofile(tree_dir / "s.offsets")
    with pytest.raises(ValueError, match="offsets that decrease"):
        TreeDataSource(tree_dir)
    index.tofile(tree_dir / "s.offsets")
    blob = (tree_dir / "s.utf8").read_bytes()
    (tree_dir / "s.utf8").write_bytes(blob[:-2])
    with pytest.raises(ValueError, match="its index says"):
        TreeDataSource(tree_dir)
    (tree_dir / "s.utf8").write_bytes(b"\xff" * len(blob))
    src = TreeDataSource(tree_dir)
    with pytest.raises(ValueError, match="not valid UTF-8"):
        src[0]
    _edit(tree_dir, lambda m: m["string_leaves"]["s"].__setitem__("encoding", "latin-1"))
    with pytest.raises(ValueError, match="only 'utf-8'"):
        TreeDataSource(tree_dir)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m.update(evil=1), r"unknown field\(s\) \['evil'\]"),
        (lambda m: m["leaves"]["x"].update(mode="exec"), r"unknown field\(s\) \['mode'\] in leaf 'x'"),
        (lambda m: m.update(format_version=[2, 0]), "different major version.*upgrade audiotree"),
        (lambda m: m.update(format_version=[0, 9]), "different major version.*re-render"),
        (lambda m: m.update(min_reader_version=[1, 2]), "needs a reader of version >= 1.2"),
        (lambda m: m.update(format="audiotree-manifest"), "format is 'audiotree-manifest'"),
        (lambda m: m.pop("format"), "no 'format' field"),
        (lambda m: m.update(format_version=["1", 0]), "pair of non-negative ints"),
        (lambda m: m.update(num_samples=-1), "num_samples must be a non-negative int"),
        (lambda m: m.update(num_samples=True), "num_samples must be a non-negative int"),
        (lambda m: m.update(num_samples="2"), "num_samples must be a non-negative int"),
        (lambda m: m.update(complete="yes"), "complete must be true or false"),
        (lambda m: m.pop("structure"), "required key 'structure'"),
        (lambda m: m.update(leaves=[]), "leaves must be a JSON object"),
        (lambda m: m.update(metadata=[1]), "metadata must be a JSON object"),
        (lambda m: m["leaves"]["x"].update(dtype="|O"), "dtype '|O'"),
        (lambda m: m["leaves"]["x"].update(dtype="float32"), "dtype 'float32'"),
        (lambda m: m["leaves"]["x"].update(shape_per_sample=[-2]), "shape_per_sample"),
        (lambda m: m["leaves"]["x"].update(shape_per_sample="2"), "shape_per_sample"),
        (lambda m: m["leaves"]["x"].pop("file"), "lacks 'file'"),
        (lambda m: m["leaves"].update(y={"dtype": "<f4", "shape_per_sample": [], "file": "x.bin"}), "share the file"),
        (lambda m: m["leaves"].update(y={"dtype": "<f4", "shape_per_sample": [], "file": "y.bin"}), "not part of the structure"),
        (lambda m: m["structure"]["children"].update(z={"type": "array", "leaf": "zz"}), "'zz', which is not declared"),
        (lambda m: m["structure"]["children"].update(z={"type": "array", "leaf": "x"}), "referenced more than once"),
        (lambda m: m["structure"]["children"].update(z={"type": "pickle"}), "unknown type 'pickle'"),
        (lambda m: m["structure"].update(children=[]), "needs a 'children' object"),
        (lambda m: m["structure"]["children"]["a"].update(sample_rate=0), "positive int sample_rate"),
        (lambda m: m["structure"]["children"]["a"]["children"].update(_metadata={"type": "dict", "children": {}}), "not AudioTree fields"),
        (lambda m: m["structure"]["children"]["a"]["children"].update(sample_rate={"type": "dict", "children": {}}), "not AudioTree fields"),
        (lambda m: m["structure"]["children"]["a"]["children"].update(
            waveform={"type": "string", "leaf": "a.extras.t"}), "must be an array node"),
        (lambda m: m["structure"]["children"]["a"]["children"]["metadata"]["children"].update(
            evil={"type": "dict", "children": {}}), "only filepath, source and offset"),
        (lambda m: m["leaves"]["a.metadata.offset"].update(dtype="<f4"), "must be float64"),
        (lambda m: m.pop("format_version"), "lacks 'format_version'"),
        (lambda m: m.update(producer=3), "producer must be a string"),
        (lambda m: m.update(expected_samples=-5), "expected_samples must be"),
        (lambda m: m.update(string_leaves=[]), "string_leaves must be a JSON object"),
        (lambda m: m["leaves"].update(x=[1]), "leaf 'x' must be a JSON object"),
        (lambda m: m["string_leaves"].update(s="s.utf8"), "string leaf 's' must be a JSON object"),
        (lambda m: m["string_leaves"]["s"].pop("index_file"), "lacks 'index_file'"),
        (lambda m: m["string_leaves"].update(x={"index_file": "q.offsets", "data_file": "q.utf8"}), "both as arrays and as strings"),
        (lambda m: m["structure"]["children"]["x"].pop("leaf"), "needs a string 'leaf'"),
        (lambda m: m["structure"]["children"].update(x=["array"]), "must be an object with a string 'type'"),
        (lambda m: m["structure"]["children"]["a"]["children"].update(extras={"type": "array", "leaf": "x"}), "must be a dict node"),
        (lambda m: m["structure"]["children"]["a"]["children"]["metadata"]["children"].update(
            filepath={"type": "array", "leaf": "x"}), "must be a string leaf"),
        (lambda m: m["structure"]["children"]["a"]["children"]["metadata"]["children"].update(
            offset={"type": "string", "leaf": "s"}), "must be an array leaf"),
        (lambda m: m["structure"].update(children={}), "declared but not part of the structure"),
        (lambda m: m.update(leaves={}, string_leaves={}, structure={"type": "dict", "children": {}}), "has no leaves"),
        (lambda m: m.update(structure=_deep(70)), "nested more than 64 levels"),
    ],
)
def test_tree_manifest_schema_violations(tree_dir, edit, message):
    _edit(tree_dir, edit)
    with pytest.raises(ValueError, match=message):
        TreeDataSource(tree_dir)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m["structure"]["children"]["a"].update(sample_rate=10**30),
         r"sample_rate of the AudioTree node at a is 10{30} Hz, outside the sane range 1 \.\. 10000000 Hz"),
        (lambda m: m["structure"]["children"]["a"].update(sample_rate=10_000_001), "sample_rate .* outside the sane range"),
        (lambda m: m.update(num_samples=10**30), r"num_samples is 10{30}, outside the sane range 0 \.\. 1099511627776"),
        (lambda m: m.update(expected_samples=2**63), "expected_samples is .* outside the sane range"),
        (lambda m: m["leaves"]["x"].update(shape_per_sample=[2**40]), r"leaf 'x' shape_per_sample\[0\] is 1099511627776"),
        (lambda m: m["leaves"]["x"].update(shape_per_sample=[0, 10**30]), r"leaf 'x' shape_per_sample\[1\] is"),
        (lambda m: m["leaves"]["x"].update(shape_per_sample=[2**20, 2**20]), "leaf 'x' bytes per sample is 4398046511104"),
        (lambda m: m["leaves"]["a.waveform"].update(shape_per_sample=[5000, 8]), "channels of 'a.waveform' is 5000"),
        (lambda m: m["leaves"]["a.waveform"].update(shape_per_sample=[1, 2**37]), r"leaf 'a.waveform' shape_per_sample\[1\] is 137438953472"),
    ],
)
def test_tree_manifest_numbers_out_of_range(tree_dir, edit, message):
    _edit(tree_dir, edit)
    with pytest.raises(ValueError, match=message) as info:
        TreeDataSource(tree_dir)
    assert str(tree_dir / "manifest.json") in str(info.value) and "Re-render" in str(info.value)


def test_tree_manifest_largest_sane_rate_reads(tree_dir):
    _edit(tree_dir, lambda m: m["structure"]["children"]["a"].update(sample_rate=10_000_000))
    assert TreeDataSource(tree_dir)[0]["a"].sample_rate == 10_000_000


def test_writers_refuse_what_readers_would_refuse(tmp_path):
    tree = AudioTree.create(np.zeros((1, 1, 8), np.float32), 10**30)
    with TreeWriter(tmp_path / "t") as writer:
        with pytest.raises(ValueError, match="sample_rate is 10{30} Hz, outside the sane range"):
            writer.write({"a": tree})
    assert not (tmp_path / "t" / "manifest.json").exists()
    with AudioWriter(tmp_path / "w") as writer:
        with pytest.raises(ValueError, match="sample_rate is 10{30} Hz, outside the sane range"):
            writer.write(tree)
    assert not list((tmp_path / "w").iterdir())
    with pytest.raises(ValueError, match="sample_rate is 10{30} Hz"):
        save_window_lufs(tmp_path / "c", {"a.wav": np.zeros(2)}, lufs_window_sec=1.0, sample_rate=10**30)
    with pytest.raises(ValueError, match="the duration of 'a.wav' is nan s"):
        save_window_lufs(tmp_path / "c", {"a.wav": np.zeros(2)}, lufs_window_sec=1.0, durations={"a.wav": np.nan})
    with pytest.raises(ValueError, match=r"lufs_window_sec is 100000000.0 s, outside the sane range 0 \.\. 1e\+07 s"):
        save_window_lufs(tmp_path / "c", {"a.wav": np.zeros(2)}, lufs_window_sec=1e8)


def test_newer_minor_version_may_add_fields(tree_dir):
    def newer(m):
        m["format_version"] = [1, 4]
        m["checksums"] = {"x": "abc"}
        m["leaves"]["x"]["compression"] = None

    _edit(tree_dir, newer)
    assert TreeDataSource(tree_dir)[1]["x"].tolist() == [[2.0, 3.0]]


def test_tree_manifest_not_json_or_not_object_or_huge(tree_dir, monkeypatch):
    (tree_dir / "manifest.json").write_bytes(b"\xff{")
    with pytest.raises(ValueError, match="not valid UTF-8 JSON"):
        TreeDataSource(tree_dir)
    (tree_dir / "manifest.json").write_text("[" * 100_000)
    with pytest.raises(ValueError, match="not valid UTF-8 JSON"):
        TreeDataSource(tree_dir)
    (tree_dir / "manifest.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a mapping"):
        TreeDataSource(tree_dir)
    import audiotree.sources.readers.tree as tree_source

    (tree_dir / "manifest.json").write_text(json.dumps({"format": "audiotree-tree", "pad": "x" * 100}))
    monkeypatch.setattr(tree_source, "MAX_MANIFEST_BYTES", 50)
    with pytest.raises(ValueError, match="over the 50-byte limit"):
        TreeDataSource(tree_dir)


def test_tree_leaf_file_missing_or_a_directory(tree_dir):
    (tree_dir / "x.bin").unlink()
    with pytest.raises(ValueError, match="'x.bin' of leaf 'x' is missing"):
        TreeDataSource(tree_dir)
    (tree_dir / "x.bin").mkdir()
    with pytest.raises(ValueError, match="not a regular file"):
        TreeDataSource(tree_dir)


# --------------------------------------------------------------------- audio
@pytest.fixture(scope="module")
def audio_template(tmp_path_factory) -> Path:
    tree = AudioTree.create(np.full((2, 1, 16), 0.25, np.float32), 8000, pitch=np.array([60, 61]))
    root = tmp_path_factory.mktemp("audio_template")
    with AudioWriter(root / "au") as w:
        w.write(tree, tags={"split": "a"})
    return root / "au"


@pytest.fixture()
def audio_dir(audio_template, tmp_path) -> Path:
    return Path(shutil.copytree(audio_template, tmp_path / "au"))


def _edit_npz(directory: Path, fn) -> None:
    path = directory / "manifest.npz"
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    fn(arrays)
    np.savez(path, **arrays)


def _header(key, value):
    return lambda a: a.__setitem__(f"__audiotree_{key}", np.array(json.dumps(value)))


def test_untampered_audio_dataset_reads(audio_dir):
    _edit_npz(audio_dir, lambda a: None)
    assert AudioDataSource(audio_dir)[1].pitch.tolist() == [61]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda a: a.__setitem__("sample_rate", np.array([10**18, 8000])),
         r"column 'sample_rate' holds 1000000000000000000 Hz in row 0, outside the sane range 1 \.\. 10000000 Hz"),
        (lambda a: a.__setitem__("sample_rate", np.array([8000, 2**64 - 1], dtype=np.uint64)), "'sample_rate' holds .* in row 1"),
        (lambda a: a.__setitem__("channels", np.array([1, 5000])), "'channels' holds 5000 in row 1"),
        (lambda a: a.__setitem__("samples", np.array([2**40, 16])), "'samples' holds 1099511627776 in row 0"),
        (lambda a: a.__setitem__("index", np.array([0, -1])), "'index' holds -1 in row 1"),
        (lambda a: a.__setitem__("duration_seconds", np.array([0.002, np.inf])), "'duration_seconds' holds inf s in row 1"),
        (lambda a: a.__setitem__("duration_seconds", np.array([np.nan, 0.002])), "'duration_seconds' holds nan s in row 0"),
        (_header("num_entries", 10**30), r"num_entries is 10{30}, outside the sane range"),
    ],
)
def test_audio_manifest_numbers_out_of_range(audio_dir, edit, message):
    _edit_npz(audio_dir, edit)
    with pytest.raises(ValueError, match=message) as info:
        AudioDataSource(audio_dir)
    assert str(audio_dir / "manifest.npz") in str(info.value)


def test_manifest_only_row_with_huge_counts_is_refused_before_allocating(tmp_path):
    tree = AudioTree.create(np.zeros((1, 2, 16), np.float32), 8000)
    with AudioWriter(tmp_path / "m", write_audio=False) as writer:
        writer.write(tree)
    _edit_npz(tmp_path / "m", lambda a: a.update(channels=np.array([1024]), samples=np.array([2**50])))
    with pytest.raises(ValueError, match="'samples' holds 1125899906842624 in row 0"):
        AudioDataSource(tmp_path / "m")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda a: a.__setitem__("filename", np.array(["../x.wav", "audio_0001.wav"])), "containing '..'"),
        (lambda a: a.__setitem__("filename", np.array(["/tmp/x.wav", "audio_0001.wav"])), "absolute path"),
        (lambda a: a.__setitem__("filename", np.array(["a\\..\\..\\x.wav", "b.wav"])), "containing '..'"),
        (lambda a: a.__setitem__("evil", np.array([1, 2])), r"unknown column\(s\) \['evil'\]"),
        (lambda a: a.__setitem__("tags", np.array([1, 2])), r"unknown column\(s\) \['tags'\]"),
        (_header("format_version", [2, 0]), "different major version"),
        (_header("min_reader_version", [1, 3]), "needs a reader of version >= 1.3"),
        (_header("format", "audiotree-tree"), "format is 'audiotree-tree'"),
        (lambda a: a.pop("__audiotree_format"), "no 'format' field"),
        (_header("num_entries", -1), "num_entries must be a non-negative int"),
        (_header("num_entries", 3), r"has shape \(2,\), but there are 3 entries"),
        (lambda a: a.__setitem__("__audiotree_format", np.array([1])), "0-d unicode"),
        (lambda a: a.__setitem__("pitch", np.array([60])), "there are 2 entries"),
        (lambda a: a.__setitem__("__mask_pitch", np.array([1, 0])), "mask of column 'pitch' must be bool"),
        (lambda a: a.__setitem__("__mask_ghost", np.array([True, True])), "mask for unknown column 'ghost'"),
        (lambda a: a.__setitem__("sample_rate", np.array([0, 8000])), "'sample_rate' holds 0"),
        (lambda a: a.__setitem__("filename", np.array([1, 2])), "column 'filename' has dtype"),
        (lambda a: a.pop("samples"), "required column 'samples'"),
        (lambda a: a.__setitem__("__mask_index", np.array([True, False])), "present in every row"),
        (lambda a: a.__setitem__("pitch", np.array(["a", "b"])), "non-numeric"),
        (lambda a: a.__setitem__("when", np.array(["2020-01-01"] * 2, dtype="datetime64[D]")), "unknown column"),
        (lambda a: a.__setitem__("extras_x", np.array(["2020-01-01"] * 2, dtype="datetime64[D]")), "manifests never hold"),
        (lambda a: a.__setitem__("extras_x", np.array([{"a": 1}, None], dtype=object)), "pickl"),
        (lambda a: a.__setitem__("__audiotree_producer", np.array("{not json")), "is not JSON"),
        (lambda a: a.__setitem__("tags_split", np.zeros((2, 2))), "tag column 'tags_split' holds arrays"),
    ],
)
def test_audio_manifest_violations(audio_dir, edit, message):
    _edit_npz(audio_dir, edit)
    with pytest.raises(ValueError, match=message) as info:
        AudioDataSource(audio_dir)
    assert "manifest.npz" in str(info.value)


def test_audio_manifest_newer_minor_ignores_new_columns(audio_dir):
    def newer(a):
        _header("format_version", [1, 2])(a)
        a["loudness_range"] = np.array([1.0, 2.0])

    _edit_npz(audio_dir, newer)
    src = AudioDataSource(audio_dir)
    assert "loudness_range" not in src.get_entry(0)


def test_audio_symlink_escape_refused_at_read(audio_dir, tmp_path):
    outside = tmp_path / "secret.wav"
    outside.write_bytes((audio_dir / "audio_0000.wav").read_bytes())
    (audio_dir / "audio_0000.wav").unlink()
    os.symlink(outside, audio_dir / "audio_0000.wav")
    src = AudioDataSource(audio_dir, on_read_error="skip")
    with pytest.raises(ValueError, match="resolves outside"):
        src[0]
    assert src[1] is not None


def test_audio_manifest_not_an_archive(audio_dir):
    (audio_dir / "manifest.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable .npz"):
        AudioDataSource(audio_dir)
    np.save(audio_dir / "manifest.npz", np.zeros(3))  # np.save keeps the .npz name: a bare .npy inside
    os.replace(audio_dir / "manifest.npz.npy", audio_dir / "manifest.npz")
    with pytest.raises(ValueError, match="single .npy array"):
        AudioDataSource(audio_dir)


# --------------------------------------------------------------------- cache
@pytest.fixture()
def cache_dir(tmp_path) -> Path:
    return save_window_lufs(tmp_path / "cache", {"a.wav": np.array([-20.0, -30.0]), "b.wav": np.zeros(0)},
                            lufs_window_sec=1.0, durations={"a.wav": 2.0, "b.wav": 0.5}, sample_rate=8000)


def _edit_cache(directory: Path, fn) -> None:
    path = directory / "window_lufs.npz"
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    header = json.loads(str(arrays["header"][()]))
    original = arrays["header"]
    fn(arrays, header)
    if arrays.get("header") is original:
        arrays["header"] = np.array(json.dumps(header))
    np.savez(path, **arrays)


def test_cache_round_trip(cache_dir):
    cache = load_window_lufs(cache_dir)
    assert cache.lufs["a.wav"].tolist() == [-20.0, -30.0] and cache.lufs["b.wav"].size == 0
    assert cache.durations == {"a.wav": 2.0, "b.wav": 0.5} and cache.sample_rate == 8000 and cache.mono
    assert cache.file_sizes == {"a.wav": None, "b.wav": None}  # files did not exist when saved


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda a, h: h.update(format="audiotree-tree"), "format is 'audiotree-tree'"),
        (lambda a, h: h.update(format_version=[3, 0]), "different major version"),
        (lambda a, h: h.update(min_reader_version=[1, 9]), "needs a reader"),
        (lambda a, h: h.update(evil=True), r"unknown field\(s\) \['evil'\]"),
        (lambda a, h: a.__setitem__("script", np.array([1])), r"unknown field\(s\) \['script'\]"),
        (lambda a, h: a.pop("offsets"), r"entries \['offsets'\] are missing"),
        (lambda a, h: a.__setitem__("offsets", np.array([0, 3, 2])), "never decrease"),
        (lambda a, h: a.__setitem__("durations", np.array([1.0])), "'durations' has dtype"),
        (lambda a, h: h.update(num_files=5), "'filepaths' has dtype"),
        (lambda a, h: h.update(lufs_window_sec=0), "lufs_window_sec must be a positive"),
        (lambda a, h: h.update(mono="yes"), "mono and has_durations"),
        (lambda a, h: a.__setitem__("filepaths", np.array(["a.wav", "a.wav"])), "listed twice"),
        (lambda a, h: a.__setitem__("values", np.array([{"x": 1}], dtype=object)), "pickl"),
        (lambda a, h: a.__setitem__("values", np.zeros((2, 1), np.float32)), "1-D float"),
        (lambda a, h: h.update(sample_rate=-1), "sample_rate must be a positive int or null"),
        (lambda a, h: a.pop("header"), "no header entry"),
        (lambda a, h: a.__setitem__("header", np.array(["x"])), "0-d unicode"),
        (lambda a, h: a.__setitem__("header", np.array("{oops")), "header is not JSON"),
    ],
)
def test_cache_violations(cache_dir, edit, message):
    _edit_cache(cache_dir, edit)
    with pytest.raises(ValueError, match=message) as info:
        load_window_lufs(cache_dir)
    assert "window_lufs.npz" in str(info.value)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda a, h: h.update(sample_rate=10**30), "sample_rate is 10{30} Hz, outside the sane range"),
        (lambda a, h: h.update(lufs_window_sec=float("inf")), "lufs_window_sec is inf s, outside the sane range"),
        (lambda a, h: h.update(num_files=10**30), "num_files is 10{30}, outside the sane range"),
        (lambda a, h: a.__setitem__("durations", np.array([2.0, np.nan])), "'durations' holds nan s in row 1"),
        (lambda a, h: a.__setitem__("durations", np.array([-1.0, 0.5])), "'durations' holds -1.0 s in row 0"),
    ],
)
def test_cache_numbers_out_of_range(cache_dir, edit, message):
    _edit_cache(cache_dir, edit)
    with pytest.raises(ValueError, match=message) as info:
        load_window_lufs(cache_dir)
    assert "window_lufs.npz" in str(info.value)


def test_cache_missing_or_garbage(tmp_path, cache_dir):
    with pytest.raises(FileNotFoundError, match="build_window_lufs_cache"):
        load_window_lufs(tmp_path / "nowhere")
    (cache_dir / "window_lufs.npz").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="not a readable .npz.*Rebuild"):
        load_window_lufs(cache_dir)


# -------------------------------------------------------------------- render
@pytest.fixture()
def render_dir(tree_template, tmp_path) -> Path:
    out = tmp_path / "render"
    out.mkdir()
    shutil.copytree(tree_template, out / "part-00000")
    record = {"version": 1, "config": {"format": "tree"}, "complete": True, "total": 2,
              "parts": [{"dir": "part-00000", "start": 0, "stop": 2, "count": 2}]}
    (out / "render.json").write_text(json.dumps(record))
    return out


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p[0].update(dir="../elsewhere"), "part 0 must be an object with dir 'part-00000'"),
        (lambda p: p[0].update(stop=10**30), "part 0 stop is 10{30}, outside the sane range"),
        (lambda p: p[0].update(count=-1), "part 0 count is -1, outside the sane range"),
        (lambda p: p[0].update(count=3), r"covers items \[0, 2\) with 3 written"),
        (lambda p: p[0].update(start=1), "must start at 0"),
        (lambda p: p.append({"dir": "part-00001", "start": 5, "stop": 6, "count": 1}), "part 1 covers items"),
    ],
)
def test_render_record_numbers_are_checked(render_dir, edit, message):
    from audiotree.sources import open_render

    assert len(open_render(render_dir)) == 2
    record = json.loads((render_dir / "render.json").read_text())
    edit(record["parts"])
    (render_dir / "render.json").write_text(json.dumps(record))
    with pytest.raises(Exception, match=message) as info:
        open_render(render_dir)
    assert "render.json is damaged" in str(info.value) and "--overwrite" in str(info.value)

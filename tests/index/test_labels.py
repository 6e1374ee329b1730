"""Index labels: text columns (strings in items and batches, through workers), category ids in the data,
NFC keys, labels checked before decoding, the CLI/Python twins, and hostile labels files."""

from __future__ import annotations

import inspect
import json
import os
import textwrap
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree.index import LabelSource, build_index, open_index
from audiotree.sources import Corpus

RATE = 8_000


def _wav(path, seconds=0.3, seed=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    soundfile.write(path, (0.1 * rng.standard_normal(int(seconds * RATE))).astype(np.float32), RATE,
                    subtype="PCM_16")
    return str(path)


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    root = tmp_path_factory.mktemp("labels3")
    return root, [_wav(root / "audio" / f"{name}.wav", seed=i) for i, name in enumerate(("a", "b", "c"))]


def _build(root, labels, out, **kwargs):
    return build_index(str(root / "audio"), out, executor="serial", show_progress=False, loudness=False,
                       labels=labels, **kwargs)


def _csv(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


# ------------------------------------------------------------------ text columns
def test_a_declared_text_column_reaches_items_and_batches_as_strings(three, tmp_path):
    from audiotree import AudioTree
    from audiotree.sources import create_audio_dataset

    root, files = three
    labels = _csv(tmp_path / "l.csv", 'path,text,speaker\n'
                                      f'{files[0]},"hello, world",s1\n{files[1]},hello,s2\n{files[2]},,s1\n')
    out = tmp_path / "t.parquet"
    _build(root, labels, out, text_columns=["text"])
    ix = open_index(out)
    assert ix.meta["labels"]["text"] == {"kind": "text"}
    assert ix.label_values("text").to_list() == ["hello, world", "hello", ""]
    ds = create_audio_dataset(corpus=Corpus(index=out, labels=["text", "speaker"]), duration=None, sample_rate=RATE)
    item = ds[0]
    assert item.extras["text"] == ["hello, world"] and item.extras["speaker"].dtype == np.int32
    batch = AudioTree.batch([ds[i] for i in range(3)])
    assert dict(zip(batch.filepath, batch.extras["text"])) == dict(zip(files, ["hello, world", "hello", ""]))
    assert dict(zip(batch.filepath, batch.extras["speaker"].tolist())) == dict(zip(files, [0, 1, 0]))


def test_high_cardinality_string_columns_are_detected_as_text(tmp_path):
    files = [_wav(tmp_path / "audio" / f"f{i:03d}.wav", 0.05, seed=i) for i in range(300)]
    rows = "".join(f"{f},transcript number {i},spk{i % 3}\n" for i, f in enumerate(files))
    labels = _csv(tmp_path / "l.csv", "path,transcript,speaker\n" + rows)
    out = tmp_path / "d.parquet"
    _build(tmp_path, labels, out)
    ix = open_index(out)
    assert ix.meta["labels"]["transcript"] == {"kind": "text"}
    assert ix.meta["labels"]["speaker"]["kind"] == "category"
    texts = dict(zip(ix.paths(), ix.label_values("transcript").to_list()))
    assert texts[files[7]] == "transcript number 7"
    # The footer holds no vocabulary and no transcript: it stays small however many distinct values.
    footer = pq.read_schema(out).metadata[b"audiotree"]
    assert b"transcript number" not in footer and b"spk1" not in footer and len(footer) < 2_000
    assert ix.vocabulary("speaker") == ["spk0", "spk1", "spk2"]


def test_category_ids_live_in_the_data_not_the_footer(three, tmp_path):
    root, files = three
    labels = _csv(tmp_path / "l.csv", f"path,speaker\n{files[0]},zoe\n{files[1]},adam\n{files[2]},zoe\n")
    out = tmp_path / "c.parquet"
    _build(root, labels, out)
    table = pq.read_table(out)
    assert table.column("speaker#id").to_pylist() == [1, 0, 1]  # ids beside the strings, plain Parquet
    assert b"zoe" not in pq.read_schema(out).metadata[b"audiotree"]
    assert open_index(out).vocabulary("speaker") == ["adam", "zoe"]


_TEXT_WORKERS = textwrap.dedent(
    """
    import itertools
    import grain
    import numpy as np

    import audiotree.torch as att
    from audiotree import AudioTree
    from audiotree.sources import Corpus, create_audio_dataset
    from audiotree.excerpts import ExcerptConfig

    CROPS = ExcerptConfig(allow_text_crops=True)  # fixed-length crops that knowingly carry the whole text

    def check(batches, expected):
        seen = 0
        for b in batches:
            assert isinstance(b.extras["text"], list), type(b.extras["text"])
            for path, text, spk in zip(b.filepath, b.extras["text"], np.asarray(b.extras["speaker"]).tolist()):
                assert isinstance(text, str) and [text, spk] == expected[path], (path, text, spk)
                seen += 1
        return seen

    if __name__ == "__main__":
        expected = EXPECTED
        ds = create_audio_dataset(corpus=Corpus(index=INDEX, labels=["text", "speaker"]), duration=0.1, excerpt=CROPS, sample_rate=8000,
                                  num_epochs=None)
        it = ds.to_iter_dataset(grain.ReadOptions(num_threads=0)).batch(4, batch_fn=AudioTree.batch)
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
        assert check(itertools.islice(it, 6), expected) == 24
        del it
        finite = create_audio_dataset(corpus=Corpus(index=INDEX, labels=["text", "speaker"]), duration=0.1, excerpt=CROPS, sample_rate=8000)
        # Torch's fork workers only: spawn ones unpickle the dataset as Grain's workers above just did (and
        # test_index.py's label test runs torch's spawn workers too).
        loader = att.create_dataloader(finite, batch_size=2, num_workers=2, multiprocessing_context="fork")
        assert check(list(loader), expected) == 3
        del loader
        print("OK")
    """
)


@pytest.mark.slow
def test_text_passes_through_grain_and_torch_workers(three, tmp_path):
    from helpers import run_script

    pytest.importorskip("torch")
    root, files = three
    texts = ["the quick brown fox", "naïve café, déjà vu", "日本語のテキスト"]
    rows = "".join(f'{f},"{t}",s{i % 2}\n' for i, (f, t) in enumerate(zip(files, texts)))
    labels = _csv(tmp_path / "l.csv", "path,text,speaker\n" + rows)
    out = tmp_path / "w.parquet"
    _build(root, labels, out, text_columns="text")
    expected = {f: [t, i % 2] for i, (f, t) in enumerate(zip(files, texts))}
    code = _TEXT_WORKERS.replace("EXPECTED", repr(expected)).replace("INDEX", repr(str(out)))
    result = run_script(code, tmp_path, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK" in result.stdout


def test_text_column_gathers_rows_and_survives_pickling():
    import pickle

    from audiotree.index.text import TextColumn

    col = TextColumn.from_arrow(pa.chunked_array([["a", None], ["ünï", "", "zz"]]))
    again = pickle.loads(pickle.dumps(col[np.array([4, 2, 1])]))
    assert again.to_list() == ["zz", "ünï", ""] and again.data.dtype == np.uint8
    assert col[1:3].to_list() == ["", "ünï"]
    sliced = pa.array(["x", "yy", None, "www"]).slice(1)
    assert TextColumn.from_arrow(sliced).to_list() == ["yy", "", "www"]
    with pytest.raises(ValueError, match="offsets"):
        TextColumn(np.array([0, 5]), np.zeros(2, np.uint8))


# ------------------------------------------------------------------ matching and checking
@pytest.mark.parametrize("disk_form, csv_form", [("NFD", "NFC"), ("NFC", "NFD")])
def test_keys_and_file_names_are_compared_after_nfc(tmp_path, disk_form, csv_form):
    names = ["café", "Ångström", "naïve"]
    files = [_wav(tmp_path / "audio" / (unicodedata.normalize(disk_form, n) + ".wav"), seed=i)
             for i, n in enumerate(names)]
    by_path = _csv(tmp_path / "p.csv", "path,spk\n" + "".join(
        f"audio/{unicodedata.normalize(csv_form, n)}.wav,s{i}\n" for i, n in enumerate(names)))
    out = tmp_path / "n.parquet"
    _build(tmp_path, by_path, out)
    ix = open_index(out)
    vocab = ix.vocabulary("spk")
    assert {p: vocab[i] for p, i in zip(ix.paths(), ix.label_values("spk"))} == {f: f"s{i}" for i, f in enumerate(files)}
    assert sorted(ix.paths()) == sorted(files)  # the index keeps the names as they are on disk
    stems = _csv(tmp_path / "s.csv", "name,spk\n" + "".join(
        f"{unicodedata.normalize(csv_form, n)},s{i}\n" for i, n in enumerate(names)))
    _build(tmp_path, stems, out, labels_key="name", labels_match="stem")
    assert sorted(open_index(out).label_values("spk").tolist()) == [0, 1, 2]


def test_labels_are_checked_before_any_audio_is_decoded_and_suggest_the_match(three, tmp_path):
    root, files = three
    stems = _csv(tmp_path / "stems.csv", "path,spk\na,x\nb,y\nc,z\n")
    out = tmp_path / "x.parquet"
    with pytest.raises(ValueError) as info:
        _build(root, stems, out, chunk_size=1)
    message = str(info.value)
    assert stems in message and "no row for 3 of 3 indexed file(s)" in message
    assert "Keys resolved to: " + repr(os.path.join(str(tmp_path), "a")) in message  # how a key was resolved
    assert all(repr(f) in message for f in files)  # beside the files
    assert "--labels-match stem (labels_match='stem') joins 3 of 3" in message
    assert not (tmp_path / ".x.parquet.parts").exists()  # no chunk was read: nothing was decoded
    report = _build(root, stems, out, labels_match="stem")  # the Python twin of --labels-match
    assert report.rows == 3 and open_index(out).vocabulary("spk") == ["x", "y", "z"]


def test_label_keywords_and_a_label_source_do_not_mix(three, tmp_path):
    root, _ = three
    with pytest.raises(ValueError, match=r"give \['match'\] on it"):
        _build(root, LabelSource(str(tmp_path / "l.csv")), tmp_path / "x.parquet", labels_match="stem")
    with pytest.raises(ValueError, match=r"name \['text'\], which no tar sidecar or Parquet column"):
        _build(root, None, tmp_path / "x.parquet", text_columns=["text"])


def test_every_cli_option_of_index_has_a_python_twin():
    from audiotree.cli.index import index

    renamed = {"jobs": "max_workers", "progress": "show_progress"}  # the CLI's names for two Python keywords
    python = inspect.signature(build_index).parameters
    cli = [p for p in index.params if p.name != "help"]
    missing = [p.name for p in cli if renamed.get(p.name, p.name) not in python]
    assert not missing, f"`audiotree index` options without a build_index keyword: {missing}"
    for p in cli:  # the same defaults where the CLI states one (the Python default None means the same)
        default = python[renamed.get(p.name, p.name)].default
        if isinstance(p.default, (bool, int, str)) and default is not None and default is not inspect.Parameter.empty:
            assert p.default == default or (p.name == "executor" and default is None), (p.name, p.default, default)


# ------------------------------------------------------------------ hostile labels
def test_identifiers_that_look_numeric_stay_distinct_strings(three, tmp_path):
    root, files = three
    labels = _csv(tmp_path / "l.csv", "path,spk,big,snr,flag\n"
                  f"{files[0]},007,{2 ** 70},1.5,true\n{files[1]},7,{2 ** 70 + 1},2,false\n{files[2]},07,3,,true\n")
    out = tmp_path / "i.parquet"
    _build(root, labels, out)
    ix = open_index(out)
    assert ix.meta["labels"]["spk"]["kind"] == "category" and ix.meta["labels"]["big"]["kind"] == "category"
    assert sorted(ix.vocabulary("spk")) == ["007", "07", "7"]
    assert sorted(ix.vocabulary("big")) == sorted([str(2 ** 70), str(2 ** 70 + 1), "3"])
    assert ix.meta["labels"]["snr"] == {"kind": "numeric"}
    assert ix.label_values("snr")[:2].tolist() == [1.5, 2.0] and np.isnan(ix.label_values("snr")[2])
    assert ix.label_values("flag").tolist() == [True, False, True]
    _build(root, labels, out, numeric_columns=["spk"])
    assert open_index(out).label_values("spk").tolist() == [7, 7, 7]
    jsonl = tmp_path / "l.jsonl"
    jsonl.write_text("".join(json.dumps({"path": f, "n": 2 ** 70 + i}) + "\n" for i, f in enumerate(files)))
    _build(root, str(jsonl), out)
    assert sorted(open_index(out).vocabulary("n")) == [str(2 ** 70 + i) for i in range(3)]


def test_a_declared_numeric_column_with_a_word_is_an_error(three, tmp_path):
    root, files = three
    labels = _csv(tmp_path / "l.csv", f"path,snr\n{files[0]},1\n{files[1]},loud\n{files[2]},3\n")
    with pytest.raises(ValueError, match=r"l\.csv: column 'snr' is declared numeric but row 3 holds 'loud'"):
        _build(root, labels, tmp_path / "x.parquet", numeric_columns="snr")


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_duplicated_header_column_names_the_file_and_column(three, tmp_path, suffix):
    root, files = three
    path = tmp_path / f"dup{suffix}"
    if suffix == ".csv":
        _csv(path, "path,speaker,speaker\n" + "".join(f"{f},a,b\n" for f in files))
    else:
        pq.write_table(pa.Table.from_arrays([pa.array(files), pa.array(["a"] * 3), pa.array(["b"] * 3)],
                                            names=["path", "speaker", "speaker"]), path)
    with pytest.raises(ValueError, match=r"dup\.\w+: column 'speaker' appears 2 times in the header"):
        _build(root, str(path), tmp_path / "x.parquet")


def test_a_5_mb_field_is_accepted(three, tmp_path):
    root, files = three
    big = "word " * 1_000_000
    labels = _csv(tmp_path / "l.csv", f"path,text\n{files[0]},{big}\n{files[1]},short\n{files[2]},x\n")
    out = tmp_path / "b.parquet"
    _build(root, labels, out, text_columns=["text"])
    assert open_index(out).label_values("text").text(0) == big


@pytest.mark.slow
def test_thousands_of_label_columns_build_in_one_step(three, tmp_path):
    # Label columns are appended in one new table (index.labels.append_label_columns), not one schema copy per
    # column: before, 8,000 columns took 30 s and 16,000 took 144 s. Its cost is for benchmarks, not this test.
    root, files = three
    n = 8_000
    header = "path," + ",".join(f"c{j}" for j in range(n))
    rows = "".join(f"{f}," + ",".join(str(j % 7) for j in range(n)) + "\n" for f in files)
    labels = _csv(tmp_path / f"l{n}.csv", header + "\n" + rows)
    _build(root, labels, tmp_path / f"o{n}.parquet")
    ix = open_index(tmp_path / f"o{n}.parquet")
    assert len(ix.label_names) == n
    assert ix.label_values("c6").tolist() == [6] * len(files)


def test_deeply_nested_index_metadata_is_a_clear_error(three, tmp_path):
    root, files = three
    good = tmp_path / "g.parquet"
    _build(root, None, good)
    table = pq.read_table(good)
    meta = dict(table.schema.metadata)
    meta[b"audiotree"] = b'{"format": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    bad = tmp_path / "deep.parquet"
    pq.write_table(table.replace_schema_metadata(meta), bad)
    with pytest.raises(ValueError, match=r"deep\.parquet: the index metadata is JSON nested too deeply"):
        open_index(bad)


def test_deeply_nested_jsonl_labels_name_the_file(three, tmp_path):
    root, files = three
    path = tmp_path / "deep.jsonl"
    path.write_text('{"path": "a", "x": ' + "[" * 50_000 + "]" * 50_000 + "}\n")
    with pytest.raises(ValueError, match=r"deep\.jsonl"):
        _build(root, str(path), tmp_path / "x.parquet")

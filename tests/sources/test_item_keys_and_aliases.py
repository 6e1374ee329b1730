"""Ids reach items and batches; aliases make one label of several columns; sidecars stream without an index.

* Every item carries ``extras["key"]``: the utterance id of a segment index
  (imports), a tar member's webdataset key, a Parquet row's ``FILE:GROUP:ROW``,
  a plain file's path, as code-point rows (``item_keys`` decodes them), so batches stay array pytrees
  that ``jax.jit`` takes, in Grain and in torch.
  Hypotheses written by key score against the manifest without a join.
* ``Corpus(labels={"text": ["transcript", "txt"]})`` gives one column (and
  one vocabulary for categories) over sources that name a label differently.
* ``create_audio_dataset(sources=shards, corpus=Corpus(labels=["text"]))``
  carries a member's ``.json``/``.txt`` fields without an index.
"""

from __future__ import annotations

import grain
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audiotree import AudioTree
from audiotree.index import build_index, import_kaldi, open_index
from audiotree.sources import Corpus, create_audio_dataset
from audiotree.sources.item_labels import item_keys
from label_corpus import HF_FIXTURE, RATE, audio_bytes, write_shards

SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


def _build(sources, out, **kwargs):
    return build_index(sources, out, executor="serial", show_progress=False, loudness=False, **kwargs)


def _items(ds):
    return [ds[i] for i in range(len(ds))]


# ------------------------------------------------------------------ keys
@pytest.fixture(scope="module")
def kaldi(tmp_path_factory):
    root = tmp_path_factory.mktemp("kaldi")
    (root / "rec1.wav").write_bytes(audio_bytes(1, "WAV", seconds=1.0))
    (root / "rec2.wav").write_bytes(audio_bytes(2, "WAV", seconds=1.0))
    (root / "wav.scp").write_text(f"rec1 {root}/rec1.wav\nrec2 {root}/rec2.wav\n")
    (root / "segments").write_text("a-1 rec1 0.0 0.4\na-2 rec1 0.5 0.9\nb-1 rec2 0.1 0.6\n")
    manifest = {"a-1": "HELLO THERE", "a-2": "GOOD BYE", "b-1": "HELLO AGAIN"}
    (root / "text").write_text("".join(f"{k} {v}\n" for k, v in manifest.items()))
    out = root / "kaldi.parquet"
    import_kaldi(root, out, loudness=False, executor="serial")
    return out, manifest


def test_an_imported_utterance_id_is_every_item_and_batch_key(kaldi):
    out, manifest = kaldi
    ds = create_audio_dataset(corpus=Corpus(index=out, labels=["id", "text"]), sample_rate=RATE, duration=None,
                              shuffle=False)
    items = _items(ds)
    assert sorted(item_keys(item)[0] for item in items) == sorted(manifest)
    assert all(item.extras["id"] == item_keys(item) for item in items)
    # Hypotheses written by key score against the manifest without a join.
    hypotheses = {}
    for batch in ds.to_iter_dataset(SYNC).batch(2, batch_fn=AudioTree.batch):
        assert batch.extras["key"].dtype == np.int32  # code-point rows: the batch stays an array pytree
        for key, text in zip(item_keys(batch), batch.extras["text"]):
            hypotheses[key] = text.lower()  # a "recogniser"
    assert {k: v.upper() for k, v in hypotheses.items()} == manifest


def test_torch_batches_keep_the_keys(kaldi):
    torch = pytest.importorskip("torch")
    from audiotree.torch import collate

    out, manifest = kaldi
    ds = create_audio_dataset(corpus=Corpus(index=out), sample_rate=RATE, duration=0.3, shuffle=False)
    batch = collate(_items(ds))
    assert item_keys(batch) == sorted(manifest)
    assert isinstance(batch.waveform, torch.Tensor)


def test_members_rows_and_files_have_keys_with_and_without_an_index(tmp_path):
    write_shards(tmp_path / "wds", shards=1, per_shard=2)
    shard = str(tmp_path / "wds" / "train-000000.tar")
    wav = tmp_path / "plain.wav"
    wav.write_bytes(audio_bytes(3, "WAV"))
    expected = ["s0-0", "s0-1", f"{HF_FIXTURE.name}:0:0", f"{HF_FIXTURE.name}:0:1", f"{HF_FIXTURE.name}:0:2",
                str(wav)]
    sources = [shard, str(HF_FIXTURE), str(wav)]
    streamed = create_audio_dataset(sources=sources, sample_rate=RATE, duration=0.1, shuffle=False,
                                    corpus=Corpus(on_read_error="skip"))
    keys = {item_keys(item)[0] for item in _items(streamed) if item is not None}
    assert keys == set(expected)
    out = tmp_path / "ix.parquet"
    _build(sources, out)
    indexed = create_audio_dataset(corpus=Corpus(index=out), sample_rate=RATE, duration=0.1, shuffle=False)
    assert {item_keys(item)[0] for item in _items(indexed)} == set(expected)


def test_a_parquet_id_column_is_the_key(tmp_path):
    table = pq.read_table(HF_FIXTURE)
    hf = tmp_path / "with-ids.parquet"
    pq.write_table(table.append_column("id", pa.array(["u-a", "u-b", "u-c", "u-d"])), hf)
    out = tmp_path / "ix.parquet"
    _build(str(hf), out)
    ds = create_audio_dataset(corpus=Corpus(index=out), sample_rate=RATE, duration=0.1, shuffle=False)
    assert [item_keys(item) for item in _items(ds)] == [["u-a"], ["u-b"], ["u-c"]]


def test_a_label_an_index_lacks_is_refused_with_advice_that_applies(tmp_path):
    wav = tmp_path / "plain.wav"
    wav.write_bytes(audio_bytes(3, "WAV"))
    out = tmp_path / "ix.parquet"
    _build(str(wav), out)
    with pytest.raises(ValueError, match=r"no label column 'id'.*extras\['key'\]"):
        create_audio_dataset(corpus=Corpus(index=out, labels=["id"]), sample_rate=RATE, duration=0.1)


# ------------------------------------------------------------------ aliases
def test_three_names_for_one_transcript_give_one_column(tmp_path):
    # HF columns name it "transcript", webdataset JSON "text", a bare .txt member "txt".
    hf = tmp_path / "hf.parquet"
    table = pq.read_table(HF_FIXTURE)
    table = table.rename_columns(["transcript" if n == "text" else n for n in table.column_names])
    pq.write_table(table, hf)
    write_shards(tmp_path / "json", shards=1, per_shard=2, txt=False)
    import webdataset

    plain = tmp_path / "plain-000000.tar"
    with webdataset.TarWriter(str(plain)) as sink:  # audio and a bare .txt only
        for k in range(2):
            sink.write({"__key__": f"p{k}", "flac": audio_bytes(70 + k), "txt": f"bare words {k}"})
    out = tmp_path / "mixed.parquet"
    _build([str(hf), str(tmp_path / "json" / "train-000000.tar"), str(plain)], out)
    ds = create_audio_dataset(corpus=Corpus(index=out, labels={"text": ["transcript", "txt"]}, on_read_error="skip"),
                              sample_rate=RATE, duration=None, shuffle=False)
    texts = {item_keys(item)[0]: item.extras["text"][0] for item in _items(ds) if item is not None}
    assert texts == {f"{hf.name}:0:0": "a tone at four forty", f"{hf.name}:0:1": "some noise",
                     f"{hf.name}:0:2": "a lower tone", "s0-0": "shard words 0 0", "s0-1": "shard words 0 1",
                     "p0": "bare words 0", "p1": "bare words 1"}
    batch = AudioTree.batch([item for item in _items(ds) if item is not None])
    assert len(batch.extras["text"]) == 7 and set(batch.extras) == {"text", "key"}


def test_aliased_categories_share_one_vocabulary(tmp_path):
    from audiotree.sources.item_labels import label_vocabulary

    folder = tmp_path / "wav"
    folder.mkdir()
    for i in range(4):
        (folder / f"u{i}.wav").write_bytes(audio_bytes(i, "WAV"))
    (tmp_path / "l.csv").write_text("path,speaker,spk\n" + "wav/u0.wav,ann,\nwav/u1.wav,bob,\n"
                                    + "wav/u2.wav,,cy\nwav/u3.wav,,ann\n", encoding="utf-8")
    out = tmp_path / "ix.parquet"
    _build(str(folder), out, labels=str(tmp_path / "l.csv"))
    ix = open_index(out)
    assert ix.vocabulary("speaker") == ["", "ann", "bob"] and ix.vocabulary("spk") == ["", "ann", "cy"]
    labels = {"speaker": ["spk"]}
    vocab = label_vocabulary(out, labels)["speaker"]
    assert vocab == ["ann", "bob", "cy"]
    ds = create_audio_dataset(corpus=Corpus(index=out, labels=labels), sample_rate=RATE, duration=0.1, shuffle=False)
    got = {item_keys(item)[0].rsplit("/", 1)[-1]: vocab[int(item.extras["speaker"][0])] for item in _items(ds)}
    assert got == {"u0.wav": "ann", "u1.wav": "bob", "u2.wav": "cy", "u3.wav": "ann"}
    assert all(item.extras["speaker"].dtype == np.int32 for item in _items(ds))


# ------------------------------------------------------------------ streaming sidecars
def test_sidecars_stream_without_an_index(tmp_path):
    write_shards(tmp_path / "wds", shards=2, per_shard=2, fields={"n": 4})
    shards = str(tmp_path / "wds" / "train-{000000..000001}.tar")
    ds = create_audio_dataset(sources=shards, corpus=Corpus(labels=["text", "txt", "speaker", "n"]),
                              sample_rate=RATE, duration=0.1, shuffle=False)
    items = _items(ds)
    assert [item.extras["text"] for item in items] == [[f"shard words {s} {k}"] for s in range(2) for k in range(2)]
    assert [item.extras["txt"][0] for item in items] == [f"plain words {s} {k}" for s in range(2) for k in range(2)]
    assert [item.extras["speaker"][0] for item in items] == ["spk0", "spk1"] * 2
    assert all(item.extras["n"].tolist() == [4] for item in items)
    batch = AudioTree.batch(items)
    assert item_keys(batch) == ["s0-0", "s0-1", "s1-0", "s1-1"] and batch.extras["n"].shape == (4,)
    parquet = create_audio_dataset(sources=str(HF_FIXTURE), corpus=Corpus(labels=["text", "score"],
                                                                          on_read_error="skip"),
                                   sample_rate=RATE, duration=0.1, shuffle=False)
    assert parquet[1].extras["text"] == ["some noise"] and parquet[1].extras["score"].tolist() == [2.0]
    with pytest.raises(ValueError, match=r"No tar sidecar or Parquet column .* holds label 'mood'"):
        create_audio_dataset(sources=shards, corpus=Corpus(labels=["mood"]), sample_rate=RATE, duration=0.1)


def test_relative_shards_stream_their_sidecars(tmp_path, monkeypatch):
    write_shards(tmp_path / "wds", shards=1, per_shard=2)
    monkeypatch.chdir(tmp_path)
    ds = create_audio_dataset(sources="./wds/train-000000.tar", corpus=Corpus(labels=["text"]),
                              sample_rate=RATE, duration=0.1, shuffle=False)
    assert [item.extras["text"][0] for item in _items(ds)] == ["shard words 0 0", "shard words 0 1"]


def test_a_batch_with_keys_goes_through_jit_and_device_put(kaldi):
    import jax

    out, manifest = kaldi
    ds = create_audio_dataset(corpus=Corpus(index=out), sample_rate=RATE, duration=0.3, shuffle=False)
    batch = AudioTree.batch(_items(ds))
    on_device = jax.device_put(batch)
    loudest = jax.jit(lambda tree: (abs(tree.waveform).max(), tree.extras["key"]))(on_device)
    assert item_keys(on_device) == sorted(manifest)
    assert np.array_equal(np.asarray(loudest[1]), batch.extras["key"])

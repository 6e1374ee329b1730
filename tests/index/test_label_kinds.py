"""One rule for text, and labels merged per row.

* A label named ``text``, ``transcript``, ``sentence``, ``normalized_text`` or
  ``txt`` is text whatever the size of the set (a dev set of three
  transcripts and a train set of a million agree), in labels files, tar
  sidecars, Parquet columns and segment lists; ``text_columns=`` and
  ``numeric_columns=`` (``--text-columns``/``--numeric-columns``) work for
  every source kind; the index records each label's kind.
* A labels file wins where it has a row; sidecars and Parquet columns fill the
  rows it does not cover; the build report counts the rows each source filled.
"""

from __future__ import annotations

import numpy as np
import pytest

from audiotree.index import build_index, open_index
from audiotree.sources import Corpus, create_audio_dataset
from label_corpus import HF_FIXTURE, RATE, audio_bytes, write_shards


def _build(sources, out, **kwargs):
    kwargs.setdefault("executor", "serial")
    return build_index(sources, out, show_progress=False, loudness=False, **kwargs)


def _kinds(out):
    return {n: s["kind"] for n, s in open_index(out).meta["labels"].items()}


# ------------------------------------------------------------------ one rule for text
def test_transcripts_are_text_in_a_small_set_from_every_source_kind(tmp_path):
    shards = tmp_path / "wds"
    write_shards(shards, shards=1, per_shard=3)
    _build(str(shards / "train-000000.tar"), tmp_path / "wds.parquet")
    kinds = _kinds(tmp_path / "wds.parquet")
    assert kinds["text"] == "text" and kinds["txt"] == "text" and kinds["speaker"] == "category"
    _build(str(HF_FIXTURE), tmp_path / "hf.parquet")
    assert _kinds(tmp_path / "hf.parquet")["text"] == "text"
    folder = tmp_path / "wav"
    folder.mkdir()
    for i in range(3):
        (folder / f"u{i}.wav").write_bytes(audio_bytes(i, "WAV"))
    (tmp_path / "l.csv").write_text("path,transcript,sentence,normalized_text,speaker\n" + "".join(
        f"wav/u{i}.wav,words {i % 2},s {i},n {i},spk{i % 2}\n" for i in range(3)), encoding="utf-8")
    _build(str(folder), tmp_path / "csv.parquet", labels=str(tmp_path / "l.csv"))
    kinds = _kinds(tmp_path / "csv.parquet")
    assert kinds == {"transcript": "text", "sentence": "text", "normalized_text": "text", "speaker": "category"}
    # Items carry strings, not category ids.
    ds = create_audio_dataset(corpus=Corpus(index=tmp_path / "csv.parquet", labels=["transcript"]),
                              sample_rate=RATE, duration=None, shuffle=False)
    assert ds[0].extras["transcript"] == ["words 0"]


def test_segment_lists_give_text_by_name(tmp_path):
    wav = tmp_path / "rec.wav"
    wav.write_bytes(audio_bytes(1, "WAV", seconds=1.0))
    segments = tmp_path / "segments.csv"
    segments.write_text(f"path,start,end,id,sentence\n{wav},0,0.4,u1,HELLO\n{wav},0.5,0.9,u2,HELLO\n",
                        encoding="utf-8")
    _build(str(wav), tmp_path / "seg.parquet", segments=str(segments))
    assert _kinds(tmp_path / "seg.parquet")["sentence"] == "text"
    segments.write_text(f"path,start,end,id,speaker\n{wav},0,0.4,u1,ann\n{wav},0.5,0.9,u2,bob\n", encoding="utf-8")
    _build(str(wav), tmp_path / "declared.parquet", segments=str(segments), text_columns=["speaker"])
    assert _kinds(tmp_path / "declared.parquet")["speaker"] == "text"


def test_text_and_numeric_columns_apply_to_sidecars_and_parquet_columns(tmp_path):
    shards = tmp_path / "wds"
    write_shards(shards, shards=1, per_shard=3, fields={"code": "007"})
    out = tmp_path / "declared.parquet"
    _build(str(shards / "train-000000.tar"), out, text_columns=["speaker"], numeric_columns=["code"])
    ix = open_index(out, columns="all")
    assert _kinds(out)["speaker"] == "text" and _kinds(out)["code"] == "numeric"
    assert ix.table.column("code").to_pylist() == [7.0, 7.0, 7.0]
    _build(str(HF_FIXTURE), tmp_path / "hf.parquet", text_columns=["speaker"])
    assert _kinds(tmp_path / "hf.parquet")["speaker"] == "text"
    with pytest.raises(ValueError, match=r"\['nope'\], which no tar sidecar or Parquet column"):
        _build(str(HF_FIXTURE), tmp_path / "bad.parquet", text_columns=["nope"])


def test_the_cli_takes_text_columns_without_a_labels_file(tmp_path):
    from click.testing import CliRunner

    from audiotree.cli import cli

    out = tmp_path / "cli.parquet"
    result = CliRunner().invoke(cli, ["index", str(HF_FIXTURE), "--out", str(out), "--executor", "serial",
                                      "--no-progress", "--no-loudness", "--text-columns", "speaker"])
    assert result.exit_code == 0, result.output
    assert _kinds(out)["speaker"] == "text"


def test_two_indexes_that_disagree_on_a_kind_are_refused_naming_both(tmp_path):
    from audiotree.sources import create_balanced_audio_dataset

    folder = tmp_path / "wav"
    folder.mkdir()
    for i in range(3):
        (folder / f"u{i}.wav").write_bytes(audio_bytes(i, "WAV"))
    (tmp_path / "a.csv").write_text("path,mood\n" + "".join(f"wav/u{i}.wav,m{i}\n" for i in range(3)))
    _build(str(folder), tmp_path / "a.parquet", labels=str(tmp_path / "a.csv"))
    _build(str(folder), tmp_path / "b.parquet", labels=str(tmp_path / "a.csv"), text_columns=["mood"])
    with pytest.raises(ValueError, match=r"'mood' is category in .*a\.parquet but text in .*b\.parquet"):
        create_balanced_audio_dataset(sources={"a": str(tmp_path / "a.parquet"), "b": str(tmp_path / "b.parquet")},
                                      corpus=Corpus(labels=["mood"]), sample_rate=RATE, duration=0.1)


# ------------------------------------------------------------------ labels merge per row
def test_a_labels_file_wins_where_it_has_a_row_and_sidecars_fill_the_rest(tmp_path):
    shards = tmp_path / "wds"
    keys = write_shards(shards, shards=1, per_shard=3)
    folder = tmp_path / "flac"
    folder.mkdir()
    (folder / "extra.flac").write_bytes(audio_bytes(50))
    labels = tmp_path / "labels.csv"
    labels.write_text(f"path,text,speaker\n{folder / 'extra.flac'},from the labels file,spk9\n", encoding="utf-8")
    out = tmp_path / "merged.parquet"
    report = _build([str(folder), str(shards / "train-000000.tar")], out, labels=str(labels),
                    labels_missing="null")
    ix = open_index(out, columns="all")
    text = dict(zip(ix.paths(), ix.table.column("text").to_pylist()))
    speaker = dict(zip(ix.paths(), ix.table.column("speaker").to_pylist()))
    assert text[str(folder / "extra.flac")] == "from the labels file" and speaker[str(folder / "extra.flac")] == "spk9"
    members = [p for p in ix.paths() if p.startswith("tar://")]
    assert [text[p] for p in members] == [f"shard words 0 {k}" for k in range(3)]
    assert [speaker[p] for p in members] == [f"spk{k % 2}" for k in range(3)]
    assert len(keys) == 3 and ix.vocabulary("speaker") == ["spk0", "spk1", "spk9"]
    assert report.labels_filled == {str(labels): 1, "sidecars": 3}


def test_the_cli_report_counts_the_rows_each_source_filled(tmp_path):
    from click.testing import CliRunner

    from audiotree.cli import cli

    shards = tmp_path / "wds"
    write_shards(shards, shards=1, per_shard=2)
    labels = tmp_path / "labels.csv"
    member = open_index_paths(shards / "train-000000.tar", tmp_path)[0]
    labels.write_text(f"path,text\n\"{member}\",fixed transcript\n", encoding="utf-8")
    out = tmp_path / "cli.parquet"
    result = CliRunner().invoke(cli, ["index", str(shards / "train-000000.tar"), "--out", str(out), "--labels",
                                      str(labels), "--labels-missing", "null", "--executor", "serial",
                                      "--no-progress", "--no-loudness"])
    assert result.exit_code == 0, result.output
    assert f"labels: 1 from {labels}, 2 from sidecars row(s)" in result.output
    assert open_index(out, columns="all").table.column("text").to_pylist() == ["fixed transcript",
                                                                              "shard words 0 1"]


def open_index_paths(shard, tmp_path):
    out = tmp_path / "probe.parquet"
    _build(str(shard), out)
    return open_index(out).paths()


def test_numbers_and_strings_of_one_name_merge_as_strings(tmp_path):
    shards = tmp_path / "wds"
    write_shards(shards, shards=1, per_shard=2, fields={"score": 3})
    labels = tmp_path / "labels.csv"
    member = open_index_paths(shards / "train-000000.tar", tmp_path)[1]
    labels.write_text(f"path,score\n\"{member}\",high\n", encoding="utf-8")
    out = tmp_path / "m.parquet"
    _build(str(shards / "train-000000.tar"), out, labels=str(labels), labels_missing="null")
    assert open_index(out, columns="all").table.column("score").to_pylist() == ["3", "high"]
    assert np.all(np.asarray(open_index(out).label_values("score")) >= 0)

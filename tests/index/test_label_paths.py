"""Relative and absolute paths are one corpus: every source kind keeps its labels whatever the spelling.

Plain files, folders, globs, tar shards (brace patterns), Parquet files and
labels files, spelled relative (``wds/x.tar``), ``./``-relative and absolute,
and reached through a symlinked folder, give the same label columns.
"""

from __future__ import annotations

import os

import pytest

from audiotree.index import build_index, open_index
from label_corpus import make_label_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("spellings")
    info = make_label_corpus(root / "real")
    os.symlink(root / "real", root / "link", target_is_directory=True)
    return info


# (sources, labels file or None, the label columns that must be filled), relative to the corpus root.
KINDS = {
    "files": (["wav/utt-0.wav", "wav/utt-1.wav", "wav/utt-2.wav"], "wav/labels.csv", ("speaker", "text")),
    "folder": ("wav", "wav/labels.csv", ("speaker", "text")),
    "glob": ("wav/*.wav", "wav/labels.csv", ("speaker", "text")),
    "shards": ("wds/train-{000000..000001}.tar", None, ("speaker", "text", "txt")),
    "one shard": ("wds/train-000000.tar", None, ("speaker", "text", "txt")),
    "parquet": ("hf/train-00000-of-00001.parquet", None, ("speaker", "text", "score")),
    "parquet glob": ("hf/*.parquet", None, ("speaker", "text", "score")),
}


def _spell(value, how: str, root):
    if value is None:
        return None
    if isinstance(value, list):
        return [_spell(v, how, root) for v in value]
    if how == "relative":
        return value
    if how == "dot":
        return "./" + value
    if how == "absolute":
        return str(root / "real" / value)
    return str(root / "link" / value)  # through the symlinked folder


def _labels(out, names):
    ix = open_index(out, columns="all")
    return {n: ix.table.column(n).to_pylist() for n in names}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_source_kind_keeps_its_labels_in_every_spelling(corpus, tmp_path, monkeypatch, kind):
    sources, labels, names = KINDS[kind]
    root = corpus["root"].parent
    monkeypatch.chdir(corpus["root"])
    got = {}
    for how in ("absolute", "relative", "dot", "symlink"):
        out = tmp_path / f"{how}.parquet"
        build_index(_spell(sources, how, root), out, labels=_spell(labels, how, root), executor="serial",
                    show_progress=False, loudness=False)
        got[how] = _labels(out, names)
        for name in names:
            values = got[how][name]
            assert values and all(v is not None for v in values[:3]), (how, name, values)
    assert got["relative"] == got["absolute"] == got["dot"] == got["symlink"]


def test_a_labels_file_in_the_real_folder_joins_files_found_through_a_symlink(corpus, tmp_path, monkeypatch):
    root = corpus["root"].parent
    monkeypatch.chdir(root)
    out = tmp_path / "mixed.parquet"
    build_index("link/wav", out, labels=str(root / "real" / "wav" / "labels.csv"), executor="serial",
                show_progress=False, loudness=False)
    assert _labels(out, ["speaker"])["speaker"] == ["spk0", "spk1", "spk0"]


def test_build_index_on_one_relative_shard_keeps_the_sidecars(corpus, tmp_path, monkeypatch):
    monkeypatch.chdir(corpus["root"])
    out = tmp_path / "rel.parquet"
    build_index("wds/train-000000.tar", out, executor="serial", show_progress=False, loudness=False)
    ix = open_index(out, columns="all")
    assert ix.table.column("text").type == "string"
    assert ix.table.column("text").to_pylist() == [f"shard words 0 {k}" for k in range(3)]

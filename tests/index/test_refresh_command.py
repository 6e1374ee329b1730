"""The refresh command a stale-index error prints is a valid ``audiotree index`` command line.

``audiotree.commands`` spells the build settings with the CLI's options; these
tests parse what it prints with the real click command, so a renamed or removed
option fails here instead of in a user's terminal.
"""

from __future__ import annotations

import shlex

from audiotree.cli.index import index
from audiotree.commands import INDEX_REPEATED_FLAGS, INDEX_SETTING_FLAGS, INDEX_SWITCHES, index_refresh_command


def _option_names() -> set[str]:
    names = set()
    for param in index.params:
        names.update(getattr(param, "opts", ()))
        names.update(getattr(param, "secondary_opts", ()))
    return names


def test_every_flag_it_can_print_is_an_option_of_audiotree_index():
    printed = {flag for flag, _ in INDEX_SETTING_FLAGS + INDEX_REPEATED_FLAGS} | set(INDEX_SWITCHES)
    assert printed - _option_names() == set()


def test_the_printed_command_parses_back_to_the_build_settings(tmp_path):
    labels, segments = tmp_path / "labels.csv", tmp_path / "seg.csv"
    labels.write_text("path,speaker\n")
    segments.write_text("path,start,end\n")
    meta = {
        "sources": {
            "groups": {"speech": [str(tmp_path / "speech dir")]}, "pool": [str(tmp_path / "music")],
            "labels": str(labels), "labels_key": "file", "labels_match": "stem", "segments": str(segments),
            "text_columns": ["transcript", "notes"], "numeric_columns": ["take"],
        },
        "loudness": {"enabled": True, "mono": False},
    }
    out = tmp_path / "corpus.parquet"
    words = shlex.split(index_refresh_command(str(out), meta))
    assert words[:2] == ["audiotree", "index"]
    params = index.make_context("index", words[2:]).params
    assert params["out"] == str(out)
    assert list(params["sources"]) == [f"speech={tmp_path / 'speech dir'}", str(tmp_path / "music")]
    assert (params["labels"], params["labels_key"], params["labels_match"]) == (str(labels), "file", "stem")
    assert params["segments"] == str(segments)
    assert params["text_columns"] == ("transcript", "notes") and params["numeric_columns"] == ("take",)
    assert params["loudness"] is True and params["mono"] is False


def test_an_index_without_recorded_sources_asks_for_them():
    command = index_refresh_command("s3://bucket/corpus.parquet", {"loudness": {"enabled": False}})
    assert command == "audiotree index SOURCES... --out s3://bucket/corpus.parquet --no-loudness"

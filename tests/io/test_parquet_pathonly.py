"""Hugging Face ``datasets`` Parquet whose audio cells hold a path and no bytes (``Audio()`` over file paths, then
``to_parquet``): each row is read from the file it names, relative to the Parquet file's folder.

The fixtures in ``tests/data/hf_pathonly`` were written by ``datasets`` itself (``make_hf_pathonly.py``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree.errors import AudioReadError
from audiotree.io import parquet_audio
from audiotree.sources import create_audio_dataset
from test_storage import http_server  # noqa: F401 (the HTTP server of the storage tests)

FIXTURE = Path(__file__).resolve().parent.parent / "data" / "hf_pathonly"
FILES = ["audio/tone.flac", "audio/noise.wav", "audio/chirp.ogg"]


@pytest.fixture(autouse=True)
def _fresh():
    parquet_audio.forget()
    yield
    parquet_audio.forget()


@pytest.fixture()
def hf(tmp_path):
    """A copy of the fixture folder somewhere else (relative paths must follow the Parquet file, not the cwd)."""
    folder = tmp_path / "hf"
    shutil.copytree(FIXTURE, folder)
    return folder


def _items(source):
    ds = create_audio_dataset([str(source)], duration=None, shuffle=False, sample_rate=16000)
    return [ds[i].waveform[0, 0] for i in range(len(ds))]


def _expected(folder):
    return [soundfile.read(str(folder / f), dtype="float32")[0] for f in FILES]


def test_the_cells_as_datasets_wrote_them():
    cells = pq.read_table(FIXTURE / "pathonly.parquet").column("audio").to_pylist()
    assert [c["bytes"] for c in cells] == [None, None, None]
    assert [c["path"] for c in cells] == FILES
    mixed = pq.read_table(FIXTURE / "mixed.parquet").column("audio").to_pylist()
    assert mixed[0]["bytes"] is not None and mixed[1]["bytes"] is None


@pytest.mark.parametrize("name", ["pathonly", "mixed", "embedded"])
def test_path_only_cells_read_the_file_they_name(hf, name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the Parquet file's folder
    got = _items(hf / f"{name}.parquet")
    for a, b in zip(got, _expected(hf)):
        np.testing.assert_array_equal(a, b)


def test_index_build_reads_them(hf):
    from audiotree.cli import main
    from audiotree.index import open_index

    out = hf / "corpus.parquet"
    assert main(["index", str(hf / "pathonly.parquet"), "--out", str(out), "--executor", "serial"]) == 0
    ix = open_index(str(out))
    assert ix.column("readable").tolist() == [True, True, True]
    assert np.allclose(ix.column("duration"), 0.5)


def test_absolute_paths_are_read_as_is(hf, tmp_path):
    table = pq.read_table(hf / "pathonly.parquet")
    cells = [{"bytes": None, "path": str(hf / f)} for f in FILES]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The same schema and Hugging Face metadata as datasets wrote, with absolute paths.
    pq.write_table(table.set_column(0, "audio", pa.array(cells, table.schema.field("audio").type)),
                   elsewhere / "abs.parquet")
    for a, b in zip(_items(elsewhere / "abs.parquet"), _expected(hf)):
        np.testing.assert_array_equal(a, b)


def test_a_missing_linked_file_names_it(hf):
    os.remove(hf / "audio" / "noise.wav")
    ds = create_audio_dataset([str(hf / "pathonly.parquet")], duration=None, shuffle=False, sample_rate=16000)
    assert ds[0].waveform.shape == (1, 1, 8000)
    with pytest.raises(AudioReadError, match=r"row=1.*names the file '.*hf/audio/noise.wav' \(a relative path starts "
                                             r"from the Parquet file's folder\)"):
        ds[1]


def test_a_cell_without_bytes_or_path_is_still_empty(hf, tmp_path):
    table = pq.read_table(hf / "pathonly.parquet")
    cells = [{"bytes": None, "path": None}, {"bytes": None, "path": ""}, {"bytes": None, "path": FILES[2]}]
    pq.write_table(table.set_column(0, "audio", pa.array(cells, table.schema.field("audio").type)), hf / "e.parquet")
    ds = create_audio_dataset([str(hf / "e.parquet")], duration=None, shuffle=False, sample_rate=16000)
    for i in (0, 1):
        with pytest.raises(AudioReadError, match="the audio cell is empty .* names no file"):
            ds[i]
    assert ds[2].waveform.shape == (1, 1, 8000)


def test_a_remote_parquet_file_reads_paths_relative_to_its_url(http_server):  # noqa: F811
    for name in ("pathonly.parquet", *FILES):
        http_server.objects[f"/data/hf/{name}"] = (FIXTURE / name).read_bytes()
    got = _items(http_server.base + "/data/hf/pathonly.parquet")
    for a, b in zip(got, _expected(FIXTURE)):
        np.testing.assert_array_equal(a, b)

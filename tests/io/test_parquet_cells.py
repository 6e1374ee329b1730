"""A Parquet row whose audio bytes are stored verbatim is one ranged read of its own bytes.

Covers the HF-written fixture and pyarrow-written files of several row-group
sizes and layouts (uncompressed PLAIN, uncompressed dictionary, snappy, a plain
binary column), null and undecodable cells, and the bytes one random row costs
at a local HTTP server.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree.errors import AudioReadError
from audiotree.io import AudioFile, parquet_audio
from audiotree.io.members import open_member, parquet_url, parse
from audiotree.sources import Corpus, create_audio_dataset
from container_factories import RATE, flac_bytes
from test_storage import http_server  # noqa: F401 (the HTTP server of the storage tests)

HF_FIXTURE = Path(__file__).resolve().parent.parent / "data" / "hf_parquet" / "train-00000-of-00001.parquet"
STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
LAYOUTS = {
    "hf": dict(compression={"audio.bytes": "none", "audio.path": "none"}, use_dictionary=False,
               write_page_index=True),
    "dictionary": dict(compression="none"),  # uncompressed, the values in a dictionary page
    "snappy": dict(),  # pyarrow's defaults: read through the row group
}


@pytest.fixture(autouse=True)
def _fresh():
    parquet_audio.forget()
    yield
    parquet_audio.forget()


def _clips(n: int) -> list[bytes]:
    return [flac_bytes(0.3 + 0.05 * (i % 5), seed=i) for i in range(n)]


def _write(path: Path, cells: list, *, row_group_size: int, layout: str = "hf") -> Path:
    table = pa.table({"audio": pa.array([None if c is None else {"bytes": c, "path": f"u{i}.flac"}
                                         for i, c in enumerate(cells)], type=STRUCT)})
    pq.write_table(table, path, row_group_size=row_group_size, **LAYOUTS[layout])
    return path


def _urls(path: Path) -> list[str]:
    meta = pq.ParquetFile(path).metadata
    return [parquet_url(str(path), "audio", g, r)
            for g in range(meta.num_row_groups) for r in range(meta.row_group(g).num_rows)]


def _cell_bytes(url: str) -> bytes:
    with open_member(url) as f:
        return f.read()


@pytest.mark.parametrize("row_group_size", [1, 3, 7, 100])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_row_reads_back_its_bytes(tmp_path, layout, row_group_size):
    clips = _clips(9)
    path = _write(tmp_path / "a.parquet", clips, row_group_size=row_group_size, layout=layout)
    urls = _urls(path)
    order = [4, 0, 8, 2, 7, 1, 5, 3, 6]  # random access, crossing row groups
    for i in order:
        assert _cell_bytes(urls[i]) == clips[i], i
        span = parquet_audio.cell_span(urls[i], parse(urls[i]))
        assert (span is None) == (layout == "snappy")
    with AudioFile(urls[4]) as f:
        got = f.read(0, 1000)
    np.testing.assert_array_equal(got, soundfile.read(__import__("io").BytesIO(clips[4]), frames=1000,
                                                      dtype="float32", always_2d=True)[0])


@pytest.mark.parametrize("arrow_type", [pa.binary(), pa.large_binary()])
def test_plain_binary_column_is_ranged(tmp_path, arrow_type):
    clips = _clips(5)
    path = tmp_path / "b.parquet"
    pq.write_table(pa.table({"audio": pa.array(clips, type=arrow_type)}), path, row_group_size=2,
                   compression="none", use_dictionary=False)
    urls = _urls(path)
    assert [_cell_bytes(u) for u in urls] == clips
    assert all(parquet_audio.cell_span(u, parse(u)) is not None for u in urls)


def test_hf_fixture_rows_are_ranged_reads_of_their_bytes():
    table = pq.read_table(HF_FIXTURE, columns=["audio"]).column(0).to_pylist()
    urls = _urls(HF_FIXTURE)
    for url, cell in zip(urls, table):
        offset, size = parquet_audio.cell_span(url, parse(url))
        with open(HF_FIXTURE, "rb") as f:
            f.seek(offset)
            assert f.read(size) == cell["bytes"]
        assert _cell_bytes(url) == cell["bytes"]
    with pytest.raises(AudioReadError, match=r"row_group=0&row=3::.*train-00000-of-00001\.parquet"):
        with AudioFile(urls[3]) as f:
            f.read(0, 10)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_null_and_undecodable_cells_name_the_file_and_row(tmp_path, layout):
    clips = _clips(6)
    cells = list(clips)
    cells[2] = None  # the whole struct is null
    cells[4] = b"not audio at all" * 8
    table = pa.table({"audio": pa.array([None if c is None else {"bytes": c, "path": f"u{i}.flac"}
                                         for i, c in enumerate(cells)], type=STRUCT)})
    # Row 5: a struct whose bytes are null.
    table = pa.table({"audio": pa.concat_arrays([table.column(0).combine_chunks().slice(0, 5),
                                                 pa.array([{"bytes": None, "path": "u5.flac"}], type=STRUCT)])})
    path = tmp_path / "nulls.parquet"
    pq.write_table(table, path, row_group_size=3, **LAYOUTS[layout])
    urls = _urls(path)
    for row in (2, 5):
        with pytest.raises(AudioReadError, match=rf"row={row % 3}::.*nulls\.parquet.*null"):
            _cell_bytes(urls[row])
    ds = create_audio_dataset(sources=str(path), sample_rate=RATE, duration=None, shuffle=False)
    assert _cell_bytes(urls[3]) == clips[3]
    with pytest.raises(AudioReadError, match=r"row_group=1&row=1::.*nulls\.parquet"):
        ds[4]
    skipped = create_audio_dataset(sources=str(path), sample_rate=RATE, duration=None, shuffle=False,
                                   corpus=Corpus(on_read_error="skip"))
    got = [skipped[i] for i in range(6)]
    assert [g is None for g in got] == [False, False, True, False, True, True]


def test_a_rewritten_file_is_located_again(tmp_path):
    path = _write(tmp_path / "c.parquet", _clips(4), row_group_size=2)
    url = _urls(path)[3]
    assert _cell_bytes(url) == _clips(4)[3]
    other = _clips(8)[4:]
    _write(path, [b"x" * 7] + other, row_group_size=2)  # other sizes and offsets
    assert _cell_bytes(url) == other[2]


def test_one_random_row_reads_about_its_own_bytes(http_server, tmp_path):  # noqa: F811
    """Once a process has read a row group, another row of it costs that row's bytes, not the group's.

    The old reader (the whole audio column chunk of the group per read, the
    last group kept) reads a whole group for each of these rows.
    """
    clips = [flac_bytes(2.0, seed=i) for i in range(40)]
    path = _write(tmp_path / "h.parquet", clips, row_group_size=20)
    http_server.objects["/h.parquet"] = path.read_bytes()
    url = http_server.base + "/h.parquet"
    urls = [parquet_url(url, "audio", g, r) for g in range(2) for r in range(20)]
    assert _cell_bytes(urls[0]) == clips[0]  # the footer, and group 0 once
    assert _cell_bytes(urls[20]) == clips[20]  # group 1 once
    group_bytes = sum(len(c) for c in clips[:20])
    for i in (7, 33, 12, 25, 3):
        http_server.reset_counters()
        assert _cell_bytes(urls[i]) == clips[i]
        # One item's bytes, plus the HTTP server's headers and the range reader's read-ahead rounding.
        assert http_server.bytes_sent <= 1.25 * len(clips[i]) + 16384, (i, http_server.bytes_sent, len(clips[i]))
        assert http_server.bytes_sent < group_bytes / 5

"""MP3 and Ogg Vorbis seek tables are used only under the decoder they were checked with.

An index build records the decoder (``decoders`` in its metadata). A dataset
over an index whose tables were checked under another decoder warns, reads
those files without their tables (the local read's samples, more requests),
and an update reads exactly those rows again. Files written by lame and
oggenc, served by a counting HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree.index import build_index, freshness, open_index
from audiotree.io.decoder_identity import decoder_identity
from audiotree.io.flac_indexed import clear_header_cache
from audiotree.sources import Corpus, create_audio_dataset
from counted_http import CountedHttp
from factories import chirp

pytestmark = pytest.mark.skipif(not (shutil.which("lame") and shutil.which("oggenc") and shutil.which("flac")),
                                reason="lame, oggenc and flac are needed")
RATE = 44100


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("decoders")
    names = []
    for seed, (tool, ext) in enumerate((("lame", "mp3"), ("oggenc", "ogg"), ("flac", "flac"))):
        wav = folder / f"s{seed}.wav"
        soundfile.write(wav, chirp(12 * RATE, RATE, 1, seed=seed), RATE, subtype="PCM_16")
        out = folder / f"s{seed}.{ext}"
        args = {"lame": ["lame", "--quiet", "-b", "128", str(wav), str(out)],
                "oggenc": ["oggenc", "-Q", "-q", "4", "-o", str(out), str(wav)],
                "flac": ["flac", "-s", "-f", "-o", str(out), str(wav)]}[tool]
        subprocess.run(args, check=True, capture_output=True)
        names.append(out.name)
    server = CountedHttp({f"/{n}": (folder / n).read_bytes() for n in names})
    try:
        yield folder, server, [f"{server.base}/{n}" for n in names]
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _fresh():
    freshness.clear()
    clear_header_cache()
    yield
    freshness.clear()
    clear_header_cache()


def _meta(index: Path) -> dict:
    return json.loads(pq.read_metadata(index).metadata[b"audiotree"])


def _with_decoders(index: Path, decoders) -> None:
    table = pq.read_table(index)
    meta = _meta(index)
    if decoders is None:
        meta.pop("decoders", None)
    else:
        meta["decoders"] = decoders
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"audiotree": json.dumps(meta).encode()}),
                   index)


def _items(index: Path, server: CountedHttp) -> tuple[list[np.ndarray], int]:
    ds = create_audio_dataset(corpus=Corpus(index=str(index), on_stale="trust", read_ahead=None), duration=1.0,
                              sample_rate=RATE, shuffle=False, num_epochs=1)
    clear_header_cache()  # (each run fetches its headers: counts compare)
    server.reset()
    waves = [np.asarray(ds[i].waveform) for i in range(6)]
    return waves, server.counts()[0]


def test_a_build_records_its_decoder_and_tables_checked_under_another_are_not_used(served, tmp_path):
    folder, server, urls = served
    index = tmp_path / "index.parquet"
    build_index(urls, index, executor="serial", show_progress=False)
    assert _meta(index)["decoders"] == decoder_identity()
    rows = open_index(index, columns=["path", "seek_points"]).table.to_pylist()
    assert all(r["seek_points"] for r in rows), "every file gets its table"
    trusted, by_table = _items(index, server)

    other = tmp_path / "other.parquet"
    shutil.copy(index, other)
    _with_decoders(other, {"libsndfile": "0.0.1", "soundfile": "0.0.1"})
    with pytest.warns(UserWarning, match=r"other\.parquet: its MP3 and Ogg Vorbis seek tables were checked with "
                                         r".*0\.0\.1.*they are not used.*Update the index"):
        waves, without = _items(other, server)
    for a, b in zip(waves, trusted):  # the same samples, read without the MP3 and Ogg tables (more requests)
        np.testing.assert_array_equal(a, b)
    assert without > by_table, (without, by_table)

    legacy = tmp_path / "legacy.parquet"  # built before decoders were recorded: trusted as before
    shutil.copy(index, legacy)
    _with_decoders(legacy, None)
    with _no_warning():
        waves, count = _items(legacy, server)
    assert count == by_table
    for a, b in zip(waves, trusted):
        np.testing.assert_array_equal(a, b)


def test_an_update_under_another_decoder_reads_the_mp3_and_ogg_rows_again(served, tmp_path):
    _, _, urls = served
    index = tmp_path / "index.parquet"
    build_index(urls, index, executor="serial", show_progress=False)
    report = build_index(urls, index, executor="serial", show_progress=False)
    assert (report.read, report.reused) == (0, 3)
    _with_decoders(index, {"libsndfile": "0.0.1", "soundfile": "0.0.1"})
    report = build_index(urls, index, executor="serial", show_progress=False)
    assert (report.read, report.reused) == (2, 1)  # the MP3 and the Ogg file; the FLAC table holds anywhere
    assert _meta(index)["decoders"] == decoder_identity()
    rows = open_index(index, columns=["path", "seek_points"]).table.to_pylist()
    assert all(r["seek_points"] for r in rows)


def test_a_malformed_decoders_entry_is_refused_naming_the_index(served, tmp_path):
    _, _, urls = served
    index = tmp_path / "index.parquet"
    build_index(urls[2:], index, executor="serial", show_progress=False)
    _with_decoders(index, ["libsndfile"])
    with pytest.raises(ValueError, match=r"index\.parquet: the index metadata's 'decoders' entry is malformed"):
        open_index(index)


class _no_warning:
    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)

"""Issue 36: every integrity check runs the same on every path: a file, a tar member, a Parquet cell, a URL.

A FLAC whose STREAMINFO ``total_samples`` was lowered read as its first samples
when it sat in a tar shard or a Parquet cell (the last-frame check ran only for
local paths); and a Parquet file written with page checksums returned a flipped
byte of a cell read by its own ranged read. Both are now an AudioReadError
naming the item, through ``on_read_error``.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tarfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audiotree.errors import AudioReadError
from audiotree.io import AudioFile, parquet_audio, probe
from audiotree.io.members import parquet_url, parse
from audiotree.sources import Corpus, create_audio_dataset, find_audio_files
from container_factories import RATE, add_member, flac_bytes
from test_storage import http_server  # noqa: F401 (the HTTP server of the storage tests)

STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
LOWERED = 6000


@pytest.fixture(autouse=True)
def _fresh():
    parquet_audio.forget()
    yield
    parquet_audio.forget()


def _lowered(data: bytes, value: int = LOWERED) -> bytes:
    """``data`` with STREAMINFO's 36-bit total_samples set to ``value``."""
    b = bytearray(data)
    assert b[:4] == b"fLaC" and b[4] & 0x7F == 0
    b[8 + 13] = (b[8 + 13] & 0xF0) | ((value >> 32) & 0x0F)
    b[8 + 14:8 + 18] = struct.pack(">I", value & 0xFFFFFFFF)
    return bytes(b)


def _shard(path, files: dict[str, bytes], writer: str) -> None:
    if writer == "gnu":
        src = path.parent / f"src-{path.stem}"
        src.mkdir()
        for name, data in files.items():
            (src / name).write_bytes(data)
        subprocess.run(["tar", "-cf", str(path), "-C", str(src), *files], check=True)
    elif writer == "tarfile":
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for name, data in files.items():
                add_member(tar, name, data)
    else:
        import webdataset

        with webdataset.TarWriter(str(path)) as sink:
            for name, data in files.items():
                sink.write({"__key__": name.split(".")[0], "flac": data})


def _parquet(path, cells: list[bytes], layout: str) -> None:
    table = pa.table({"audio": pa.array([{"bytes": c, "path": f"u{i}.flac"} for i, c in enumerate(cells)],
                                        type=STRUCT)})
    if layout == "verbatim":  # as Hugging Face datasets writes it: a row is a ranged read of its bytes
        pq.write_table(table, path, compression={"audio.bytes": "none", "audio.path": "none"}, use_dictionary=False)
    else:
        pq.write_table(table, path)  # snappy: read through pyarrow


def _assert_refused(url: str) -> None:
    with pytest.raises(AudioReadError) as err:
        probe(url)
    assert f"claims {LOWERED} frames" in str(err.value) and "last FLAC frame ends" in str(err.value)


CLIP_SECONDS = 1.5


@pytest.fixture(scope="module")
def clips() -> dict[str, bytes]:
    good = flac_bytes(CLIP_SECONDS, 11)
    return {"good.flac": good, "bad.flac": _lowered(good)}


@pytest.mark.parametrize("writer", ["gnu", "tarfile", "webdataset"])
def test_lowered_flac_length_is_refused_as_a_tar_member(tmp_path, clips, writer):
    if writer == "gnu" and shutil.which("tar") is None:
        pytest.skip("GNU tar is not installed")
    shard = tmp_path / "s.tar"
    _shard(shard, clips, writer)
    urls = {u.split("://")[1].split("?")[0]: u for u in find_audio_files(str(shard))}
    _assert_refused(urls["bad.flac"])  # was: 6000 frames, the rest of the recording silently dropped
    assert probe(urls["good.flac"]).frames == int(CLIP_SECONDS * RATE)
    ds = create_audio_dataset(sources=str(shard), sample_rate=RATE, duration=None, shuffle=False,
                              corpus=Corpus(on_read_error="skip"))
    shapes = sorted(None if x is None else x.waveform.shape[-1] for x in (ds[0], ds[1]) if x is not None)
    assert shapes == [int(CLIP_SECONDS * RATE)]


@pytest.mark.parametrize("layout", ["verbatim", "snappy"])
def test_lowered_flac_length_is_refused_as_a_parquet_cell(tmp_path, clips, layout):
    path = tmp_path / "a.parquet"
    _parquet(path, [clips["good.flac"], clips["bad.flac"]], layout)
    _assert_refused(parquet_url(str(path), "audio", 0, 1))
    assert probe(parquet_url(str(path), "audio", 0, 0)).frames == int(CLIP_SECONDS * RATE)


def test_lowered_flac_length_is_refused_over_http(http_server, tmp_path, clips):  # noqa: F811
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in clips.items():
            add_member(tar, name, data)
    _parquet(tmp_path / "a.parquet", [clips["good.flac"], clips["bad.flac"]], "verbatim")
    http_server.objects.update({"/i36/bad.flac": clips["bad.flac"], "/i36/good.flac": clips["good.flac"],
                                "/i36/s.tar": buf.getvalue(), "/i36/a.parquet": (tmp_path / "a.parquet").read_bytes()})
    base = http_server.base + "/i36"
    _assert_refused(f"{base}/bad.flac")
    assert probe(f"{base}/good.flac").frames == int(CLIP_SECONDS * RATE)
    urls = {u.split("://")[1].split("?")[0]: u for u in find_audio_files(f"{base}/s.tar")}
    _assert_refused(urls["bad.flac"])
    with AudioFile(urls["good.flac"]) as f:
        assert f.read_all().shape == (int(CLIP_SECONDS * RATE), 1)
    _assert_refused(parquet_url(f"{base}/a.parquet", "audio", 0, 1))


# ------------------------------------------------------------------ Parquet page checksums


def _checksummed(path, cells: list[bytes], *, flip_row: int | None, layout: str = "verbatim") -> None:
    """Cells in one row group, a page per cell, CRCs recorded; one byte of ``flip_row``'s audio flipped."""
    table = pa.table({"audio": pa.array([{"bytes": c, "path": f"u{i}.flac"} for i, c in enumerate(cells)],
                                        type=STRUCT)})
    options = dict(compression={"audio.bytes": "none", "audio.path": "none"}, use_dictionary=False) \
        if layout == "verbatim" else dict(compression="none")
    pq.write_table(table, path, write_page_checksum=True, data_page_size=1, write_batch_size=1, **options)
    if flip_row is None:
        return
    raw = bytearray(path.read_bytes())
    cell = cells[flip_row]
    at = raw.rfind(cell) + len(cell) // 2  # in the page data, not a copy in a header's statistics
    assert raw.count(cell[len(cell) // 2 - 32:len(cell) // 2 + 32]) == 1
    raw[at] ^= 0x04
    path.write_bytes(bytes(raw))


def _wav_bytes(seconds: float, seed: int) -> bytes:
    import io

    import soundfile

    x = np.random.default_rng(seed).uniform(-0.5, 0.5, int(seconds * RATE)).astype(np.float32)
    buf = io.BytesIO()
    soundfile.write(buf, x, RATE, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@pytest.mark.parametrize("layout", ["verbatim", "dictionary"])
def test_parquet_page_checksum_mismatch_is_refused(tmp_path, layout):
    cells = [_wav_bytes(0.4 + 0.1 * i, 20 + i) for i in range(4)]  # PCM: a flipped byte is a wrong sample, no error
    path = tmp_path / "crc.parquet"
    _checksummed(path, cells, flip_row=2, layout=layout)
    with pytest.raises(OSError, match="CRC"):  # what pyarrow says when it checks
        pq.ParquetFile(path, page_checksum_verification=True).read()
    urls = [parquet_url(str(path), "audio", 0, r) for r in range(4)]
    with pytest.raises(AudioReadError) as err:  # was: the flipped byte decoded as audio
        with AudioFile(urls[2]) as f:
            f.read_all()
    assert "row=2::" in str(err.value) and "CRC32" in str(err.value) and "crc.parquet" in str(err.value)
    # A page per cell: the other rows' pages are intact and still read. A dictionary holds every value in one
    # page, so its CRC failing refuses every row (as pyarrow's check fails the whole chunk).
    refused = [True] * 4 if layout == "dictionary" else [False, False, True, False]
    for r in range(4):
        if not refused[r]:
            with AudioFile(urls[r]) as f:
                assert f.read_all().shape[0] == int((0.4 + 0.1 * r) * RATE)
    ds = create_audio_dataset(sources=str(path), sample_rate=RATE, duration=None, shuffle=False,
                              corpus=Corpus(on_read_error="skip"))
    assert [x is None for x in (ds[i] for i in range(4))] == refused


def test_parquet_page_checksums_pass_on_an_intact_file_and_through_pyarrow(tmp_path):
    cells = [flac_bytes(0.3, 30 + i) for i in range(3)]
    path = tmp_path / "ok.parquet"
    _checksummed(path, cells, flip_row=None)
    for r in range(3):
        url = parquet_url(str(path), "audio", 0, r)
        assert parquet_audio.cell_span(url, parse(url)) is not None  # the ranged read, its page checked
        with AudioFile(parquet_url(str(path), "audio", 0, r)) as f:
            assert f.read_all().shape == (int(0.3 * RATE), 1)
    # A compressed chunk is read through pyarrow, which checks the CRCs itself.
    snappy = tmp_path / "snappy.parquet"
    table = pa.table({"audio": pa.array([{"bytes": c, "path": "x.flac"} for c in cells], type=STRUCT)})
    pq.write_table(table, snappy, write_page_checksum=True, data_page_size=1, write_batch_size=1,
                   compression="snappy")
    with AudioFile(parquet_url(str(snappy), "audio", 0, 1)) as f:
        assert f.read_all().shape == (int(0.3 * RATE), 1)


# ------------------------------------------------------------------ the same mutants on every path


def _outcome(url: str):
    """``"refused"``, or the frames and a digest of the whole decode."""
    try:
        with AudioFile(url) as f:
            x = f.read_all()
            return (f.info.frames, x.shape, hash(x.tobytes()))
    except AudioReadError:
        return "refused"


@pytest.mark.parametrize("fmt", ["flac", "wav"])
def test_mutants_read_the_same_as_file_member_and_cell(tmp_path, fmt):
    """Issue 36's oracle: every mutant is refused, or decodes to the same samples, whatever holds its bytes."""
    from conftest import REPO_ROOT
    import sys

    sys.path.insert(0, str(REPO_ROOT / "fuzz"))
    from decode_rule import mutate, seed_bytes

    seed = seed_bytes(fmt, channels=1, seed=0)
    rng = np.random.default_rng([36, len(fmt)])
    mutants = [_lowered(seed, LOWERED)] if fmt == "flac" else []
    mutants += [mutate(seed, rng) for _ in range(40)]
    names = [f"m{i:03d}.{fmt}" for i in range(len(mutants))]
    for name, data in zip(names, mutants):
        (tmp_path / name).write_bytes(data)
    shard = tmp_path / "mutants.tar"
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in zip(names, mutants):
            add_member(tar, name, data)
    members = {u.split("://")[1].split("?")[0]: u for u in find_audio_files(str(shard))}
    cells = tmp_path / "mutants.parquet"
    _parquet(cells, mutants, "verbatim")
    differ = []
    for i, name in enumerate(names):
        as_file = _outcome(str(tmp_path / name))
        as_member = _outcome(members[name])
        as_cell = _outcome(parquet_url(str(cells), "audio", 0, i))
        if not as_file == as_member == as_cell:
            differ.append(f"{name}: file {as_file}, member {as_member}, cell {as_cell}")
    assert not differ, "\n".join(differ)
    if fmt == "flac":
        assert _outcome(members[names[0]]) == "refused"  # the lowered length: was read as its first 6000 samples

"""Issue 36: tar members that read as wrong data or vanished without an error.

Shards written by GNU tar, Python's tarfile and webdataset's ``TarWriter``:
sparse members, a shard cut exactly between two members, hard links, a member
named ``a::b.flac``, a member URL given as a source. Each item is what its
member means, or an AudioReadError naming the shard and member goes through
``on_read_error``.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import warnings

import numpy as np
import pytest
import soundfile

from audiotree.errors import AudioReadError
from audiotree.index import build_index, open_index
from audiotree.io import AudioFile
from audiotree.io.tar_shards import list_shard
from audiotree.sources import Corpus, create_audio_dataset, find_audio_files
from container_factories import RATE, add_member, flac_bytes
from test_storage import http_server  # noqa: F401 (the HTTP server of the storage tests)

needs_gnu_tar = pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar is not installed")
WRITERS = ["gnu", "tarfile", "webdataset"]


def _write_shard(path, files: dict[str, bytes], writer: str, tmp_path) -> None:
    """``files`` (name -> bytes) as a tar at ``path``, written by ``writer``, in that order."""
    if writer == "gnu":
        src = tmp_path / f"src-{path.stem}"
        src.mkdir()
        for name, data in files.items():
            (src / name).write_bytes(data)
        subprocess.run(["tar", "--format=gnu", "-cf", str(path), "-C", str(src), *files], check=True)
    elif writer == "tarfile":
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in files.items():
                add_member(tar, name, data)
    else:
        import webdataset

        with webdataset.TarWriter(str(path)) as sink:
            for name, data in files.items():
                key, ext = name.split(".", 1)
                sink.write({"__key__": key, ext: data})


def _decoded(data: bytes) -> np.ndarray:
    return soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)[0]


def _whole(sources, **corpus):
    return create_audio_dataset(sources=sources, sample_rate=RATE, duration=None, shuffle=False,
                                corpus=Corpus(**corpus) if corpus else None)


# ------------------------------------------------------------------ sparse members


def _holey_wav(path) -> np.ndarray:
    """A 16-bit WAV whose middle is 400 KiB of zero bytes left as a hole in the file (no blocks on disk)."""
    head = (np.sin(np.arange(2000) / 5) * 9000).astype(np.int16)
    buf = io.BytesIO()
    soundfile.write(buf, np.concatenate([head, np.zeros(204800, np.int16), head]), RATE, subtype="PCM_16",
                    format="WAV")
    data = buf.getvalue()
    hole_from, hole_to = 44 + 4096 * 2, len(data) - 4096 * 2  # block-aligned enough for the file system
    with open(path, "wb") as f:
        f.write(data[:hole_from])
        f.seek(hole_to)
        f.write(data[hole_to:])
    assert path.read_bytes() == data
    return _decoded(data)


@needs_gnu_tar
@pytest.mark.parametrize("fmt", ["gnu", "pax"])
def test_sparse_member_is_refused_not_read_as_contiguous_bytes(tmp_path, fmt):
    src = tmp_path / "src"
    src.mkdir()
    _holey_wav(src / "holey.wav")
    (src / "after.flac").write_bytes(flac_bytes(0.5, 3))
    shard = tmp_path / f"{fmt}.tar"
    subprocess.run(["tar", "--sparse", f"--format={fmt}", "-cf", str(shard), "-C", str(src), "holey.wav",
                    "after.flac"], check=True)
    with tarfile.open(shard) as tar:
        if not tar.getmember("holey.wav").issparse():
            pytest.skip("this file system keeps no holes, so GNU tar wrote no sparse member")
    with pytest.raises(AudioReadError) as err:  # was: the compacted bytes and the next member, decoded as PCM
        _whole(str(shard))
    assert "holey.wav" in str(err.value) and str(shard) in str(err.value) and "sparse" in str(err.value)
    ds = _whole(str(shard), on_read_error="skip")
    assert len(ds) == 1 and ds[0].waveform.shape[-1] == RATE // 2  # the other member is read
    with pytest.raises(AudioReadError, match="sparse"):  # named directly, without a recorded range
        AudioFile(f"tar://holey.wav::{shard}")
    with pytest.warns(UserWarning, match=r"holey\.wav.*sparse"):
        report = build_index(str(shard), tmp_path / "ix.parquet", executor="serial", show_progress=False,
                             loudness=False)
    assert (report.rows, report.unreadable) == (2, 1)
    errors = [e for e in open_index(tmp_path / "ix.parquet", columns="all").table.column("error").to_pylist() if e]
    assert len(errors) == 1 and "holey.wav" in errors[0] and "sparse" in errors[0]


# ------------------------------------------------------------------ a shard cut between members


@pytest.mark.parametrize("writer", WRITERS)
def test_shard_cut_at_a_member_boundary_is_reported(tmp_path, writer):
    if writer == "gnu" and shutil.which("tar") is None:
        pytest.skip("GNU tar is not installed")
    data = {f"u{i}.flac": flac_bytes(0.4, i) for i in range(4)}
    whole = tmp_path / "whole.tar"
    _write_shard(whole, data, writer, tmp_path)
    with tarfile.open(whole) as tar:
        third = tar.getmember("u2.flac").offset  # where its headers start (a pax header's too)
    cut = tmp_path / "cut.tar"
    cut.write_bytes(whole.read_bytes()[:third])  # a writer killed between two members
    listing = list_shard(str(cut))
    assert [m.name for m in listing.members] == ["u0.flac", "u1.flac"]
    assert len(listing.problems) == 1 and "end-of-archive" in str(listing.problems[0])  # was: no problem at all
    assert not list_shard(str(whole)).problems
    with pytest.raises(AudioReadError, match=r"cut\.tar.*end-of-archive"):
        _whole(str(cut))
    with pytest.warns(UserWarning, match=r"cut\.tar.*end-of-archive"):
        ds = _whole(str(cut), on_read_error="warn")
    assert len(ds) == 2  # the members that are there are complete, and read
    np.testing.assert_array_equal(np.asarray(ds[1].waveform)[0].T, _decoded(data["u1.flac"]))
    with pytest.warns(UserWarning, match=r"cut\.tar.*end-of-archive.*marked unreadable"):
        report = build_index(str(cut), tmp_path / "ix.parquet", executor="serial", show_progress=False,
                             loudness=False)
    assert (report.rows, report.unreadable) == (3, 1)  # two members, and the shard's row marked truncated


def test_shard_cut_in_the_padding_after_a_member_is_reported(tmp_path):
    data = {f"u{i}.flac": flac_bytes(0.4, i) for i in range(3)}
    whole = tmp_path / "whole.tar"
    _write_shard(whole, data, "tarfile", tmp_path)
    member = tarfile.open(whole).getmember("u1.flac")
    end = member.offset_data + member.size
    assert end % 512, "the member should end inside a block"
    (tmp_path / "cut.tar").write_bytes(whole.read_bytes()[:end + 3])
    listing = list_shard(str(tmp_path / "cut.tar"))
    assert [m.name for m in listing.members] == ["u0.flac", "u1.flac"]
    assert len(listing.problems) == 1 and "end-of-archive" in str(listing.problems[0])


def test_scan_notes_a_cut_shard(tmp_path):
    from audiotree.scan import scan_report

    data = {f"u{i}.flac": flac_bytes(0.4, i) for i in range(3)}
    whole = tmp_path / "whole.tar"
    _write_shard(whole, data, "tarfile", tmp_path)
    (tmp_path / "corpus").mkdir()
    third = tarfile.open(whole).getmember("u2.flac").offset
    (tmp_path / "corpus" / "cut.tar").write_bytes(whole.read_bytes()[:third])
    report = scan_report(str(tmp_path / "corpus"))
    assert report["files"] == 2
    assert any("cut.tar" in note and "end-of-archive" in note for note in report["notes"]), report["notes"]


# ------------------------------------------------------------------ hard links and other entries


@needs_gnu_tar
def test_hard_link_members_read_as_their_target(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    data = flac_bytes(0.5, 7)
    (src / "a.flac").write_bytes(data)
    os.link(src / "a.flac", src / "b.flac")
    (src / "c.flac").write_bytes(flac_bytes(0.3, 8))
    os.symlink("c.flac", src / "d.flac")
    shard = tmp_path / "links.tar"
    subprocess.run(["tar", "-cf", str(shard), "-C", str(src), "a.flac", "b.flac", "c.flac", "d.flac"], check=True)
    assert tarfile.open(shard).getmember("b.flac").islnk()
    listing = list_shard(str(shard))
    assert [m.name for m in listing.members] == ["a.flac", "b.flac", "c.flac"]  # was: b.flac dropped, uncounted
    assert listing.skipped == {"(symbolic link)": 1} and not listing.problems
    ds = _whole(str(shard))
    assert len(ds) == 3
    np.testing.assert_array_equal(np.asarray(ds[1].waveform)[0].T, _decoded(data))
    report = build_index(str(shard), tmp_path / "ix.parquet", executor="serial", show_progress=False, loudness=False)
    assert (report.rows, report.unreadable) == (3, 0) and report.skipped_members == {"(symbolic link)": 1}


def test_hard_link_to_a_missing_member_is_named(tmp_path):
    shard = tmp_path / "dangling.tar"
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        add_member(tar, "a.flac", flac_bytes(0.3, 1))
        link = tarfile.TarInfo("b.flac")
        link.type, link.linkname = tarfile.LNKTYPE, "elsewhere.flac"
        tar.addfile(link)
        linked = tarfile.TarInfo("c.flac")
        linked.type, linked.linkname = tarfile.LNKTYPE, "a.flac"
        tar.addfile(linked)
    with pytest.raises(AudioReadError, match=r"member 'b\.flac'.*hard link to 'elsewhere\.flac'"):
        _whole(str(shard))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = _whole(str(shard), on_read_error="skip")
    assert len(ds) == 2 and ds[1].waveform.shape == ds[0].waveform.shape  # c.flac reads as a.flac


# ------------------------------------------------------------------ names and URLs


@pytest.mark.parametrize("writer", WRITERS)
def test_member_named_with_double_colon(tmp_path, writer):
    if writer == "gnu" and shutil.which("tar") is None:
        pytest.skip("GNU tar is not installed")
    data = {"a::b.flac": flac_bytes(0.4, 1), "c.flac": flac_bytes(0.6, 2)}
    shard = tmp_path / "colons.tar"
    _write_shard(shard, data, writer, tmp_path)
    urls = find_audio_files(str(shard))
    assert len(urls) == 2
    ds = _whole(str(shard), on_read_error="skip")  # was: FileNotFoundError for the whole shard
    got = [np.asarray(ds[i].waveform)[0].T for i in range(2)]
    np.testing.assert_array_equal(got[0], _decoded(data["a::b.flac"]))
    np.testing.assert_array_equal(got[1], _decoded(data["c.flac"]))


def test_member_url_as_a_source(tmp_path, monkeypatch):
    data = {f"utt{i}.flac": flac_bytes(0.3 + 0.1 * i, i) for i in range(3)}
    _write_shard(tmp_path / "shard.tar", data, "tarfile", tmp_path)
    monkeypatch.chdir(tmp_path)
    url = "tar://utt1.flac::shard.tar"
    by_source = create_audio_dataset(sources=[url], sample_rate=RATE, duration=None)  # was: IsADirectoryError
    by_path = create_audio_dataset(filepaths=[url], sample_rate=RATE, duration=None)
    assert len(by_source) == len(by_path) == 1
    np.testing.assert_array_equal(np.asarray(by_source[0].waveform), np.asarray(by_path[0].waveform))
    np.testing.assert_array_equal(np.asarray(by_source[0].waveform)[0].T, _decoded(data["utt1.flac"]))
    ranged = [u for u in find_audio_files("shard.tar") if "utt2" in u]
    assert find_audio_files(ranged) == ranged  # a recorded member URL is its own source too
    with pytest.raises(FileNotFoundError, match="missing.tar"):
        find_audio_files("tar://utt1.flac::missing.tar")


def test_remote_shard_cut_at_a_member_boundary_is_reported(http_server, tmp_path):  # noqa: F811
    data = {f"u{i}.flac": flac_bytes(0.4, i) for i in range(3)}
    whole = tmp_path / "whole.tar"
    _write_shard(whole, data, "webdataset", tmp_path)
    third = tarfile.open(whole).getmember("u2.flac").offset
    http_server.objects["/i36/cut.tar"] = whole.read_bytes()[:third]
    listing = list_shard(http_server.base + "/i36/cut.tar")
    assert [m.name for m in listing.members] == ["u0.flac", "u1.flac"]
    assert len(listing.problems) == 1 and "end-of-archive" in str(listing.problems[0])
    assert "/i36/cut.tar" in str(listing.problems[0])

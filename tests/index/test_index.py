"""The corpus index: build (serial = process pool), schema, profile accuracy, resume,
incremental updates, labels, staleness, datasets from an index, and bad input."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree.dsp.loudness import integrated_loudness
from audiotree.index import (
    LabelSource,
    StaleFileError,
    build_index,
    file_profile,
    open_index,
    window_loudness,
)
from audiotree.io import AudioFile
from audiotree.synth import synthesize
from audiotree.sources import Corpus

RATE = 16_000


def _write(path, seconds, *, rate=RATE, channels=1, seed=0, group="speech", fmt="WAV", subtype="PCM_16", scale=1.0):
    data = synthesize(group, seconds, rate, channels, np.random.default_rng(seed)) * scale
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, data, rate, format=fmt, subtype=subtype)
    return str(path)


def _corpus(root):
    """Two groups, three formats, mono and stereo, and one file that is not audio."""
    files = {
        "s1": _write(root / "speech" / "spk1" / "a.wav", 2.5, seed=1),
        "s2": _write(root / "speech" / "spk2" / "b.flac", 3.2, seed=2, channels=2, fmt="FLAC"),
        "s3": _write(root / "speech" / "spk1" / "c.ogg", 1.7, seed=3, fmt="OGG", subtype="VORBIS"),
        "m1": _write(root / "music" / "m1.wav", 4.0, seed=4, group="music", channels=2),
        "m2": _write(root / "music" / "m2.flac", 0.9, seed=5, group="music", fmt="FLAC"),
    }
    bad = root / "music" / "broken.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk" + os.urandom(64))
    files["bad"] = str(bad)
    return files


def _sources(root):
    return {"speech": str(root / "speech"), "music": str(root / "music")}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("indexcorpus")
    files = _corpus(root)
    return root, files


@pytest.fixture(scope="module")
def built(corpus, tmp_path_factory):
    root, files = corpus
    out = tmp_path_factory.mktemp("indexout") / "corpus.parquet"
    report = build_index(_sources(root), out, executor="serial", show_progress=False)
    return out, report


# ------------------------------------------------------------------ build and schema
def test_serial_and_process_pool_write_identical_bytes(corpus, built, tmp_path):
    root, _ = corpus
    serial, report = built
    assert (report.rows, report.read, report.unreadable) == (6, 6, 1)
    pooled = tmp_path / "pooled.parquet"
    build_index(_sources(root), pooled, show_progress=False, executor="process", max_workers=2,
                chunk_size=1)  # spawn process pool
    assert pooled.read_bytes() == serial.read_bytes()
    threaded = tmp_path / "threaded.parquet"
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        build_index(_sources(root), threaded, show_progress=False, executor=pool, chunk_size=2)
    assert threaded.read_bytes() == serial.read_bytes()
    with pytest.raises(ValueError, match="Unknown executor 'ray-ish'"):
        build_index(_sources(root), tmp_path / "x.parquet", executor="ray-ish", show_progress=False)


@pytest.mark.slow
def test_an_unguarded_script_with_the_process_pool_gets_a_clear_error(corpus, tmp_path):
    from helpers import run_script

    root, _ = corpus
    code = (f"from audiotree.index import build_index\n"
            f"build_index({str(root / 'speech')!r}, {str(tmp_path / 'x.parquet')!r}, show_progress=False, executor='process', max_workers=1)\n")
    result = run_script(code, tmp_path, timeout=300)
    assert result.returncode != 0
    assert "if __name__ == " in result.stderr and "executor='serial'" in result.stderr


def test_docstring_examples_run():
    import doctest

    import audiotree.dsp.loudness
    import audiotree.index
    import audiotree.index.labels
    import audiotree.index.profile

    for module in (audiotree.index, audiotree.index.profile, audiotree.index.labels, audiotree.dsp.loudness):
        result = doctest.testmod(module)
        assert result.failed == 0 and (result.attempted > 0 or module is audiotree.dsp.loudness), module


def test_plain_pyarrow_and_pandas_see_the_documented_schema(built):
    import pandas as pd

    out, _ = built
    schema = pq.read_schema(out)
    assert schema.names == ["path", "group", "size", "mtime_ns", "container", "codec", "sample_rate", "channels",
                            "frames", "duration", "readable", "error", "error_kind", "profile_step", "profile",
                            "seek_points", "bandwidth_hz", "clip_share", "clip_longest", "dc_offset", "channel_corr",
                            "silence_share", "snr_db", "clip_blocks"]
    assert schema.field("clip_longest").type == pa.int64() and schema.field("snr_db").type == pa.float64()
    assert schema.field("clip_blocks").type == pa.list_(pa.uint8())
    assert schema.field("profile").type == pa.list_(pa.int16())
    assert schema.field("seek_points").type == pa.list_(pa.int64())
    assert schema.field("duration").type == pa.float64() and schema.field("size").type == pa.int64()
    meta = json.loads(pq.read_metadata(out).metadata[b"audiotree"])
    assert meta["format"] == "audiotree-index" and meta["format_version"] == [1, 4]
    # A 1.0 reader cannot read int16 profiles; 1.1 skips seek_points and the quality columns.
    assert meta["min_reader_version"] == [1, 1]
    assert meta["loudness"] == {"enabled": True, "mono": True, "block_sec": 0.1}
    df = pd.read_parquet(out)
    assert len(df) == 6
    assert sorted(df.loc[df.readable, "container"].unique()) == ["FLAC", "OGG", "WAV"]
    bad = df[~df.readable]
    assert len(bad) == 1 and bad.path.iloc[0].endswith("broken.wav") and "broken.wav" in bad.error.iloc[0]
    assert bad.error_kind.iloc[0] == "permanent" and df[df.readable].error_kind.isna().all()
    # FLAC and Ogg Vorbis files have seek points (pairs, from sample 0), WAV files the two rows of where their
    # samples are; an unreadable file none.
    assert (df.seek_points.notna() == (df.readable & df.container.isin(["FLAC", "OGG", "WAV"]))).all()
    assert all(len(p) >= 2 and p[0] == 0 and len(p) % 2 == 0
               for p in df.seek_points[df.container.isin(["FLAC", "OGG"])])
    wav = df[df.readable & (df.container == "WAV")]
    assert all(len(p) == 4 and p[2] == frames for p, frames in zip(wav.seek_points, wav.frames))
    assert df.groupby("group").size().to_dict() == {"music": 3, "speech": 3}
    row = df[df.path.str.endswith("m1.wav")].iloc[0]
    assert (row.sample_rate, row.channels, row.frames, row.profile_step) == (RATE, 2, 4 * RATE, RATE // 10)
    assert len(row.profile) == 40 and row.duration == pytest.approx(4.0)
    ix = open_index(out, columns="all")
    i = ix.paths().index(row.path)
    # The documented decoding, without audiotree: centi-dB of the mean square, -32768 for zero.
    stored = np.asarray(row.profile)
    assert stored.dtype == np.int16
    documented = np.where(stored == -32768, 0.0, 10.0 ** (stored / 1000.0)).astype(np.float32)
    np.testing.assert_array_equal(ix.profile(i), documented)
    with AudioFile(ix.paths()[i]) as f:
        measured = file_profile(f)
    np.testing.assert_allclose(10 * np.log10(ix.profile(i)), 10 * np.log10(measured), rtol=0, atol=0.005 + 1e-5)
    assert ix.profile(ix.paths().index(bad.path.iloc[0])) is None


def test_rows_are_sorted_by_group_then_path(built):
    ix = open_index(built[0])
    keys = list(zip(ix.table.column("group").to_pylist(), ix.table.column("path").to_pylist()))
    assert keys == sorted(keys)


# ------------------------------------------------------------------ the profile
def test_window_loudness_gates_like_the_meter_on_the_same_power():
    # A power signal built block by block: the profile of it is exact, so the
    # windowed gating must equal the meter's gating of the same samples.
    from audiotree.dsp.loudness import integrated_from_power

    rng = np.random.default_rng(0)
    step = 800  # 0.1 s at 8000 Hz
    levels = 10 ** (rng.uniform(-9, -1, size=120))  # -90 .. -10 dB blocks: both gates act
    power = np.repeat(levels, step) * rng.uniform(0.5, 1.5, size=120 * step)
    profile = power.reshape(120, step).mean(axis=1)
    for w in (1, 3, 4, 7, 30):
        got = window_loudness(profile, w, hop_blocks=3 if w == 7 else 1)
        hop = 3 if w == 7 else 1
        want = [integrated_from_power(power[s * step:(s + w) * step], 8000) for s in range(0, 120 - w + 1, hop)]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)


def _meter_windows(path, window_blocks, *, mono=True):
    with AudioFile(path) as f:
        x, rate = f.read_all(), f.info.sample_rate
    x = x.mean(axis=1, keepdims=True) if mono else x
    step = rate // 10
    starts = range(0, x.shape[0] // step - window_blocks + 1)
    return np.array([integrated_loudness(x[s * step:(s + window_blocks) * step].T, rate) for s in starts])


@pytest.mark.parametrize("stored", [False, True], ids=["float32", "stored-int16"])
@pytest.mark.parametrize("group, rate, channels, mono", [
    ("speech", 48_000, 1, True), ("music", 44_100, 2, True), ("music", 44_100, 2, False), ("effects", 22_050, 1, True),
])
def test_profile_matches_the_meter_within_a_tenth_of_a_lu(tmp_path, group, rate, channels, mono, stored):
    from audiotree.index.profile import decode_profile, encode_profile

    path = _write(tmp_path / "p.wav", 12.0, rate=rate, channels=channels, group=group, seed=11, subtype="FLOAT")
    with AudioFile(path) as f:
        profile = file_profile(f, mono=mono, chunk_seconds=1.3)  # chunk edges must not matter
    if stored:  # as the index stores it (int16 centi-dB) and every reader decodes it
        profile = decode_profile(encode_profile(profile))
    for blocks in (4, 30):
        got = window_loudness(profile, blocks)
        want = _meter_windows(path, blocks, mono=mono)
        assert got.shape == want.shape
        assert np.array_equal(np.isfinite(want), np.isfinite(got))
        # Program material: windows above -50 LUFS. Quieter ones just after a loud passage
        # also hear the filter's ringing in the profile, which the fresh meter does not.
        program = np.isfinite(want) & (want > -50)
        assert program.mean() > 0.5
        assert np.max(np.abs(got[program] - want[program])) <= 0.1
        quiet = np.isfinite(want) & ~program
        assert np.all(got[quiet] >= want[quiet] - 0.1)  # the tail only ever adds energy


def test_profile_streams_in_bounded_chunks(tmp_path):
    path = _write(tmp_path / "long.wav", 95.0, rate=8000, seed=3)
    sizes = []

    class Counting(AudioFile):
        __slots__ = ()

        def read(self, start, count=None):
            out = super().read(start, count)
            sizes.append(out.shape[0])
            return out

    with Counting(path) as f:
        profile = file_profile(f, chunk_seconds=10.0)
    assert profile.shape == (950,)
    assert max(sizes) == 10 * 8000 and len(sizes) == 10  # never the whole file at once
    with AudioFile(path) as f:
        np.testing.assert_array_equal(file_profile(f, chunk_seconds=95.0), profile.astype(np.float32))


def test_window_loudness_rejects_bad_arguments():
    with pytest.raises(ValueError, match="window_blocks"):
        window_loudness(np.ones(10), 0)
    with pytest.raises(ValueError, match="non-negative"):
        window_loudness(np.array([1.0, np.nan, 1.0, 1.0, 1.0]), 4)
    assert window_loudness(np.ones(3), 4).shape == (0,)


# ------------------------------------------------------------------ resume and incremental
_RESUME_SCRIPT = textwrap.dedent(
    """
    import sys
    from audiotree.index import build_index

    if __name__ == "__main__":
        build_index(SOURCES, OUT, executor="serial", chunk_size=1, show_progress=False)
    """
)


@pytest.mark.slow
def test_an_interrupted_build_keeps_its_rows_and_resumes(tmp_path):
    src = tmp_path / "long"
    for i in range(8):
        _write(src / f"f{i}.wav", 40.0, rate=44_100, seed=i, group="music")
    out = tmp_path / "idx.parquet"
    script = tmp_path / "build.py"
    script.write_text(_RESUME_SCRIPT.replace("SOURCES", repr(str(src))).replace("OUT", repr(str(out))))
    parts = tmp_path / ".idx.parquet.parts"
    proc = subprocess.Popen([sys.executable, str(script)], env={**os.environ})
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and len(list(parts.glob("part-*.parquet"))) < 2:
            assert proc.poll() is None, "the build finished before it could be interrupted"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert not out.exists()
    committed = len(list(parts.glob("part-*.parquet")))
    assert 2 <= committed < 8
    report = build_index(str(src), out, executor="serial", show_progress=False)
    assert report.resumed == committed and report.read == 8 - committed and report.rows == 8
    assert not parts.exists()
    fresh = tmp_path / "fresh.parquet"
    build_index(str(src), fresh, executor="serial", show_progress=False)
    assert pq.read_table(out).equals(pq.read_table(fresh))


def test_incremental_update_rereads_only_new_and_changed_files(tmp_path):
    files = _corpus(tmp_path / "c")
    out = tmp_path / "idx.parquet"
    build_index(_sources(tmp_path / "c"), out, executor="serial", show_progress=False)
    before = open_index(out, columns="all")
    again = build_index(_sources(tmp_path / "c"), out, executor="serial", show_progress=False)
    assert (again.read, again.reused, again.dropped) == (0, 6, 0)
    _write(tmp_path / "c" / "speech" / "spk1" / "a.wav", 5.0, seed=9)  # changed: longer
    _write(tmp_path / "c" / "music" / "new.wav", 1.5, seed=10, group="music")  # new
    os.remove(files["m2"])  # deleted
    report = build_index(_sources(tmp_path / "c"), out, executor="serial", show_progress=False)
    assert (report.read, report.reused, report.dropped, report.rows) == (2, 4, 1, 6)
    after = open_index(out, columns="all")
    durations = dict(zip(after.paths(), after.column("duration")))
    assert durations[files["s1"]] == pytest.approx(5.0)
    assert os.path.join(str(tmp_path / "c"), "music", "new.wav") in durations
    assert files["m2"] not in durations
    old = dict(zip(before.paths(), before.table.column("profile").to_pylist()))
    new = dict(zip(after.paths(), after.table.column("profile").to_pylist()))
    assert new[files["m1"]] == old[files["m1"]]  # reused as is


# ------------------------------------------------------------------ labels
def _labels_csv(path, rows, header="path,speaker,snr"):
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return str(path)


def test_labels_join_by_path_relative_and_stem(corpus, tmp_path):
    root, files = corpus
    by_path = _labels_csv(root / "labels.csv", [
        "speech/spk1/a.wav,alice,10", "speech/spk2/b.flac,bob,2.5", "speech/spk1/c.ogg,alice,3",
    ])
    out = tmp_path / "p.parquet"
    build_index({"speech": str(root / "speech")}, out, executor="serial", show_progress=False, labels=by_path,
                loudness=False)
    ix = open_index(out)
    assert ix.meta["labels"] == {"speaker": {"kind": "category", "ids": "speaker#id", "size": 2},
                                 "snr": {"kind": "numeric"}}
    assert ix.vocabulary("speaker") == ["alice", "bob"]
    got = dict(zip(ix.paths(), zip(ix.label_values("speaker").tolist(), ix.label_values("snr").tolist())))
    assert got == {files["s1"]: (0, 10.0), files["s2"]: (1, 2.5), files["s3"]: (0, 3.0)}

    relative = _labels_csv(tmp_path / "rel.csv", ["spk1/a.wav,carol,1", "spk2/b.flac,bob,2", "spk1/c.ogg,bob,3"],
                           header="file,speaker,snr")
    build_index({"speech": str(root / "speech")}, out, executor="serial", show_progress=False, loudness=False,
                labels=LabelSource(relative, key="file", match="relative"))
    ix = open_index(out)
    # An update keeps the ids of known values and appends new ones; "alice" left the index: id 0 is retired.
    assert ix.vocabulary("speaker") == [None, "bob", "carol"]
    assert dict(zip(ix.paths(), ix.label_values("speaker").tolist())) == {files["s1"]: 2, files["s2"]: 1, files["s3"]: 1}

    stems = tmp_path / "stems.jsonl"
    stems.write_text('{"stem": "a", "cls": 3}\n{"stem": "b", "cls": 4}\n{"stem": "c", "cls": 5}\n')
    build_index({"speech": str(root / "speech")}, out, executor="serial", show_progress=False, loudness=False,
                labels=LabelSource(str(stems), key="stem", match="stem"))
    ix = open_index(out)
    assert ix.meta["labels"] == {"cls": {"kind": "numeric"}}
    assert dict(zip(ix.paths(), ix.label_values("cls").tolist())) == {files["s1"]: 3, files["s2"]: 4, files["s3"]: 5}

    parquet_labels = tmp_path / "labels.parquet"
    pq.write_table(pa.table({"path": [files["s1"], files["s2"], files["s3"]], "tag": ["hi", "yo", "hi"]}), parquet_labels)
    build_index({"speech": str(root / "speech")}, out, executor="serial", show_progress=False, loudness=False,
                labels=str(parquet_labels))
    ix = open_index(out)
    assert dict(zip(ix.paths(), ix.label_values("tag").tolist())) == {files["s1"]: 0, files["s2"]: 1, files["s3"]: 0}


@pytest.mark.parametrize("content, suffix, match", [
    ("path,speaker\nspeech/spk1/a.wav,x\nspeech/spk1/a.wav,y\n", ".csv", r"duplicate key\(s\).*a\.wav"),
    ("path,speaker\nspeech/spk1/a.wav,x\n", ".csv", r"no row for 2 of 3 indexed file\(s\).*b\.flac"),
    ("name,speaker\nspeech/spk1/a.wav,x\n", ".csv", r"no key column 'path'"),
    ('{"path": "speech/spk1/a.wav", "n": 1}\n{"path": "speech/spk2/b.flac", "n": "two"}\n', ".jsonl",
     r"Every column must hold one type"),
    ("path,duration\nspeech/spk1/a.wav,3\n", ".csv", r"clash with the index's own columns"),
    ("path,speaker\n,x\n", ".csv", r"empty key"),
])
def test_bad_labels_files_name_the_file_and_column(corpus, tmp_path, content, suffix, match):
    root, _ = corpus
    labels = root / f"bad{suffix}"
    labels.write_text(content)
    try:
        with pytest.raises(ValueError, match=match) as info:
            build_index({"speech": str(root / "speech")}, tmp_path / "x.parquet", executor="serial",
                        show_progress=False, loudness=False, labels=str(labels))
        assert str(labels) in str(info.value)
    finally:
        labels.unlink()
    assert not (tmp_path / "x.parquet").exists()


def test_missing_labels_may_be_left_empty(corpus, tmp_path):
    root, files = corpus
    labels = _labels_csv(tmp_path / "l.csv", [f"{files['s1']},alice,1"])
    out = tmp_path / "m.parquet"
    build_index({"speech": str(root / "speech")}, out, executor="serial", show_progress=False, loudness=False,
                labels=LabelSource(labels, missing="null"))
    ix = open_index(out)
    assert dict(zip(ix.paths(), ix.label_values("speaker").tolist()))[files["s2"]] == -1
    assert np.isnan(dict(zip(ix.paths(), ix.label_values("snr").tolist()))[files["s2"]])


# ------------------------------------------------------------------ bad index files
def _rewrite(src, dst, *, table=None, meta=None):
    original = pq.read_table(src)
    table = original if table is None else table
    metadata = dict(original.schema.metadata)
    if meta is not None:
        metadata[b"audiotree"] = json.dumps(meta).encode()
    pq.write_table(table.replace_schema_metadata(metadata), dst)
    return dst


def test_an_index_from_a_newer_major_version_is_refused(built, tmp_path):
    meta = json.loads(pq.read_metadata(built[0]).metadata[b"audiotree"])
    meta["format_version"] = [2, 0]
    path = _rewrite(built[0], tmp_path / "v2.parquet", meta=meta)
    with pytest.raises(ValueError, match=r"v2\.parquet.*major version.*upgrade audiotree"):
        open_index(path)


def test_a_truncated_index_is_a_clear_error(built, corpus, tmp_path):
    data = built[0].read_bytes()
    path = tmp_path / "cut.parquet"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut\.parquet: not a readable Parquet file.*truncated"):
        open_index(path)
    # A build over a damaged index says how to start over.
    with pytest.raises(ValueError, match="delete"):
        build_index(str(corpus[0] / "speech"), path, executor="serial", show_progress=False)


def test_a_plain_parquet_file_is_not_an_index(tmp_path):
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"path": ["a.wav"]}), path)
    with pytest.raises(ValueError, match="not an audiotree corpus index"):
        open_index(path)


def test_paths_escaping_a_relative_root_are_refused(corpus, tmp_path):
    root, _ = corpus
    out = root / "rel.parquet"
    build_index({"speech": str(root / "speech")}, out, executor="serial", show_progress=False, loudness=False,
                root=os.path.relpath(root))  # a relative root: kept relative to the index's folder
    ix = open_index(out)
    assert ix.meta["root"] == "." and ix.root == str(root)
    assert all(os.path.isfile(p) for p in ix.paths())
    table = pq.read_table(out)
    paths = table.column("path").to_pylist()
    paths[1] = "../../etc/passwd"
    bad = _rewrite(out, tmp_path / "escape.parquet", table=table.set_column(0, "path", pa.array(paths)))
    with pytest.raises(ValueError, match=r"escape\.parquet: 1 path\(s\) escape the index's root.*etc/passwd"):
        open_index(bad)
    with pytest.raises(ValueError, match="outside the index root"):
        build_index({"speech": str(root / "speech")}, out, executor="serial", show_progress=False,
                    root=str(root / "music"))


# ------------------------------------------------------------------ datasets
def test_datasets_start_from_the_index_alone(corpus, tmp_path):
    from audiotree.sources import create_audio_dataset

    root, files = corpus
    copy = tmp_path / "copy"
    files2 = _corpus(copy)
    out = tmp_path / "alone.parquet"
    build_index(_sources(copy), out, executor="serial", show_progress=False, loudness=False)
    for path in files2.values():
        os.remove(path)  # no folder, no header left: only the index can be read now
    with pytest.warns(UserWarning, match="1 unreadable row"):
        ds = create_audio_dataset(corpus=Corpus(index=out), duration=0.5, sample_rate=RATE, shuffle=False)
    assert len(ds) == 5
    with pytest.raises(StaleFileError, match=r"m1\.wav' changed since the corpus index .*no longer exists.*audiotree index"):
        ds[0]


def test_create_audio_dataset_from_an_index(built, corpus):
    from audiotree import AudioTree
    from audiotree.sources import create_audio_dataset

    out, _ = built
    with pytest.warns(UserWarning, match="unreadable"):
        ds = create_audio_dataset(corpus=Corpus(index=out), duration=0.5, sample_rate=RATE, shuffle=False)
    batch = AudioTree.batch([ds[i] for i in range(len(ds))])
    assert batch.waveform.shape == (5, 1, RATE // 2)
    assert sorted(batch.source) == ["music", "music", "speech", "speech", "speech"]
    with pytest.warns(UserWarning):
        short = create_audio_dataset(corpus=Corpus(index=out, min_duration=1.0, max_duration=3.0), duration=0.5, sample_rate=RATE)
    assert sorted(os.path.basename(ds_item.filepath[0]) for ds_item in (short[i] for i in range(len(short)))) == \
        ["a.wav", "c.ogg"]
    with pytest.raises(ValueError, match="not both"):
        create_audio_dataset(corpus[0], corpus=Corpus(index=out))
    with pytest.raises(ValueError, match=r"No tar sidecar or Parquet column.*Corpus\(index="):
        create_audio_dataset(corpus[0], corpus=Corpus(labels=["speaker"]))
    with pytest.raises(ValueError, match="on_stale"):
        create_audio_dataset(corpus=Corpus(index=out, on_stale="ignore"))


def test_balanced_dataset_from_indexes_and_group_by(built, corpus, tmp_path):
    from audiotree import AudioTree
    from audiotree.sources import WindowConfig, create_balanced_audio_dataset

    out, _ = built
    root, _ = corpus
    speech = tmp_path / "speech.parquet"
    build_index(str(root / "speech"), speech, executor="serial", show_progress=False)
    ds = create_balanced_audio_dataset(sources={"speech": str(speech), "music": str(root / "music" / "*.flac")},
                                       duration=0.5, sample_rate=RATE, weights={"speech": 3, "music": 1})
    sources = AudioTree.batch([ds[i] for i in range(64)]).source
    assert set(sources) == {"speech", "music"} and sources.count("speech") > sources.count("music")
    with pytest.warns(UserWarning, match="unreadable"):
        grouped = create_balanced_audio_dataset(corpus=Corpus(index=out, group_by="group"), duration=0.5, sample_rate=RATE)
    items = [grouped[i] for i in range(40)]
    assert {(it.source[0], "speech" in it.filepath[0]) for it in items} == {("speech", True), ("music", False)}
    with pytest.warns(UserWarning, match="unreadable"):
        windowed = create_balanced_audio_dataset(corpus=Corpus(index=out, group_by="group"), sample_rate=RATE,
                                                 window=WindowConfig(duration=0.5, lufs_window_sec=0.5))
    assert {windowed[i].source[0] for i in range(20)} == {"speech", "music"}
    with pytest.raises(ValueError, match="group_by"):
        create_balanced_audio_dataset(corpus=Corpus(index=out))


def test_group_by_a_label_column(corpus, tmp_path):
    from audiotree import AudioTree
    from audiotree.sources import create_balanced_audio_dataset

    root, files = corpus
    labels = _labels_csv(tmp_path / "l.csv", [f"{files['s1']},alice,1", f"{files['s2']},bob,2",
                                              f"{files['s3']},alice,3"])
    out = tmp_path / "g.parquet"
    build_index({"speech": str(root / "speech")}, out, executor="serial", show_progress=False, labels=labels,
                loudness=False)
    ds = create_balanced_audio_dataset(corpus=Corpus(index=out, group_by="speaker", labels=["speaker"]), duration=0.5,
                                       sample_rate=RATE)
    batch = AudioTree.batch([ds[i] for i in range(16)])
    by_source = {(src, int(spk)) for src, spk in zip(batch.source, batch.extras["speaker"])}
    assert by_source == {("alice", 0), ("bob", 1)}
    with pytest.raises(ValueError, match=r"g\.parquet has no column 'accent' to group by"):
        create_balanced_audio_dataset(corpus=Corpus(index=out, group_by="accent"))  # names the index and its columns


def test_windowed_dataset_from_an_index_uses_its_durations_and_profiles(tmp_path):
    from audiotree.sources import WindowConfig, create_windowed_audio_dataset, load_window_lufs, precompute_window_lufs

    quiet = _write(tmp_path / "w" / "quiet.wav", 6.0, seed=1, scale=1e-4)  # about -100 LUFS: no slot survives
    loud = _write(tmp_path / "w" / "loud.wav", 6.0, seed=2, group="music")
    out = tmp_path / "w.parquet"
    build_index(str(tmp_path / "w"), out, executor="serial", show_progress=False)
    ds = create_windowed_audio_dataset(corpus=Corpus(index=out), window=WindowConfig(duration=1.0, lufs_window_sec=1.0, lufs_cutoff=-60.0), sample_rate=RATE, shuffle=False)
    assert {ds[i].filepath[0] for i in range(len(ds))} == {loud}
    view = load_window_lufs(out, lufs_window_sec=1.0)
    measured = precompute_window_lufs([loud], 1.0, mono=True)[loud]
    assert view.durations[loud] == pytest.approx(6.0)
    np.testing.assert_allclose(view.lufs[loud], measured, atol=0.1)
    assert view.stale_files() == []
    _write(tmp_path / "w" / "quiet.wav", 7.0, seed=1)
    assert view.stale_files() == [quiet]


def test_staleness_policies(tmp_path):
    from audiotree.sources import WindowConfig, create_audio_dataset, create_windowed_audio_dataset

    a = _write(tmp_path / "s" / "a.wav", 2.0, seed=1)
    _write(tmp_path / "s" / "b.wav", 2.0, seed=2)
    out = tmp_path / "s.parquet"
    build_index(str(tmp_path / "s"), out, executor="serial", show_progress=False)
    _write(tmp_path / "s" / "a.wav", 1.2, seed=3)  # changed after indexing
    kwargs = dict(sample_rate=RATE, shuffle=False)
    with pytest.raises(StaleFileError) as info:
        create_audio_dataset(**kwargs, corpus=Corpus(index=out))[0]
    message = str(info.value)
    assert a in message and "size changed" in message and f"--out {out}" in message
    assert info.value.file_path == a
    skipping = create_audio_dataset(**kwargs, corpus=Corpus(index=out, on_stale="skip"))
    assert skipping[0] is None and skipping[1] is not None
    reprobed = create_audio_dataset(**kwargs, corpus=Corpus(index=out, on_stale="reprobe"))[0]
    assert reprobed.filepath == [a] and reprobed.waveform.shape == (1, 1, RATE)
    windowed = create_windowed_audio_dataset(**kwargs, corpus=Corpus(index=out, on_stale="reprobe"), window=WindowConfig(hop=0.5, jitter=False))
    offsets = [float(windowed[i].offset[0]) for i in range(len(windowed)) if windowed[i].filepath == [a]]
    assert offsets and max(offsets) <= 0.2 + 1e-9  # clamped to the file as it is now
    with pytest.raises(StaleFileError):
        create_windowed_audio_dataset(**kwargs, corpus=Corpus(index=out))[0]


def test_labels_reach_items_and_batches(corpus, tmp_path):
    from audiotree import AudioTree
    from audiotree.sources import create_audio_dataset

    root, files = corpus
    labels = _labels_csv(tmp_path / "l.csv", [f"{files['s1']},alice,1.5", f"{files['s2']},bob,2.5",
                                              f"{files['s3']},alice,3.5"])
    out = tmp_path / "l.parquet"
    build_index({"speech": str(root / "speech")}, out, executor="serial", show_progress=False, labels=labels)
    ds = create_audio_dataset(corpus=Corpus(index=out, labels=["speaker", "snr"]), duration=0.5, sample_rate=RATE)
    batch = AudioTree.batch([ds[i] for i in range(3)])
    expected = {files["s1"]: (0, 1.5), files["s2"]: (1, 2.5), files["s3"]: (0, 3.5)}
    assert batch.extras["speaker"].dtype == np.int32 and batch.extras["speaker"].shape == (3,)
    got = {p: (int(s), float(n)) for p, s, n in zip(batch.filepath, batch.extras["speaker"], batch.extras["snr"])}
    assert got == expected
    with pytest.raises(ValueError, match=r"no label column 'class'"):
        create_audio_dataset(corpus=Corpus(index=out, labels=["class"]))


_WORKERS_SCRIPT = textwrap.dedent(
    """
    import itertools
    import grain
    import numpy as np
    import torch.utils.data

    import audiotree.torch as att
    from audiotree import AudioTree
    from audiotree.sources import Corpus, create_audio_dataset

    def check(batches, expected):
        seen = 0
        for b in batches:
            for path, spk, snr in zip(b.filepath, np.asarray(b.extras["speaker"]).tolist(),
                                      np.asarray(b.extras["snr"]).tolist()):
                assert (spk, snr) == expected[path], (path, spk, snr)
                seen += 1
        return seen

    if __name__ == "__main__":
        expected = {k: tuple(v) for k, v in EXPECTED.items()}
        ds = create_audio_dataset(corpus=Corpus(index=INDEX, labels=["speaker", "snr"]), duration=0.25, sample_rate=8000,
                                  num_epochs=None)
        it = ds.to_iter_dataset(grain.ReadOptions(num_threads=0)).batch(4, batch_fn=AudioTree.batch)
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
        assert check(itertools.islice(it, 6), expected) == 24
        del it
        finite = create_audio_dataset(corpus=Corpus(index=INDEX, labels=["speaker", "snr"]), duration=0.25, sample_rate=8000)
        for method in ("fork", "spawn"):
            loader = att.create_dataloader(finite, batch_size=2, num_workers=2, multiprocessing_context=method)
            batches = list(loader)
            assert batches[0].extras["speaker"].dtype == torch.int32
            assert check(batches, expected) == 3
            del loader
        print("OK")
    """
)


@pytest.mark.slow
def test_labels_pass_through_grain_workers_and_torch(corpus, tmp_path):
    from helpers import run_script

    pytest.importorskip("torch")
    root, files = corpus
    labels = _labels_csv(tmp_path / "l.csv", [f"{files['s1']},alice,1.5", f"{files['s2']},bob,2.5",
                                              f"{files['s3']},carol,3.5"])
    out = tmp_path / "w.parquet"
    build_index({"speech": str(root / "speech")}, out, executor="serial", show_progress=False, labels=labels,
                loudness=False)
    expected = {files["s1"]: [0, 1.5], files["s2"]: [1, 2.5], files["s3"]: [2, 3.5]}
    code = _WORKERS_SCRIPT.replace("EXPECTED", repr(expected)).replace("INDEX", repr(str(out)))
    result = run_script(code, tmp_path, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK" in result.stdout


# ------------------------------------------------------------------ CLI
def _cli(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([sys.executable, "-m", "audiotree.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


@pytest.mark.slow
def test_cli_index_and_scan_an_index(tmp_path):
    _write(tmp_path / "c" / "speech" / "a.wav", 3.0, seed=1)
    _write(tmp_path / "c" / "speech" / "b.wav", 3.0, seed=2, scale=1e-4)  # no 1 s window above -40 LUFS
    labels = _labels_csv(tmp_path / "c" / "labels.csv", ["speech/a.wav,alice,1", "speech/b.wav,bob,2"])
    out = tmp_path / "c" / "i.parquet"
    result = _cli("index", "speech=" + str(tmp_path / "c" / "speech"), "--out", str(out), "--labels", labels,
                  "--root", ".", "--executor", "serial", "--no-progress", cwd=tmp_path / "c")
    assert result.returncode == 0, result.stderr
    assert "2 rows (2 read" in result.stdout
    assert open_index(out).meta["root"] == "."
    again = _cli("index", "speech=" + str(tmp_path / "c" / "speech"), "--out", str(out), "--labels", labels,
                 "--root", ".", "--jobs", "2", "--no-progress", cwd=tmp_path / "c")
    assert "2 unchanged" in again.stdout, again.stderr
    scan = _cli("scan", str(out), "--duration", "1", "--lufs-cutoff", "-40", "--json")
    assert scan.returncode == 0, scan.stderr
    report = json.loads(scan.stdout)
    assert report["files"] == 2 and report["windows"]["no_window_above"] == [str(tmp_path / "c" / "speech" / "b.wav")]
    shares = {os.path.basename(f["path"]): f["share_above"] for f in report["windows"]["files"]}
    assert shares["b.wav"] == 0.0 and shares["a.wav"] > 0.5
    text = _cli("scan", str(out), "--duration", "1")
    assert "1 file(s) with no window above the cutoff" in text.stdout
    bad = tmp_path / "c" / "dupes.csv"
    bad.write_text("path,speaker\nspeech/a.wav,x\nspeech/a.wav,y\n")
    failed = _cli("index", str(tmp_path / "c" / "speech"), "--out", str(tmp_path / "x.parquet"), "--labels", str(bad),
                  "--executor", "serial", "--no-progress")
    assert failed.returncode == 2 and "duplicate key" in failed.stderr and "Traceback" not in failed.stderr

"""``audiotree scan`` of folders and of their index: one schema, capped tables, refused options,
and files shorter than the window counted as having no window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audiotree.cli import main
from factories import tone_file


def _scan(capsys, *args) -> tuple[int, str, str]:
    code = main(["scan", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _json(capsys, *args) -> dict:
    code, out, err = _scan(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """Two groups: loud and very quiet tones of 1-4 s, a 0.7 s tone, a mono and a stereo file, one broken file;
    indexed with profiles (``index``) and without (``headers``)."""
    from audiotree.index import build_index

    root = tmp_path_factory.mktemp("scancorpus")
    (root / "speech").mkdir()
    (root / "music").mkdir()
    tone_file(root / "speech" / "loud.wav", rate=8000, seconds=3.5, amp=0.3)
    tone_file(root / "speech" / "quiet.wav", rate=8000, seconds=4.0, amp=0.0005)  # every 3 s window below -40 LUFS
    tone_file(root / "speech" / "blip.wav", rate=8000, seconds=0.7, amp=0.3)  # shorter than a 3 s window
    tone_file(root / "music" / "stereo.flac", rate=16000, seconds=1.5, channels=2, amp=0.2)
    (root / "music" / "broken.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    sources = {"speech": str(root / "speech"), "music": str(root / "music")}
    index, headers = root / "index.parquet", root / "headers.parquet"
    build_index(sources, index, executor="serial", show_progress=False)
    build_index(sources, headers, executor="serial", show_progress=False, loudness=False)
    return {"speech": root / "speech", "music": root / "music", "index": index, "headers": headers}


def _folders(corpus) -> list[str]:
    return [f"speech={corpus['speech']}", f"music={corpus['music']}"]


# ------------------------------------------------------------------ one schema
@pytest.mark.parametrize("loudness", [False, True])
def test_the_scan_of_an_index_has_the_folder_scans_keys(corpus, capsys, loudness):
    extra = ["--loudness"] if loudness else []
    folder = _json(capsys, *_folders(corpus), "--duration", "3", *extra)
    index = _json(capsys, corpus["index"], "--duration", "3", *extra)
    headers = _json(capsys, corpus["headers"], "--duration", "3")
    assert set(folder) == set(index) == set(headers)
    from audiotree.scan import LOUDNESS_KEYS, REPORT_KEYS

    assert set(folder) == REPORT_KEYS
    for key in ("groups", "formats", "sample_rates", "channels", "duration_histogram", "files", "readable",
                "total_seconds", "total_hours"):
        assert folder[key] == index[key] == headers[key], key  # the same facts, from the rows
    def by_path(entries):  # the index keeps its rows sorted by (group, path); the folder scan, SOURCES' order
        return sorted(entries, key=lambda e: e["path"])

    assert [Path(f["path"]).name for f in folder["short"]["files"]] == ["blip.wav", "stereo.flac"]
    assert by_path(folder["short"]["files"]) == by_path(index["short"]["files"])
    assert [{*e} for e in folder["unreadable"]] == [{*e} for e in index["unreadable"]] == [{"path", "reason"}]
    assert index["unreadable"][0]["reason"] == folder["unreadable"][0]["reason"]  # the same text, no preamble
    assert folder["sources"] == index["sources"] == {"speech": [str(corpus["speech"])], "music": [str(corpus["music"])]}
    assert (folder["index"], index["index"], folder["windows"]) == (None, str(corpus["index"]), None)
    if loudness:
        assert set(folder["loudness"]) == set(index["loudness"]) == LOUDNESS_KEYS
        assert (folder["loudness"]["mono"], index["loudness"]["mono"]) == (False, True)
        # Mono files: the profile's loudness is the meter's, within a tenth of an LU.
        by_path = {f["path"]: f["lufs"] for f in folder["loudness"]["files"]}
        for entry in index["loudness"]["files"]:
            if not entry["path"].endswith(".flac"):
                assert entry["lufs"] == pytest.approx(by_path[entry["path"]], abs=0.1), entry["path"]
    else:
        assert folder["loudness"] is index["loudness"] is None


def test_a_file_shorter_than_the_window_has_no_window(corpus, capsys):
    report = _json(capsys, corpus["index"], "--duration", "3", "--lufs-cutoff", "-40")
    windows = {Path(f["path"]).name: f for f in report["windows"]["files"]}
    assert windows["blip.wav"] == {"path": str(corpus["speech"] / "blip.wav"), "windows": 0, "share_above": None,
                                   "max_window_lufs": None}
    assert windows["loud.wav"]["windows"] == 6 and windows["loud.wav"]["share_above"] == 1.0
    assert windows["quiet.wav"]["share_above"] == 0.0
    assert [Path(p).name for p in report["windows"]["no_window_above"]] == ["quiet.wav"]
    assert "blip.wav" in {Path(f["path"]).name for f in report["short"]["files"]}  # as the folder scan lists it
    code, text, _ = _scan(capsys, corpus["index"], "--duration", "3")
    assert code == 0
    assert "2 file(s) shorter than a 3 s window have no window" in text  # blip.wav and the 1.5 s stereo.flac
    assert not [line for line in text.splitlines() if "blip.wav" in line and "%" in line]


def test_a_header_only_index_says_it_has_no_profiles(corpus, capsys):
    report = _json(capsys, corpus["headers"], "--duration", "3")
    assert report["windows"] is None and report["loudness"] is None
    assert any("no loudness profiles" in note for note in report["notes"])


# ------------------------------------------------------------------ at most 20 lines per list
@pytest.fixture(scope="module")
def many_short(tmp_path_factory) -> dict[str, Path]:
    from audiotree.index import build_index

    root = tmp_path_factory.mktemp("manyshort")
    folder = root / "audio"
    folder.mkdir()
    for i in range(25):
        tone_file(folder / f"s{i:02d}.wav", rate=8000, seconds=0.5, freq=200.0 + 20 * i)
    index = root / "i.parquet"
    build_index(str(folder), index, executor="serial", show_progress=False)
    return {"folder": folder, "index": index}


@pytest.mark.parametrize("kind", ["folder", "index"])
def test_tables_list_at_most_20_files_unless_all(many_short, capsys, kind):
    code, text, err = _scan(capsys, many_short[kind], "--duration", "1")
    assert code == 0, err
    listed = [line for line in text.splitlines() if line.strip().endswith(".wav")]
    short_lines = [line for line in listed if " s  " in line]
    assert len(short_lines) == 20
    assert "25 file(s) shorter than --duration 1 s" in text
    assert "... and 5 more (--all lists every file" in text
    code, text, _ = _scan(capsys, many_short[kind], "--duration", "1", "--all")
    assert code == 0
    assert len([line for line in text.splitlines() if line.strip().endswith(".wav") and " s  " in line]) == 25
    assert "more (--all" not in text
    assert len(_json(capsys, many_short[kind], "--duration", "1")["short"]["files"]) == 25  # JSON: every file


# ------------------------------------------------------------------ options that do not apply
@pytest.mark.parametrize(("which", "args", "message"), [
    ("index", ["--jobs", "2"], "--jobs does not apply to the scan of an index"),
    ("index", ["--executor", "process"], "--executor does not apply to the scan of an index"),
    ("index", ["--executor", "ray", "--ray-address", "auto"], "--executor does not apply"),
    ("headers", ["--loudness"], "--loudness does not apply to"),
    ("headers", ["--lufs-cutoff", "-30"], "--lufs-cutoff does not apply to"),
    ("index", ["--loudness-seconds", "5"], "--loudness-seconds needs --loudness"),
    ("index", ["--all", "--json"], "--all applies to the tables"),
    ("folders", ["--lufs-cutoff", "-30"], "--lufs-cutoff needs --loudness"),
    ("folders", ["--loudness-seconds", "5"], "--loudness-seconds needs --loudness"),
    ("folders", ["--all", "--json"], "--all applies to the tables"),
])
def test_options_that_do_not_apply_are_an_error(corpus, capsys, which, args, message):
    target = _folders(corpus) if which == "folders" else [corpus[which]]
    code, out, err = _scan(capsys, *target, *args)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err
    if which == "headers":
        assert str(corpus["headers"]) in err and "--no-loudness" in err


def test_a_damaged_index_is_an_error_naming_it(tmp_path, corpus, capsys):
    bad = tmp_path / "cut.parquet"
    bad.write_bytes(corpus["index"].read_bytes()[:300])
    code, out, err = _scan(capsys, bad)
    assert code == 2 and str(bad) in err and "rebuild" in err and "Traceback" not in err


def test_library_refuses_loudness_from_a_header_only_index(corpus):
    from audiotree.scan import index_scan_report, scan_report

    with pytest.raises(ValueError, match="no loudness profiles"):
        index_scan_report(corpus["headers"], loudness=True)
    with pytest.raises(ValueError, match="no loudness profiles"):
        index_scan_report(corpus["headers"], lufs_cutoff=-30)
    with pytest.raises(ValueError, match="positive number"):
        index_scan_report(corpus["index"], duration=0)
    with pytest.raises(ValueError, match="sources is empty"):
        scan_report([])


def test_the_older_names_still_work(corpus, capsys):
    from audiotree.cli.index import index_scan_report, is_index_argument, print_index_scan

    report = index_scan_report(str(corpus["index"]), duration=3.0, lufs_cutoff=None)
    assert report["windows"]["lufs_cutoff"] == -40.0
    print_index_scan(report)
    assert "1 file(s) with no window above the cutoff" in capsys.readouterr().out
    assert is_index_argument([str(corpus["index"])]) and not is_index_argument([str(corpus["speech"])])


# ------------------------------------------------------------------ --plot of an index
@pytest.mark.parametrize("which", ["index", "headers"])
def test_plot_of_an_index(corpus, capsys, tmp_path, which):
    pytest.importorskip("matplotlib")
    plot = tmp_path / f"{which}.png"
    code, out, err = _scan(capsys, corpus[which], "--duration", "3", "--plot", plot)
    assert code == 0, err
    assert f"Plot: {plot}" in out and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # With profiles the plot's loudness comes from them (as --loudness); without, durations only.
    assert ("Loudness (first 30 s per file; from the profiles)" in out) == (which == "index")


def test_a_segment_index_names_each_segment(corpus, tmp_path, capsys):
    from audiotree.index import build_index

    segments = tmp_path / "segments.csv"
    loud = corpus["speech"] / "loud.wav"
    segments.write_text(f"path,start,end\n{loud},0,0.5\n{loud},0.5,3.5\n")
    out = tmp_path / "segments.parquet"
    with pytest.warns(UserWarning, match="no segment"):  # the two other files are left out
        build_index(str(corpus["speech"]), out, segments=str(segments), executor="serial", show_progress=False)
    report = _json(capsys, out, "--duration", "1")
    assert report["files"] == 2 and any("segment index" in note for note in report["notes"])
    assert [f["path"] for f in report["short"]["files"]] == [f"{loud} [0.000, 0.500) s"]
    assert [(f["windows"], f["share_above"]) for f in report["windows"]["files"]] == [(0, None), (21, 1.0)]


# ------------------------------------------------------------------ refusals counted by reason
@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> Path:
    """Three good files beside two WAVs cut mid-data, a .mp3 of random bytes and a zero-byte .flac."""
    import numpy as np

    root = tmp_path_factory.mktemp("damaged")
    tone_file(root / "good.wav", rate=8000, seconds=1.5, amp=0.3)
    tone_file(root / "good.flac", rate=16000, seconds=1.2, channels=2, amp=0.2)
    tone_file(root / "good2.wav", rate=8000, seconds=1.0, amp=0.3)
    for name, keep in (("cut.wav", 0.5), ("cut2.wav", 0.7)):
        tone_file(root / name, rate=8000, seconds=2.0, amp=0.3)
        data = (root / name).read_bytes()
        (root / name).write_bytes(data[: int(len(data) * keep)])
    (root / "garbage.mp3").write_bytes(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    (root / "zero.flac").write_bytes(b"")
    return root


def test_unreadable_files_are_counted_by_reason(damaged, capsys):
    report = _json(capsys, damaged)
    assert (report["files"], report["readable"]) == (7, 3)
    assert report["unreadable_by_reason"] == {"truncated": 2, "empty file": 1, "not a recognised audio format": 1}
    assert list(report["unreadable_by_reason"]) == ["truncated", "empty file", "not a recognised audio format"]
    assert len(report["unreadable"]) == 4 and {*report["unreadable"][0]} == {"path", "reason"}  # the list is kept
    code, out, _ = _scan(capsys, damaged)
    assert code == 0
    table = out[out.index("Unreadable by reason:"):].splitlines()
    assert [" ".join(line.split()) for line in table[1:4]] == [
        "truncated: 2 files", "empty file: 1 file", "not a recognised audio format: 1 file"]


def test_a_readable_corpus_has_no_reasons(damaged, capsys):
    report = _json(capsys, damaged / "good.wav", damaged / "good.flac")
    assert report["unreadable_by_reason"] == {} and report["readable"] == 2
    _, out, _ = _scan(capsys, damaged / "good.wav")
    assert "Unreadable by reason" not in out


def test_the_index_scan_counts_the_same_reasons(damaged, capsys, tmp_path):
    from audiotree.index import build_index

    index = tmp_path / "damaged.parquet"
    build_index(str(damaged), index, executor="serial", show_progress=False, loudness=False)
    assert _json(capsys, index)["unreadable_by_reason"] == _json(capsys, damaged)["unreadable_by_reason"]


def test_the_category_travels_with_the_error_and_survives_pickling(damaged):
    import pickle

    from audiotree.errors import AudioReadError
    from audiotree.io import AudioFile

    with pytest.raises(AudioReadError) as caught:
        AudioFile(damaged / "cut.wav")
    assert caught.value.category == "truncated"
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.category, copy.file_path, str(copy)) == ("truncated", caught.value.file_path, str(caught.value))
    assert AudioReadError("Failed to read audio file 'x': odd", "x", category="mine").category == "mine"

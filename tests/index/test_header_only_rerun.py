"""Re-running a header-only (``--no-loudness``) index build reads only new or changed files."""

from __future__ import annotations

import os

import pytest

from audiotree.index import build_index, open_index
from factories import tone_file


@pytest.fixture()
def folder(tmp_path):
    """Four short tones (one stereo), each a real WAV file."""
    root = tmp_path / "audio"
    root.mkdir()
    for i in range(4):
        tone_file(root / f"t{i}.wav", rate=8000, seconds=0.5 + 0.25 * i, freq=300.0 + 100 * i, channels=1 + (i == 3))
    return root


def _build(folder, out, **kwargs):
    return build_index(str(folder), out, executor="serial", show_progress=False, **kwargs)


def test_a_header_only_rerun_reads_no_file(folder, tmp_path):
    out = tmp_path / "idx.parquet"
    first = _build(folder, out, loudness=False)
    assert (first.read, first.reused) == (4, 0)
    fresh = out.read_bytes()
    again = _build(folder, out, loudness=False)
    assert (again.read, again.reused, again.resumed, again.dropped, again.rows) == (0, 4, 0, 0, 4)
    assert out.read_bytes() == fresh  # reused rows write the same index a fresh build does
    assert not open_index(out).has_profile


def test_a_touched_file_is_read_again_and_the_rest_reused(folder, tmp_path):
    out = tmp_path / "idx.parquet"
    _build(folder, out, loudness=False)
    touched = folder / "t1.wav"
    st = touched.stat()
    os.utime(touched, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    tone_file(folder / "t9.wav", rate=8000, seconds=0.3)  # new
    os.remove(folder / "t2.wav")  # gone
    report = _build(folder, out, loudness=False)
    assert (report.read, report.reused, report.dropped, report.rows) == (2, 2, 1, 4)
    ix = open_index(out, columns="all")
    mtimes = dict(zip(ix.paths(), ix.column("mtime_ns")))
    assert mtimes[str(touched)] == touched.stat().st_mtime_ns


def test_header_rows_do_not_depend_on_mono(folder, tmp_path):
    # Without profiles, --mono/--stereo changes nothing in a row: the rows are reused.
    out = tmp_path / "idx.parquet"
    _build(folder, out, loudness=False, mono=True)
    assert _build(folder, out, loudness=False, mono=False).read == 0


@pytest.mark.parametrize(("before", "after"), [
    (dict(loudness=False), dict(loudness=True)),
    (dict(loudness=True), dict(loudness=False)),  # a decode may find errors a header read does not: read again
    (dict(loudness=True, mono=True), dict(loudness=True, mono=False)),
])
def test_changing_what_a_row_holds_reads_every_file_again(folder, tmp_path, before, after):
    out = tmp_path / "idx.parquet"
    _build(folder, out, **before)
    report = _build(folder, out, **after)
    assert (report.read, report.reused) == (4, 0)
    assert open_index(out).has_profile == after["loudness"]
    fresh = tmp_path / "fresh.parquet"
    _build(folder, fresh, **after)
    assert out.read_bytes() == fresh.read_bytes()


def test_the_cli_rerun_reports_every_file_unchanged(folder, tmp_path, capsys):
    from audiotree.cli import main

    out = tmp_path / "idx.parquet"
    args = ["index", str(folder), "--out", str(out), "--no-loudness", "--executor", "serial", "--no-progress"]
    assert main(args) == 0
    assert "4 rows (4 read, 0 unchanged" in capsys.readouterr().out
    assert main(args) == 0
    assert "4 rows (0 read, 4 unchanged, 0 resumed, 0 dropped)" in capsys.readouterr().out
    assert main([*args[:-3], "--loudness", "--executor", "serial", "--no-progress"]) == 0
    assert "4 rows (4 read, 0 unchanged" in capsys.readouterr().out

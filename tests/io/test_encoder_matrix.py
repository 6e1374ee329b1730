"""Valid files from real encoders read right: the encoder matrix (issue 35).

Every case of ``tests/encoder_matrix.py`` (ffmpeg, lame, sox, flac, metaflac,
oggenc, opusenc, wavpack and libsndfile, over MP3, FLAC, Vorbis, Opus, WAV,
AIFF, AAC, ALAC, WavPack, ...) is written once per session by its encoder,
and read three ways, each compared with ffmpeg's decode of the same file:

(a) whole (``AudioTree.from_file``): lossless exactly, lossy with correlation
    >= 0.99 after alignment and a length within the codec's delay and padding;
(b) two excerpts at fixed offsets (``AudioTree.from_file(offset=, duration=)``):
    lossless exactly, lossy within 2 samples of the whole file's alignment;
(c) as an item of one index-free ``create_audio_dataset`` over the whole
    matrix folder (random offsets, fixed duration): the item equals the
    file's excerpt at the item's ``offset``.

A case that fails on main is listed in :data:`KNOWN_FAILURES` (strict xfail):
remove its entry when the fix merges. A missing encoder skips its cases
locally, and fails them under CI (``CI=true``).
"""

from __future__ import annotations


import os

import pytest

import encoder_matrix as em
from conftest import require_tool

#: Cases that fail, each with what goes wrong (a strict xfail: a fixed case then XPASSes, which fails the run
#: until its entry goes). Empty since issue 35's fixes: every valid file of the matrix reads right.
KNOWN_FAILURES: dict[str, str] = {}

def _param(case: em.Case):
    reason = KNOWN_FAILURES.get(case.case_id)
    marks = [pytest.mark.xfail(strict=True, reason=f"issue 35: {reason}")] if reason else []
    return pytest.param(case.case_id, marks=marks, id=case.case_id)


CASE_PARAMS = [_param(c) for c in em.CASES]


def test_the_matrix_is_wide():
    encoders = {c.encoder for c in em.CASES}
    assert len(em.CASES) >= 150 and len(encoders) >= 8, (len(em.CASES), encoders)
    assert len({c.case_id for c in em.CASES}) == len(em.CASES)
    assert set(KNOWN_FAILURES) <= {c.case_id for c in em.CASES}, set(KNOWN_FAILURES) - {c.case_id for c in em.CASES}
    rates = {c.rate for c in em.CASES}
    assert {8000, 11025, 16000, 22050, 44100, 48000, 88200, 96000} <= rates
    assert {c.channels for c in em.CASES} == {1, 2}


@pytest.mark.parametrize("ci", ["true", ""])
def test_a_missing_encoder_skips_locally_and_fails_under_ci(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome, match="no-such-encoder is not installed"):
        require_tool(False, "no-such-encoder", "it writes nothing")
    require_tool(True, "ffmpeg", "present: nothing happens")


def test_every_encoder_of_the_matrix_is_here_under_ci():
    if os.environ.get("CI", "").lower() != "true":
        pytest.skip("only under CI=true (.ci/run installs every encoder): locally a missing encoder skips its cases")
    assert all(em.tools_present().values()), em.tools_present()


@pytest.mark.slow
def test_the_report_prints_the_table_of_a_subset():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "fuzz" / "encoder_matrix_report.py"
    env = dict(os.environ, PYTHONPATH=str(script.parents[1] / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, str(script), "--only", "wav-soundfile-pcm_16", "--cases"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("2 files from 1 encoder ") and "2 read right, 0 refused, 0 read wrong" in lines[0]
    assert "| soundfile | WAV | 2 | 2 | 0 | 0 |" in lines
    assert "| (none) | 0 |" in lines


def _built(encoder_matrix, case_id: str) -> em.Built:
    built = encoder_matrix[case_id]
    if built.error and built.error.startswith("missing tool"):
        require_tool(False, built.error.split(": ", 1)[1], f"it writes the matrix case {case_id}")
    assert built.error is None, f"{case_id}: the encoder or the ffmpeg oracle failed: {built.error}"
    return built


@pytest.fixture(scope="module")
def matrix_dataset(encoder_matrix):
    """One index-free dataset over the matrix folder, and each file's item index."""
    return em.matrix_dataset(next(iter(encoder_matrix.values())).path.parent)


@pytest.mark.slow
@pytest.mark.parametrize("case_id", CASE_PARAMS)
def test_encoder_file_reads_right(case_id, encoder_matrix, matrix_dataset):
    built = _built(encoder_matrix, case_id)
    outcome, detail, _ = em.evaluate(built, matrix_dataset)
    assert outcome == "right", f"{case_id} is {outcome}: {detail}"

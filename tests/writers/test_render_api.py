"""``audiotree.render`` from Python, and the commands that take a corpus index (render, preview, bench)."""

from __future__ import annotations

import json

import grain
import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

import audiotree
from audiotree.cli import cli
from audiotree.sources import Corpus, create_audio_dataset, create_balanced_audio_dataset, open_render

TINY = ["--duration", "0.25", "--sample-rate", "8000"]


@pytest.fixture(scope="module")
def index(corpus, tmp_path_factory):
    from audiotree.index import build_index

    path = tmp_path_factory.mktemp("index") / "corpus.parquet"
    build_index({name: [str(folder)] for name, folder in corpus.items()}, path, executor="serial",
                show_progress=False)
    return path


def _invoke(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(a.waveform), np.asarray(b.waveform))
    assert a.filepath == b.filepath and a.source == b.source


def test_render_api_writes_resumes_and_refuses_other_settings(corpus, tmp_path):
    ds = create_audio_dataset(str(corpus["speech"]), duration=0.25, sample_rate=8000, num_epochs=None)
    out = tmp_path / "r"
    messages = []
    first = audiotree.render(ds, out, 6, part_size=4, batch_size=3, log=messages.append)
    assert (first.rendered, first.written, first.parts, first.resumed_from) == (6, 6, 2, 0)
    more = audiotree.render(ds, out, 10, part_size=4, batch_size=3, log=messages.append)
    assert more.resumed_from == 6 and more.rendered == 4 and more.parts == 4  # [0,4) [4,6) [6,8) [8,10)
    assert any("Resuming at item 6" in m for m in messages)
    back = open_render(out)
    assert len(back) == 10
    for i in range(10):
        _same(back[i], ds[i])
    with pytest.raises(ValueError, match="other settings .*part_size"):
        audiotree.render(ds, out, 10, part_size=5)
    with pytest.raises(ValueError, match="Unknown render format 'zip'"):
        audiotree.render(ds, tmp_path / "z", 2, format="zip")
    with pytest.raises(ValueError, match="no end"):
        audiotree.render(ds, tmp_path / "z", None)
    done = []
    audiotree.render(ds, tmp_path / "p", 5, part_size=2, progress=lambda n, of: done.append((n, of)))
    assert done[-1] == (5, 5)


def test_resuming_a_render_whose_record_names_a_missing_part_is_refused_and_changes_nothing(corpus, tmp_path):
    import shutil

    ds = create_audio_dataset(str(corpus["speech"]), duration=0.25, sample_rate=8000, num_epochs=None)
    out = tmp_path / "r"
    audiotree.render(ds, out, 6, part_size=2)
    shutil.rmtree(out / "part-00001")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(FileNotFoundError, match=r"render\.json names the finished part\(s\) part-00001, but .* lacks "
                                                r"it; nothing was changed.*--overwrite"):
        audiotree.render(ds, out, 10, part_size=2)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    result = _invoke("render", corpus["speech"], "--out", out, "-n", 10, "--part-size", 2, *TINY)
    assert result.exit_code != 0 and "names the finished part(s) part-00001" in result.output
    assert audiotree.render(ds, out, 10, part_size=2, overwrite=True).written == 10


def test_render_api_on_a_process_pool_equals_the_local_render(corpus, tmp_path):
    from helpers import assert_same_render

    ds = create_audio_dataset(str(corpus["music"]), duration=0.25, sample_rate=8000, num_epochs=None)
    audiotree.render(ds, tmp_path / "local", 9, part_size=4)
    result = audiotree.render(ds, tmp_path / "pool", 9, part_size=4, executor="process")
    assert result.parts == 3 and not (tmp_path / "pool" / ".staging").exists()
    assert_same_render(tmp_path / "local", tmp_path / "pool")


def test_render_task_refuses_a_folder_it_cannot_see(corpus, tmp_path):
    """A task on a node without the driver's disk finds no staging token and says the folder must be shared."""
    from audiotree.writers.parts import RenderRange

    ds = create_audio_dataset(str(corpus["music"]), duration=0.25, sample_rate=8000)
    staging = tmp_path / "out" / ".staging"
    staging.mkdir(parents=True)  # the same path on "another node": no token from this driver
    task = RenderRange(make_dataset=lambda: ds, fmt="tree", staging=str(staging), visible="abc123")
    with pytest.raises(RuntimeError, match=r"is not the driver's on this worker's node .*\.visible is missing.*"
                                           r"must be on storage every node shares.*or give a URL"):
        task((0, 2))
    (staging / ".visible").write_text("another-driver")
    with pytest.raises(RuntimeError, match=r"\.visible is another folder"):
        task((0, 2))
    (staging / ".visible").write_text("abc123")
    assert task((0, 2))["count"] == 2


def test_render_cli_from_an_index_balanced_by_a_label(corpus, index, tmp_path):
    out = tmp_path / "from-index"
    result = _invoke("render", "--index", index, "--group-by", "group", "--out", out, "-n", "12", "--part-size", "5",
                     *TINY)
    assert result.exit_code == 0, result.output + repr(result.exception)
    record = json.loads((out / "render.json").read_text())
    assert record["config"]["index"] == str(index) and record["config"]["group_by"] == "group"
    expected = create_balanced_audio_dataset(corpus=Corpus(index=index, group_by="group"), duration=0.25, sample_rate=8000)
    back = open_render(out)
    assert len(back) == 12 and {back[i].source[0] for i in range(12)} == set(corpus)
    for i in range(12):
        _same(back[i], expected[i])
    # The index is read like scan reads it: as the one SOURCE too.
    plain = _invoke("render", index, "--out", tmp_path / "plain", "-n", "3", *TINY)
    assert plain.exit_code == 0, plain.output
    wrong = _invoke("render", corpus["speech"], "--index", index, "--out", tmp_path / "x", "-n", "2", *TINY)
    assert wrong.exit_code != 0 and "not both" in wrong.output
    loose = _invoke("render", corpus["speech"], "--group-by", "group", "--out", tmp_path / "y", "-n", "2", *TINY)
    assert loose.exit_code != 0 and "needs a corpus index" in loose.output


def test_render_cli_whole_utterances(corpus, tmp_path):
    out = tmp_path / "whole"
    result = _invoke("render", corpus["speech"], "--out", out, "--epoch", "--duration", "none", "--format", "audio",
                     "--sample-rate", "8000", "--part-size", "3", "--no-shuffle")
    assert result.exit_code == 0, result.output + repr(result.exception)
    back = open_render(out)
    files = sorted(p for p in corpus["speech"].iterdir() if p.is_file())
    assert len(back) == len(files)
    lengths = sorted(np.asarray(back[i].waveform).shape[-1] for i in range(len(back)))
    want = sorted(int(round(soundfile.info(str(f)).duration * 8000)) for f in files)
    assert all(abs(a - b) <= 1 for a, b in zip(lengths, want)), (lengths, want)
    assert len(set(lengths)) > 1  # whole files, not excerpts of one length
    tree = _invoke("render", corpus["speech"], "--out", tmp_path / "t", "--epoch", "--duration", "none")
    assert tree.exit_code != 0 and "--format audio" in tree.output
    bad = _invoke("render", corpus["speech"], "--out", tmp_path / "b", "-n", "2", "--duration", "soon")
    assert bad.exit_code != 0 and "'none'" in bad.output


@pytest.mark.slow
def test_preview_and_bench_take_an_index(corpus, index, tmp_path):
    preview = _invoke("preview", index, "--group-by", "group", "--out", tmp_path / "pv", "-n", "6",
                      "--image-format", "svg", *TINY)
    assert preview.exit_code == 0, preview.output + repr(preview.exception)
    page = (tmp_path / "pv" / "index.html").read_text()
    assert all(name in page for name in corpus)
    bench = _invoke("bench", index, "--group-by", "group", "--workers", "0", "--threads", "0", "--buffers", "1",
                    "--batches", "1", "--batch-size", "2", "--json", *TINY)
    assert bench.exit_code == 0, bench.output + repr(bench.exception)
    report = json.loads(bench.output[bench.output.index("{"):])
    assert report["measurements"] and report["measurements"][0]["items_per_second"] > 0

"""``audiotree render --format webdataset``: tar shards that webdataset's own ``WebDataset`` reads back."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from audiotree import AudioTree
from audiotree.cli import cli
from audiotree.sources import create_audio_dataset
from audiotree.writers.webdataset import WebDatasetWriter
from container_factories import RATE, make_corpus

webdataset = pytest.importorskip("webdataset")


def _render(source, out, *extra):
    result = CliRunner().invoke(cli, ["render", str(source), "--out", str(out), "-n", "7", "--format", "webdataset",
                                      "--part-size", "4", "--sample-rate", str(RATE), "--duration", "0.5", *extra])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return sorted(out.glob("part-*/*.tar"))


def test_render_webdataset_reads_back_with_webdataset(tmp_path):
    corpus = make_corpus(tmp_path / "corpus", files=4, per_shard=2)
    shards = _render(corpus["unpacked"], tmp_path / "out")
    assert [p.parent.name for p in shards] == ["part-00000", "part-00001"]
    samples = list(webdataset.WebDataset([str(p) for p in shards], shardshuffle=False, empty_check=False))
    assert len(samples) == 7
    expected = create_audio_dataset(sources=str(corpus["unpacked"]), sample_rate=RATE, duration=0.5, num_epochs=None)
    for i, sample in enumerate(samples):
        meta = json.loads(sample["json"])
        audio, rate = soundfile.read(io.BytesIO(sample["flac"]), dtype="float32", always_2d=True)
        item = expected[i]
        assert rate == RATE == meta["sample_rate"] and meta["samples"] == audio.shape[0] == 8000
        assert meta["filepath"] == item.filepath[0]
        # PCM_24 FLAC: equal to the rendered float item within one 24-bit step.
        np.testing.assert_allclose(audio[:, 0], np.asarray(item.waveform)[0, 0], atol=2.0 ** -22)
    # audiotree reads its own shards in place too, in the same order.
    again = create_audio_dataset(sources=[str(p) for p in shards], sample_rate=RATE, duration=None, shuffle=False)
    assert len(again) == 7
    np.testing.assert_array_equal(np.asarray(again[0].waveform)[0, 0],
                                  soundfile.read(io.BytesIO(samples[0]["flac"]), dtype="float32")[0])


def test_rendered_shards_are_byte_identical_and_keys_unique(tmp_path):
    corpus = make_corpus(tmp_path / "corpus", files=3, per_shard=3)
    a = _render(corpus["unpacked"], tmp_path / "a")
    b = _render(corpus["unpacked"], tmp_path / "b")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    keys = [s["__key__"] for s in webdataset.WebDataset([str(p) for p in a], shardshuffle=False, empty_check=False)]
    assert len(set(keys)) == len(keys) == 7


def test_writer_trims_padding_and_refuses_bad_options(tmp_path):
    tree = AudioTree.batch([AudioTree.create(np.full((1, 2, n), 0.5, np.float32), 8000) for n in (400, 800)])
    with WebDatasetWriter(tmp_path / "w", items_per_shard=10) as w:
        w.write(tree)
    samples = list(webdataset.WebDataset(str(tmp_path / "w" / "shard-000000.tar"), shardshuffle=False,
                                         empty_check=False))
    assert [json.loads(s["json"])["samples"] for s in samples] == [400, 800]
    assert soundfile.info(io.BytesIO(samples[0]["flac"])).channels == 2
    with pytest.raises(FileExistsError):
        WebDatasetWriter(tmp_path / "w")
    with pytest.raises(ValueError, match="subtype"):
        WebDatasetWriter(tmp_path / "x", subtype="FLOAT")

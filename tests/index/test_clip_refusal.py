"""``ExcerptConfig(max_clip_share=...)``: ``loudest`` over an index refuses windows that clip (issue 41)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import grain
import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree import ExcerptConfig
from audiotree.dsp.quality import CLIP_RUN
from audiotree.index import build_index
from audiotree.sources import Corpus, create_audio_dataset

RATE = 8000
SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
CLIPPED = (4.0, 6.0)  # seconds of a.wav that clip (both files: 100 ms blocks 40..59)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """Two 10 s files of noise at about -26 LUFS, each with its 4..6 s driven into clipping (16-bit WAV, FLAC)."""
    root = tmp_path_factory.mktemp("clip")
    rng = np.random.default_rng(0)
    for name, subtype in (("a.wav", "PCM_16"), ("b.flac", "PCM_16")):
        x = 0.05 * rng.standard_normal((10 * RATE, 2))
        lo, hi = (int(s * RATE) for s in CLIPPED)
        x[lo:hi] = np.clip(40 * x[lo:hi], -1.0, 1.0)
        soundfile.write(root / name, x, RATE, subtype=subtype)
    out = root / "ix.parquet"
    build_index(root, out, executor="serial", show_progress=False)
    return out


def test_the_index_counts_clipped_samples_per_profile_block(index):
    table = pq.read_table(index, columns=["path", "clip_blocks", "profile", "clip_share"])
    assert str(table.schema.field("clip_blocks").type) == "list<element: uint8>"
    for row in table.to_pylist():
        blocks = np.asarray(row["clip_blocks"])
        assert blocks.size == len(row["profile"]) == 100
        assert np.all(blocks[:40] == 0) and np.all(blocks[60:] == 0), row["path"]
        assert np.all(blocks[40:60] > 60)  # about 40% of noise at 40x its level is in runs at the ceiling
        # The blocks' shares (rounded up to 1/255) add up to the file's clip_share.
        assert 0 <= blocks.sum() / 255 / 100 - row["clip_share"] <= 100 / 255 / 100


def test_per_block_counts_do_not_depend_on_how_frames_are_pushed():
    from audiotree.dsp.quality import QualityMeter

    rng = np.random.default_rng(1)
    x = np.clip(0.6 * rng.standard_normal((3 * RATE, 2)), -0.7, 0.7)  # clipped at 0.7 early on ...
    x[2 * RATE:] = np.clip(3 * x[2 * RATE:], -1.0, 1.0)  # ... then at 1.0: only the last second counts
    whole = QualityMeter(RATE, channels=2)
    whole.push(x)
    split = QualityMeter(RATE, channels=2)
    for lo in range(0, x.shape[0], 777):  # pushes that cut runs and blocks anywhere
        split.push(x[lo:lo + 777])
    blocks = whole.clip_blocks(30)
    assert np.all(blocks[:20] == 0) and np.all(blocks[20:] > 0)
    assert blocks.sum() == round(whole.result()["clip_share"] * x.size)
    moved = np.abs(split.clip_blocks(30) - blocks)  # a run cut by a push may count its first samples a block later
    assert split.clip_blocks(30).sum() == blocks.sum() and moved.sum() <= 2 * (CLIP_RUN - 1) * (x.shape[0] // 777)


def _clips(offset: float, duration: float) -> bool:
    return offset < CLIPPED[1] and offset + duration > CLIPPED[0]


def _dataset(index, **knobs):
    return create_audio_dataset(corpus=Corpus(index=index), num_epochs=None, sample_rate=RATE, duration=1.0,
                                excerpt=ExcerptConfig(strategy="loudest", **knobs))


def _items(ds, workers: int, n: int = 40) -> list[tuple[str, float]]:
    it = ds.to_iter_dataset(SYNC)
    if workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return [(os.path.basename(x.filepath[0]), round(float(x.offset[0]), 4)) for x in itertools.islice(it, n)]


@pytest.mark.slow
def test_loudest_with_max_clip_share_avoids_the_clipped_stretch_the_same_in_workers(index):
    loose = _items(_dataset(index), 0)
    assert any(_clips(o, 1.0) for _, o in loose)  # the clipped stretch is the loudest: drawn without the option
    strict_ds = _dataset(index, max_clip_share=0.0)
    strict = _items(strict_ds, 0)
    assert not any(_clips(o, 1.0) for _, o in strict), strict
    assert len({o for _, o in strict}) > 10 and {f for f, _ in strict} == {"a.wav", "b.flac"}
    assert _items(strict_ds, 2) == strict  # a pure function of (seed, index): the same with 2 Grain workers
    # A share refuses only the windows clipping more than it, by the stored per-block shares.
    shares = {os.path.basename(row["path"]): np.asarray(row["clip_blocks"]) / 255
              for row in pq.read_table(index, columns=["path", "clip_blocks"]).to_pylist()}
    some = _items(_dataset(index, max_clip_share=0.1), 0, 80)
    window = [shares[f][int(round(o * 10)):int(round(o * 10)) + 10].mean() for f, o in some]
    assert max(window) <= 0.1 and any(_clips(o, 1.0) for _, o in some), some


def test_max_clip_share_is_validated_and_needs_an_index(index, tmp_path):
    with pytest.raises(ValueError, match=r"max_clip_share only applies to strategy='loudest'"):
        ExcerptConfig(strategy="random", max_clip_share=0.1)
    for bad in (1.0, -0.1, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match=r"max_clip_share must be a share in \[0, 1\)"):
            ExcerptConfig(strategy="loudest", max_clip_share=bad)
    with pytest.raises(ValueError, match=r"max_clip_share=...\) needs Corpus\(index=...\)"):
        create_audio_dataset(index.parent, sample_rate=RATE, duration=1.0,
                             excerpt=ExcerptConfig(strategy="loudest", max_clip_share=0.0))


def test_an_index_without_clip_blocks_names_the_rebuild(index, tmp_path):
    table = pq.read_table(index)
    old = tmp_path / "old.parquet"
    pq.write_table(table.drop_columns(["clip_blocks"]), old)  # as written before the column existed
    with pytest.raises(ValueError, match=r"clip_blocks.*audiotree index SOURCES --out"):
        _dataset(old, max_clip_share=0.0)
    assert len(_dataset(old)) > 0  # everything else still reads it
    report = build_index(index.parent, old, executor="serial", show_progress=False)  # the update measures them
    assert report.read == 2 and report.reused == 0
    assert pq.read_table(old, columns=["clip_blocks"]).column("clip_blocks").null_count == 0
    assert len(_dataset(old, max_clip_share=0.0)) > 0


def _cli(*args):
    env = {k: v for k, v in os.environ.items() if k != "AUDIOTREE_DEBUG"}
    return subprocess.run([sys.executable, "-m", "audiotree.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.slow
def test_cli_max_clip_share_and_max_silence_share(index, tmp_path):
    from audiotree.sources import open_render

    out = tmp_path / "render"
    result = _cli("render", "--index", index, "-n", "12", "--format", "tree", "--out", out, "--duration", "1",
                  "--sample-rate", RATE, "--strategy", "loudest", "--max-clip-share", "0",
                  "--max-silence-share", "0.5")
    assert result.returncode == 0, result.stderr
    ds = open_render(out)
    offsets = [float(ds[i].offset[0]) for i in range(len(ds))]
    assert len(offsets) == 12 and not any(_clips(o, 1.0) for o in offsets), offsets
    bad = _cli("render", "--index", index, "-n", "2", "--out", tmp_path / "bad", "--max-clip-share", "1.5")
    assert bad.returncode != 0 and "--max-clip-share" in bad.stderr

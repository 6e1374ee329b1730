"""``ExcerptConfig(max_silence_share=...)``: ``loudest`` over an index refuses mostly silent windows (issue 41)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile

from audiotree import ExcerptConfig
from audiotree.index import build_index
from audiotree.sources import Corpus, create_audio_dataset

RATE = 8000


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """10 s: 5 s of steady noise, then 5 s of 100 ms bursts of louder noise every 400 ms (digital silence between)."""
    root = tmp_path_factory.mktemp("silence")
    rng = np.random.default_rng(0)
    x = 0.05 * rng.standard_normal(10 * RATE)
    block = RATE // 10
    for k in range(50, 100):
        x[k * block:(k + 1) * block] *= 0.0 if k % 4 else 4.0
    soundfile.write(root / "a.wav", x.astype(np.float32), RATE)
    out = root / "ix.parquet"
    build_index(root, out, executor="serial", show_progress=False)
    return out


def _silent_share(offset: float, duration: float, silent: np.ndarray) -> float:
    """The share of the window's 100 ms profile blocks under -60 LUFS (the filter's ringing makes the block
    after a burst read louder than digital silence, as the index's silence_share counts it)."""
    first = int(round(offset * 10))
    return float(np.mean(silent[first:first + int(round(duration * 10))]))


def _silent_blocks(index) -> np.ndarray:
    from audiotree.index import open_index

    profile = open_index(index, columns="all").profile(0)
    return -0.691 + 10 * np.log10(np.maximum(profile, 1e-30)) < -60


def _offsets(index, excerpt):
    ds = create_audio_dataset(corpus=Corpus(index=index), num_epochs=None, sample_rate=RATE, duration=2.0,
                              excerpt=excerpt)
    return [float(ds[i].offset[0]) for i in range(60)]


def test_loudest_with_max_silence_share_refuses_mostly_silent_windows(index):
    silent = _silent_blocks(index)
    assert silent[50:].mean() > 0.4  # the bursts' gaps are silent blocks
    loose = _offsets(index, ExcerptConfig(strategy="loudest"))
    assert max(_silent_share(o, 2.0, silent) for o in loose) > 0.2  # the bursts clear the cutoff: drawn anyway
    strict = _offsets(index, ExcerptConfig(strategy="loudest", max_silence_share=0.2))
    assert all(_silent_share(o, 2.0, silent) <= 0.2 for o in strict), strict
    assert len(set(strict)) > 10  # still drawn from every qualifying window
    assert strict == _offsets(index, ExcerptConfig(strategy="loudest", max_silence_share=0.2))  # pure in (seed, i)


def test_max_silence_share_needs_loudest_and_an_index(index, tmp_path):
    with pytest.raises(ValueError, match=r"max_silence_share only applies to strategy='loudest'"):
        ExcerptConfig(strategy="random", max_silence_share=0.5)
    with pytest.raises(ValueError, match=r"share in \[0, 1\)"):
        ExcerptConfig(strategy="loudest", max_silence_share=1.5)
    with pytest.raises(ValueError, match=r"needs Corpus\(index=...\)"):
        create_audio_dataset(index.parent, sample_rate=RATE, duration=2.0,
                             excerpt=ExcerptConfig(strategy="loudest", max_silence_share=0.2))

"""Metering workers do not load SciPy (issue 27): ``loudest`` without an index under Grain ``mp_prefetch``.

A worker that searches for loud excerpts meters every try with the NumPy
K-filter; ``scipy.signal`` (about 50 MB of RSS per process) must never be
imported there. Checked in the workers themselves, through ``sys.modules``.
"""

from __future__ import annotations

import textwrap

import pytest

from helpers import run_script

_SCRIPT = textwrap.dedent(
    """
    import os
    import sys

    import grain
    import numpy as np
    import soundfile

    from audiotree import ExcerptConfig
    from audiotree.sources import create_audio_dataset


    class Probe:
        # What the worker process that produced the item has loaded.
        def __call__(self, item):
            return (os.getpid(), "scipy.signal" in sys.modules, float(np.ravel(item.lufs)[0]),
                    int(np.ravel(item.extras["excerpt_method"])[0]))


    if __name__ == "__main__":
        rng = np.random.default_rng(0)
        os.makedirs("files", exist_ok=True)
        for k, ext in enumerate(("flac", "wav", "ogg", "mp3")):
            tone = 0.3 * np.sin(2 * np.pi * 440 * np.arange(48000 * 6) / 48000) + 0.01 * rng.standard_normal(48000 * 6)
            soundfile.write(f"files/f{k}.{ext}", tone.astype(np.float32), 48000)
        ds = create_audio_dataset("files", num_epochs=None, sample_rate=44100, duration=1.0,
                                  excerpt=ExcerptConfig(strategy="loudest", num_tries=3))
        it = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)).map(Probe())
        it = iter(it.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
        rows = [next(it) for _ in range(8)]
        it.close()
        assert len({pid for pid, *_ in rows} - {os.getpid()}) == 2, rows  # two worker processes answered
        assert all(lufs > -40 for _, _, lufs, _ in rows), rows  # they metered
        assert not any(loaded for _, loaded, _, _ in rows), "a metering worker imported scipy.signal"
        print("ok", sorted({method for *_, method in rows}))
    """
)


@pytest.mark.slow
def test_loudest_workers_meter_without_scipy_signal(tmp_path):
    out = run_script(_SCRIPT, tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok")

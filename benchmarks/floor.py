"""The physical floor: the least a loader can do per item, in a plain loop.

Per item: open the file with soundfile, seek, read the excerpt at the native
rate, average to mono, (``loudest``: meter it with libloudness and retry up to
``num_tries`` times until it clears the cutoff), resample with soxr and pad to
length. 32 items are stacked into one ``(32, 1, T)`` float32 array. Nothing
else: no provenance, no pytree, no Grain, no threads.

``workers=0`` runs the loop in the calling process (one core). ``workers=k``
forks ``k`` processes that each run the loop and send their batches to the
parent through a queue, the least a multi-process loader must do.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import time

import numpy as np
import soundfile
import soxr

_AUDIO_EXTS = (".wav", ".flac", ".mp3", ".ogg")


def list_files(folder: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out += [os.path.join(dirpath, f) for f in filenames if f.lower().endswith(_AUDIO_EXTS) and not f.startswith(".")]
    return sorted(out)


def meter_name() -> str:
    """``libloudness`` (the floor's meter), or the fallback used where it is not installed."""
    try:
        import loudness  # noqa: F401
    except ImportError:
        return "audiotree.dsp.loudness (fallback: pip install loudness for the real floor)"
    return "libloudness"


def _meter(x: np.ndarray, rate: int) -> float:
    """Gated integrated loudness of ``(T, C)`` ``x``; -inf below one 400 ms block."""
    if x.shape[0] < math.ceil(0.4 * rate):
        return -math.inf
    try:
        import loudness
    except ImportError:  # e.g. CI's venv: keep the smoke test meaningful without the extra package
        from audiotree.dsp.loudness import integrated_loudness

        return float(integrated_loudness(x.T, rate))
    return float(loudness.integrated_loudness(x, rate))


def _mono(x: np.ndarray) -> np.ndarray:
    """``(n, C)`` -> ``(n, 1)`` channel mean (a matrix-vector product: far quicker than ``mean(axis=1)``)."""
    if x.shape[1] == 1:
        return x
    return (x @ np.full((x.shape[1], 1), 1.0 / x.shape[1], dtype=np.float32)).astype(np.float32, copy=False)


def _item(path: str, rng: np.random.Generator, cfg: dict) -> np.ndarray:
    duration, out_rate = cfg["duration"], cfg["sample_rate"]
    tries = cfg["num_tries"] if cfg["strategy"] == "loudest" else 1
    with soundfile.SoundFile(path) as f:
        rate, frames = f.samplerate, f.frames
        need = int(math.ceil(duration * rate)) + 1
        best, best_lufs = None, -math.inf
        for _ in range(tries):
            start = int(rng.integers(0, max(frames - need, 0) + 1))
            f.seek(start)
            x = _mono(f.read(need, dtype="float32", always_2d=True))
            if tries == 1:
                best = x
                break
            lufs = _meter(x, rate)
            if best is None or lufs > best_lufs:
                best, best_lufs = x, lufs
            if lufs > cfg["lufs_cutoff"] or frames <= need:
                break
    y = soxr.resample(best, rate, out_rate) if rate != out_rate else best
    target = int(round(duration * out_rate))
    out = np.zeros((1, target), dtype=np.float32)
    n = min(target, y.shape[0])
    out[0, :n] = y[:n, 0]
    return out


class _Stream:
    """Endless items: files shuffled per epoch, groups drawn by weight."""

    def __init__(self, groups: dict[str, list[str]], weights: dict[str, float], seed: int):
        self.rng = np.random.default_rng(seed)
        self.names = list(groups)
        self.groups = groups
        p = np.asarray([weights.get(n, 1.0) for n in self.names], dtype=np.float64)
        self.p = p / p.sum()
        self.orders = {n: [] for n in self.names}

    def next_path(self) -> str:
        name = self.names[int(self.rng.choice(len(self.names), p=self.p))] if len(self.names) > 1 else self.names[0]
        if not self.orders[name]:
            self.orders[name] = list(self.rng.permutation(self.groups[name]))
        return self.orders[name].pop()


def _batches(groups, weights, cfg, seed):
    stream = _Stream(groups, weights, seed)
    while True:
        yield np.stack([_item(stream.next_path(), stream.rng, cfg) for _ in range(cfg["batch_size"])])


def _worker(groups, weights, cfg, seed, queue):
    for batch in _batches(groups, weights, cfg, seed):
        queue.put(batch)


def floor_batches(groups: dict[str, list[str]], weights: dict[str, float], cfg: dict, *, workers: int = 0, seed: int = 0):
    """An endless iterator of ``(batch_size, 1, T)`` batches; see the module docstring."""
    if workers <= 0:
        yield from _batches(groups, weights, cfg, seed)
        return
    ctx = mp.get_context("fork")
    queue = ctx.Queue(maxsize=2 * workers)
    procs = [ctx.Process(target=_worker, args=(groups, weights, cfg, seed + 1 + w, queue), daemon=True) for w in range(workers)]
    for p in procs:
        p.start()
    try:
        while True:
            yield queue.get()
    finally:
        for p in procs:
            p.kill()


if __name__ == "__main__":  # a quick standalone look: python benchmarks/floor.py CORPUS_DIR
    import sys

    root = sys.argv[1]
    groups = {g: list_files(os.path.join(root, g)) for g in sorted(os.listdir(root)) if os.path.isdir(os.path.join(root, g))}
    cfg = dict(strategy="loudest", duration=3.0, sample_rate=48000, num_tries=5, lufs_cutoff=-40.0, batch_size=32)
    it = floor_batches(groups, {}, cfg)
    next(it)
    t = time.perf_counter()
    for _ in range(10):
        next(it)
    print(f"{320 / (time.perf_counter() - t):.1f} items/s")

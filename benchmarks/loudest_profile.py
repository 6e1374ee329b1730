#!/usr/bin/env python
"""Where ``loudest`` with a corpus index spends CPU that ``random`` does not (benchmarks/PROFILE.md).

    python benchmarks/loudest_profile.py            # both copies of benchmarks/loudest.py's corpus

Three views, CPU time (``time.process_time``) in this one process:

1. decoding only: open + seek + read of 3 s at the offsets each dataset chose
   for its first 400 items, in turns, 5 rounds (does ``loudest`` decode
   costlier audio than ``random`` over the item mix?);
2. decoding one window: per file, the loudest and the quietest 3 s window
   (what FLAC's content-dependent cost is on this corpus);
3. the plan, hot: ``LoudestPlan.row`` and ``RowPlan.pick`` in a ``timeit`` loop.
"""

from __future__ import annotations

import sys
import time
import timeit
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loudest import CORPORA, RATE, build_corpus  # noqa: E402


def _datasets(index):
    from audiotree.excerpts.config import ExcerptConfig
    from audiotree.sources import Corpus, create_audio_dataset

    common = dict(sample_rate=RATE, duration=3.0, num_epochs=None, shuffle=True)
    return (create_audio_dataset(corpus=Corpus(index=index), **common),
            create_audio_dataset(corpus=Corpus(index=index), excerpt=ExcerptConfig(strategy="loudest"), **common))


def _read_all(reads) -> float:
    from audiotree.io import AudioFile

    t0 = time.process_time()
    for path, start in reads:
        with AudioFile(path) as f:
            f.read(start, 3 * RATE)
    return time.process_time() - t0


def decode_at_offsets(index, items: int = 400, rounds: int = 5) -> None:
    random_ds, loudest_ds = _datasets(index)
    offsets = {name: [(t.filepath[0], int(round(float(t.offset[0]) * RATE))) for t in (ds[i] for i in range(items))]
               for name, ds in (("random", random_ds), ("loudest", loudest_ds))}
    cpu = {name: 0.0 for name in offsets}
    for r in range(rounds):
        for name in (list(offsets) if r % 2 == 0 else list(offsets)[::-1]):
            cpu[name] += _read_all(offsets[name])
    n = items * rounds
    print(f"  decode at each dataset's offsets: random {1e3 * cpu['random'] / n:.3f} ms, loudest "
          f"{1e3 * cpu['loudest'] / n:.3f} ms per read; random / loudest {cpu['random'] / cpu['loudest']:.2f}")


def decode_loud_and_quiet(root: Path, fmt: str, files: int = 3) -> None:
    import soundfile

    for kind in ("sparse", "dense"):
        for path in sorted((root / kind).glob(f"*.{fmt}"))[:files]:
            x, _ = soundfile.read(path, dtype="float32")
            csum = np.concatenate([[0.0], np.cumsum(np.square(x, dtype=np.float64))])
            energy = (csum[3 * RATE:] - csum[:-3 * RATE])[::RATE // 10]  # every 3 s window on the 100 ms grid
            times = {}
            for name, block in (("loud", int(np.argmax(energy))), ("quiet", int(np.argmin(energy)))):
                reads = [(path, block * (RATE // 10))] * 30
                times[name] = min(_read_all(reads) for _ in range(3)) / 30
            print(f"  {path.name}: loudest 3 s window {1e3 * times['loud']:.2f} ms, quietest "
                  f"{1e3 * times['quiet']:.2f} ms to decode")


def plan_hot(index) -> None:
    from audiotree.excerpts.config import ExcerptConfig
    from audiotree.sources.indexed import LoudestSpec, rows_from_index

    rows = rows_from_index(index, loudest=LoudestSpec(ExcerptConfig(strategy="loudest"), 3.0))
    rng = np.random.default_rng(0)
    for i in (0, len(rows) - 1):
        row = rows.loudest_row(i)
        t_row = min(timeit.repeat(lambda: rows.loudest_row(i), number=2000, repeat=5)) / 2000
        t_pick = min(timeit.repeat(lambda: row.pick(rng), number=2000, repeat=5)) / 2000
        print(f"  row {i} ({int(row.ends[-1])} qualifying starts in {row.count.size} run(s)): plan of the row "
              f"{1e6 * t_row:.1f} us, pick() {1e6 * t_pick:.1f} us (hot)")


def main() -> None:
    for fmt, root in CORPORA.items():
        index = build_corpus(root, fmt)
        print(fmt.upper())
        decode_at_offsets(index)
        decode_loud_and_quiet(root, fmt)
        plan_hot(index)


if __name__ == "__main__":
    main()

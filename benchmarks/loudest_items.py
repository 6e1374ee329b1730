#!/usr/bin/env python
"""Per-item CPU of our ``loudest`` search and of the plain loop, split by how each item ended.

    python benchmarks/loudest_items.py CORPUS_DIR [ITEMS]     # e.g. benchmarks/.corpus/full 1000

Both run in this one process, synchronously (``time.process_time`` per item):
ours through ``bench_worker.grain_dataset("loudest", ...)`` (``ds[i]``, no Grain
iterator), the floor through ``floor._item`` on its own file stream. Each item is
counted by what it took: ours ``1 meter`` (the first random read cleared the
cutoff, or the file is shorter than the excerpt), ``2 meter`` (a short file's
miss: a whole-file decode and energy map, then a second meter) or ``probe`` (a
long file's miss: the probe search); the floor by its number of tries (one meter
per try). The split separates the per-item overhead (the ``1 meter`` rows) from
what the two searches do differently on a miss (benchmarks/PROFILE.md).
"""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_worker  # noqa: E402
import floor  # noqa: E402

_now = time.process_time


def _ours(corpus: str, n: int) -> dict[str, list[float]]:
    import importlib

    search = importlib.import_module("audiotree.excerpts.search")
    seen = collections.Counter()
    measure, probe = search.measure, search._LoudestSearch._probe_search

    def counted_measure(*args, **kwargs):
        seen["meter"] += 1
        return measure(*args, **kwargs)

    def counted_probe(self, *args):
        seen["probe"] += 1
        return probe(self, *args)

    search.measure, search._LoudestSearch._probe_search = counted_measure, counted_probe
    ds = bench_worker.grain_dataset("loudest", corpus)
    ds[0]  # warm-up
    out = collections.defaultdict(list)
    for i in range(1, n + 1):
        seen.clear()
        t = _now()
        ds[i]
        out["probe" if seen["probe"] else f"{seen['meter']} meter"].append(_now() - t)
    return out


def _floor(corpus: str, n: int) -> dict[str, list[float]]:
    seen = collections.Counter()
    meter = floor._meter

    def counted(*args):
        seen["meter"] += 1
        return meter(*args)

    floor._meter = counted
    cfg = dict(bench_worker.CONFIGS["loudest"])
    groups = {g: floor.list_files(p) for g, p in bench_worker._folders(corpus).items()}
    stream = floor._Stream(groups, bench_worker.WEIGHTS, 0)
    out = collections.defaultdict(list)
    for _ in range(n):
        path = stream.next_path()
        seen.clear()
        t = _now()
        floor._item(path, stream.rng, cfg)
        out[f"{seen['meter']} meter"].append(_now() - t)
    return out


def main(argv: list[str]) -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    corpus, n = argv[0], int(argv[1]) if len(argv) > 1 else 1000
    for name, split in (("ours", _ours(corpus, n)), ("floor", _floor(corpus, n))):
        total = sum(sum(v) for v in split.values())
        print(f"{name}: {1e3 * total / n:.3f} CPU ms/item")
        for kind in sorted(split):
            v = split[kind]
            print(f"   {kind:9s} {len(v) / n:6.1%} of items, {1e3 * np.mean(v):7.3f} ms each, "
                  f"{1e3 * sum(v) / n:6.3f} ms/item of all")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Ours against the plain loop in one process, interleaved, per CPU-second.

    python benchmarks/interleave.py [--corpus-dir benchmarks/.corpus/real] [--rounds 5] [--batches 10]

A steadier view than separate interpreters on a shared machine: the pipelines
run in turns in one process (``random``, synchronous reads, batch 32), each
turn timed with ``time.process_time``, so every pipeline sees the same load,
caches and page cache. Two ablations price the decode validation that ours does
and the plain loop does not: ``ours -finite`` skips the NaN/Inf scan of decoded
samples, ``ours -length`` skips the header-versus-bytes check at open (extra
reads for OGG and MP3). The ablations are for measurement only; the library
always validates.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus-dir", default=str(HERE / ".corpus" / "real"))
    ap.add_argument("--config", choices=("random", "loudest"), default="random")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=10)
    args = ap.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import grain

    import bench_worker
    from audiotree import AudioTree
    from audiotree.io import decode

    sync = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)

    def ours():
        ds = bench_worker.grain_dataset(args.config, args.corpus_dir)
        return iter(ds.to_iter_dataset(read_options=sync).batch(32, batch_fn=AudioTree.batch))

    # The names decode.py calls the two checks by (it imports check_finite from io.read_errors).
    names = {"finite": "check_finite", "length": "_check_length_claim"}
    checks = {k: getattr(decode, name) for k, name in names.items()}

    def skipping(skipped):
        def setup():
            for k, fn in checks.items():
                setattr(decode, names[k], (lambda *a, **kw: None) if k == skipped else fn)
        return setup

    def restore():
        for k, fn in checks.items():
            setattr(decode, names[k], fn)

    pipelines = {
        "plain loop": (bench_worker.floor_batches(args.config, args.corpus_dir, 0, 32), restore),
        "ours": (ours(), restore),
        "ours -finite": (ours(), skipping("finite")),
        "ours -length": (ours(), skipping("length")),
    }
    for it, setup in pipelines.values():  # warm-up: imports, first opens
        setup()
        next(it)
    rates: dict[str, list[float]] = {k: [] for k in pipelines}
    for _ in range(args.rounds):
        for name, (it, setup) in pipelines.items():
            setup()
            t = time.process_time()
            for _ in range(args.batches):
                next(it)
            rates[name].append(32 * args.batches / (time.process_time() - t))
    restore()
    base = statistics.median(rates["plain loop"])
    print(f"{args.config}, {args.corpus_dir}: items per CPU-second over {args.rounds} interleaved rounds of "
          f"{args.batches} batches")
    for name, r in rates.items():
        med = statistics.median(r)
        print(f"  {name:14s} median {med:6.1f}  min-max {min(r):6.1f}-{max(r):6.1f}  vs plain loop {med / base:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Where the CPU of a 2-worker run goes, process by process and thread by thread (issue 27).

    python benchmarks/worker_cpu.py --corpus benchmarks/.corpus/full --config random [--workers 2] [--batches 12]

Builds the pipeline of ``benchmarks/bench_worker.py`` (ours, sync reads, batches
of 32, ``mp_prefetch`` with ``--workers``), warms it up the way the harness does
(the first ``2k`` batches), then over ``--batches`` timed batches prints the
user + system CPU seconds of the trainer process, per thread (by name), and of
every worker, each per item. Compare the workers' CPU per item with a 0-worker
run's (``--workers 0``): what the workers spend above it is the per-item cost of
working in a worker; what the trainer spends is the transfer and the iterator
machinery.

``--trace`` also runs cProfile in the trainer's main thread over the timed window
and prints its top functions by internal time.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_worker  # noqa: E402


def _thread_times(proc) -> dict[str, float]:
    """CPU seconds per thread name of ``proc`` (threads of the same name are summed)."""
    out: dict[str, float] = collections.Counter()
    for t in proc.threads():
        try:
            with open(f"/proc/{proc.pid}/task/{t.id}/comm") as f:
                name = f.read().strip()
        except OSError:
            name = "?"
        out[name] += t.user_time + t.system_time
    return out


def _snapshot(proc):
    kids = {}
    for child in proc.children(recursive=True):
        try:
            c = child.cpu_times()
            kids[child.pid] = (child.name(), c.user + c.system, _thread_times(child))
        except Exception:  # noqa: BLE001 - gone
            continue
    return _thread_times(proc), kids


class _Stamp:
    """A ``map`` after ``batch``: appends one byte per batch a worker produces to ``path`` (O_APPEND)."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, batch):
        # The process CPU clock of whoever made the batch: the pipeline's own work, before any transfer.
        t = os.times()
        line = f"{os.getpid()} {t.user:.6f} {t.system:.6f}\n".encode()
        fd = os.open(self.path + ".cpu", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, b".")
        finally:
            os.close(fd)
        return batch


def _produced(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _batches(args, stamps: str):
    """``bench_worker.grain_batches`` with a stamp per produced batch."""
    import grain

    from audiotree import AudioTree

    ds = bench_worker.grain_dataset(args.config, args.corpus)
    it = ds.to_iter_dataset(read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    it = it.batch(32, batch_fn=AudioTree.batch).map(_Stamp(stamps))
    if args.workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=args.workers))
    return iter(it)


def main(argv=None) -> int:
    import psutil

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--config", choices=tuple(bench_worker.CONFIGS), default="random")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--trace", action="store_true", help="cProfile the trainer's main thread over the timed window")
    args = ap.parse_args(argv)

    stamps = f"/tmp/worker_cpu_{os.getpid()}.stamps"
    it = _batches(args, stamps)
    for _ in range(max(2 * args.workers, 1)):
        next(it)
    consumed = max(2 * args.workers, 1)
    made0 = _produced(stamps)
    reader = getattr(it, "_reader", None)
    slots0 = len(reader._mapped) if reader is not None else 0  # noqa: SLF001 - a diagnostic
    me = psutil.Process()
    threads0, kids0 = _snapshot(me)
    cpu0, t0 = bench_worker.tree_cpu_seconds(), time.perf_counter()
    prof = None
    if args.trace:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    items = 0
    for _ in range(args.batches):
        items += bench_worker._batch_items(next(it))  # noqa: SLF001 - the harness' own count
    if prof is not None:
        prof.disable()
    wall = time.perf_counter() - t0
    cpu = bench_worker.tree_cpu_seconds() - cpu0
    threads1, kids1 = _snapshot(me)
    made1 = _produced(stamps)
    slots1 = len(reader._mapped) if reader is not None else 0  # noqa: SLF001
    print(f"batch slots mapped by the trainer: {slots0} at the start of the window, {slots1} at its end")
    os.unlink(stamps)
    # Per process that makes batches: its user and system CPU between consecutive batches.
    per_pid: dict[int, list] = collections.defaultdict(list)
    with open(stamps + ".cpu") as f:
        for line in f:
            pid, cpu_p, cpu_t = line.split()
            per_pid[int(pid)].append((float(cpu_p), float(cpu_t)))
    os.unlink(stamps + ".cpu")
    for pid, rows in per_pid.items():
        rows = rows[2:]  # past the warm-up
        if len(rows) > 1:
            n = len(rows) - 1
            dp = (rows[-1][0] - rows[0][0]) / n
            dt = (rows[-1][1] - rows[0][1]) / n
            print(f"  maker {pid}: {n} batches, per item {dp * 1e3 / 32:.2f} ms user + {dt * 1e3 / 32:.2f} ms system "
                  "CPU of that process (the pipeline's own work, before any transfer)")
    print(f"batches produced - consumed: {made0 - consumed} at the start of the window, "
          f"{made1 - consumed - args.batches} at its end")

    print(f"{args.config}, {args.workers} workers, {items} items: {items / cpu:.1f} items per CPU-second of the tree, "
          f"{cpu * 1e3 / items:.2f} CPU ms/item, {items / wall:.1f} items/s wall, load {os.getloadavg()[0]:.1f}")
    parent = 0.0
    for name in sorted(set(threads0) | set(threads1)):
        d = threads1.get(name, 0.0) - threads0.get(name, 0.0)
        parent += d
        if d > 0.0005:
            print(f"  trainer thread {name:24s} {d * 1e3 / items:7.3f} CPU ms/item")
    print(f"  trainer total                   {parent * 1e3 / items:7.3f} CPU ms/item")
    for pid, (name, c1, th1) in sorted(kids1.items()):
        _, c0, th0 = kids0.get(pid, (name, 0.0, {}))
        print(f"  worker {pid} {name:22s} {(c1 - c0) * 1e3 / items:7.3f} CPU ms/item (of all items)")
        for tname in sorted(th1):
            d = th1[tname] - th0.get(tname, 0.0)
            if d > 0.0005:
                print(f"    thread {tname:24s} {d * 1e3 / items:7.3f} CPU ms/item")
    if prof is not None:
        import pstats

        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    sys.stdout.flush()
    bench_worker._shutdown(it)  # noqa: SLF001
    return 0


if __name__ == "__main__":
    sys.exit(main())

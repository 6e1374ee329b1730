#!/usr/bin/env python
"""What checking a column store's bytes costs at 10^7 rows (issue 36): a whole-file hash at open, or a CRC per read.

    python benchmarks/store_check.py               # prints the table (CPU seconds, this process)
    python benchmarks/store_check.py --rows 1000000

A store's size per row is measured on a real one: ~100 generated files (speech,
music, effects; 0.4 s to 2 min, as ``benchmarks/index_synth.py`` makes them),
indexed with loudness profiles, their store written by ``open_columns``. At
``--rows`` rows the store holds that many times the bytes per row. Measured:

* **hash whole files at open**: CRC-32, Adler-32, SHA-1 and BLAKE2b throughput
  over 256 MB in memory (the page cache's best case), and so the CPU seconds
  each process would spend hashing the store at open (every worker opens it);
* **check each read** (what the store does, :mod:`audiotree.index.store_check`):
  a row read through :class:`~audiotree.index.store_check.CheckedFile` against
  a plain ``os.pread`` of the same bytes, on a float64 column of ``--rows``
  rows (random rows, so the chunks are not the same twice), and a whole column
  read at start-up (what the building process does for the duration filter).

Timings are ``time.process_time`` (CPU seconds of this process), medians of
``--repeat`` runs; the machine is shared, so read the ratios.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _store_bytes_per_row(work: Path) -> tuple[float, int, float]:
    """Bytes per row of a real store (files of every kind, checksums included), its row count, and the index's
    bytes per row."""
    from index_synth import real_index

    from audiotree.index import open_index
    from audiotree.index.columns import open_columns

    index = real_index(work, log=lambda *a: None)
    store = open_columns(open_index(index))
    total = sum(os.path.getsize(os.path.join(store.directory, n)) for n in os.listdir(store.directory))
    return total / len(store), len(store), os.path.getsize(index) / len(store)


def _throughput(fn, data: bytes, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn(data)
        times.append(time.process_time() - t)
    return len(data) / statistics.median(times)


def _per_read(rows: int, reads: int, repeat: int, folder: str) -> tuple[float, float, float]:
    """(plain pread, checked read) seconds per row read, and the checked whole-column read, seconds."""
    import numpy as np

    from audiotree.index.store_check import CheckedFile, write_checksums

    path = os.path.join(folder, "column.bin")
    np.random.default_rng(0).random(rows).tofile(path)
    write_checksums(path)
    picks = np.random.default_rng(1).integers(0, rows, reads) * 8
    checked = CheckedFile(path)
    fd = os.open(path, os.O_RDONLY)
    plain, check, whole = [], [], []
    try:
        checked.read(0, rows * 8)  # (into the page cache)
        for _ in range(repeat):
            t = time.process_time()
            for p in picks.tolist():
                os.pread(fd, 8, p)
            plain.append((time.process_time() - t) / reads)
            t = time.process_time()
            for p in picks.tolist():
                checked.read(p, 8)
            check.append((time.process_time() - t) / reads)
            t = time.process_time()
            checked.read(0, rows * 8)
            whole.append(time.process_time() - t)
    finally:
        os.close(fd)
        checked.close()
    return statistics.median(plain), statistics.median(check), statistics.median(whole)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reads", type=int, default=200_000)
    ap.add_argument("--work", default=str(HERE / ".corpus" / "store-check"))
    args = ap.parse_args(argv)
    per_row, base_rows, index_per_row = _store_bytes_per_row(Path(args.work))
    store_gb = per_row * args.rows / 1e9
    data = os.urandom(256 << 20)
    print(f"store: {per_row:.0f} bytes per row (measured on a real store of {base_rows} rows) -> "
          f"{store_gb:.2f} GB at {args.rows:,} rows\n")
    print("| check | throughput (GB/s) | CPU-s per process at open |")
    print("|---|---|---|")
    for name, fn in (("zlib.crc32", zlib.crc32), ("zlib.adler32", zlib.adler32),
                     ("hashlib.sha1", lambda b: hashlib.sha1(b).digest()),
                     ("hashlib.blake2b", lambda b: hashlib.blake2b(b).digest())):
        rate = _throughput(fn, data, args.repeat)
        print(f"| {name}, every file whole | {rate / 1e9:.2f} | {store_gb * 1e9 / rate:.2f} |")
    with tempfile.TemporaryDirectory(dir=args.work) as folder:
        plain, check, whole = _per_read(args.rows, args.reads, args.repeat, folder)
    print(f"| CRC per 4 KiB chunk, checked on each read (the store) | — | 0 (one fstat per file) |\n")
    print(f"row read ({args.rows:,}-row float64 column, random rows): plain os.pread {plain * 1e6:.2f} us, "
          f"checked {check * 1e6:.2f} us (+{(check - plain) * 1e6:.2f} us per read)")
    sha1 = _throughput(lambda b: hashlib.sha1(b).digest(), data, args.repeat)
    index_mb = index_per_row * args.rows / 1e6
    print(f"index content digest (SHA-1, once per index version, remembered beside the store; a real index of "
          f"{args.rows:,} distinct files, {index_mb:.0f} MB): {index_mb * 1e6 / sha1:.2f} CPU-s, in the building process")
    print(f"whole column read, checked ({args.rows * 8 / 1e6:.0f} MB, the building process): {whole:.3f} CPU-s")


if __name__ == "__main__":
    main()

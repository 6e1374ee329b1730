#!/usr/bin/env python
"""2 workers against 0, per CPU-second, with and without reused batch slots (issue 27).

    python benchmarks/batch_slots.py --corpus benchmarks/.corpus/full [--rounds 3]

Runs ``benchmarks/bench_worker.py`` (the script behind the "2 workers" rows of
BENCHMARKS.md) for ours with 0 workers, 2 workers with slots (the default,
``audiotree.sources.workers.batch_slots``) and 2 workers with Grain's fresh segment per
batch (``AUDIOTREE_BATCH_SLOTS=0``), interleaved round by round, each run in a
fresh interpreter, and prints the median items per CPU-second of the process
tree and the 2-worker/0-worker ratios. Sync reads, batches of 32.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _sections  # noqa: E402

SRC = HERE.parent / "src"
RESULT = "AUDIOTREE_BENCH_RESULT"  # bench_worker.RESULT
VARIANTS = (("0 workers", 0, "1"), ("2 workers, slots", 2, "1"), ("2 workers, Grain segments", 2, "0"))


def one_run(config: str, corpus: str, workers: int, slots: str, batches: int) -> float | None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PYTHONPATH=str(SRC), AUDIOTREE_BATCH_SLOTS=slots)
    cmd = [sys.executable, str(HERE / "bench_worker.py"), "--impl", "ours", "--reads", "sync", "--config", config,
           "--workers", str(workers), "--corpus", corpus, "--batches", str(batches)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    for line in out.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):])["items_per_cpu_s"]
    print(out.stderr[-2000:], file=sys.stderr)
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True, help="a corpus built by benchmarks/corpus.py (speech/music/effects)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", default="random,loudest")
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--write", action="store_true", help="write the table as section batch-slots of BENCHMARKS.md")
    args = ap.parse_args(argv)
    rows = []
    for config in args.configs.split(","):
        rates: dict[str, list[float]] = {name: [] for name, _, _ in VARIANTS}
        for r in range(args.rounds):
            for name, workers, slots in VARIANTS:
                rate = one_run(config, args.corpus, workers, slots, args.batches)
                if rate is not None:
                    rates[name].append(rate)
                print(f"  round {r + 1} {config:8s} {name:26s} {rate}", flush=True)
        med = {k: statistics.median(v) if v else float("nan") for k, v in rates.items()}
        print(f"{config}: items per CPU-second, median of {args.rounds} interleaved rounds")
        for name, _, _ in VARIANTS:
            v = rates[name]
            print(f"  {name:26s} {med[name]:7.1f}  ({min(v, default=0):.1f}-{max(v, default=0):.1f})"
                  f"  vs 0 workers {med[name] / med['0 workers']:.2f}x")
            rows.append(f"| {config} | {name} | {med[name]:.0f} ({min(v, default=0):.0f}–{max(v, default=0):.0f}) "
                        f"| {med[name] / med['0 workers']:.2f}× |")
    if args.write:
        _write(rows, args)
    return 0


def _write(rows: list[str], args) -> None:
    commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join([
        "## Two workers: reused batch slots against Grain's segment per batch (issue 27)",
        "",
        f"`python benchmarks/batch_slots.py --rounds {args.rounds} --batches {args.batches}` on the synthetic corpus, "
        f"{when}, commit `{commit}`, load average {load:.1f} on 2 cores. Ours, sync reads, batches of 32; "
        "items per CPU-second of the process tree (median of interleaved rounds, min–max), each run in a fresh "
        "interpreter by `benchmarks/bench_worker.py`. *slots* is the default (`audiotree.sources.workers.batch_slots`); "
        "*Grain segments* is `AUDIOTREE_BATCH_SLOTS=0`.",
        "",
        "| config | variant | items per CPU-s | vs 0 workers |",
        "|---|---|---|---|",
        *rows,
    ])
    _sections.replace_section(HERE.parent / "BENCHMARKS.md", "batch-slots", _sections.wrap("batch-slots", text))


if __name__ == "__main__":
    sys.exit(main())

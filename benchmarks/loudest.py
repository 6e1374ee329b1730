#!/usr/bin/env python
"""``loudest`` (with an index, and by search) next to ``random`` on one corpus, in one run.

    python benchmarks/loudest.py            # prints a table, rewrites its BENCHMARKS.md section
    python benchmarks/loudest.py --quick    # fewer items, for a smoke run

The corpus (cached in ``benchmarks/.corpus/loudest``): 24 mono 16 kHz FLAC files
of 60 to 600 s, half *dense* (noise bursts over room tone: most windows are
loud) and half *sparse* (room tone at -60 dBFS with one 2.5 s event at
-20 dBFS), plus their corpus index. Every configuration reads 3 s excerpts at
the native rate (no resampling, so decoding and metering dominate) from the
same files, in its own fresh interpreter, interleaved (A, B, C, A, B, C, ...).
Each worker times ``ds[i]`` over a fixed item range after a warm-up and
reports wall seconds and CPU seconds (user + sys of its process tree over the
timed window; the dataset runs in-process, so the tree is the process).
We report medians of items per CPU-second and their ratios to ``random``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _sections import replace_section, wrap  # noqa: E402

HERE = Path(__file__).resolve().parent
CORPUS = HERE / ".corpus" / "loudest"
RESULTS = HERE / ".results"
RATE = 16_000
CONFIGS = ("random", "loudest_index", "loudest_search")


def build_corpus(root: Path) -> Path:
    import numpy as np
    import soundfile

    from audiotree.index import build_index

    index = root / "corpus.parquet"
    if index.exists():
        return index
    rng = np.random.default_rng(0)
    for kind in ("dense", "sparse"):
        (root / kind).mkdir(parents=True, exist_ok=True)
        for i in range(12):
            seconds = float(rng.uniform(60, 600))
            n = int(seconds * RATE)
            x = (0.001 * rng.standard_normal(n)).astype(np.float32)
            if kind == "sparse":
                s = int(rng.uniform(0, seconds - 3) * RATE)
                x[s:s + int(2.5 * RATE)] *= 100
            else:  # bursts of 0.5-4 s, 0.2-2 s apart
                t = 0
                while t < n:
                    length = int(rng.uniform(0.5, 4) * RATE)
                    x[t:t + length] *= float(rng.uniform(30, 300))
                    t += length + int(rng.uniform(0.2, 2) * RATE)
            soundfile.write(root / kind / f"{kind}{i:02d}.flac", x, RATE)
    build_index({"dense": root / "dense", "sparse": root / "sparse"}, index, executor="serial", show_progress=False)
    return index


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def worker(config: str, index: str, items: int, warmup: int) -> dict:
    from audiotree.excerpt import ExcerptConfig
    from audiotree.index import open_index
    from audiotree.sources import create_audio_dataset

    common = dict(sample_rate=RATE, duration=3.0, num_epochs=None, shuffle=True)
    if config == "random":
        ds = create_audio_dataset(index=index, **common)
    elif config == "loudest_index":
        ds = create_audio_dataset(index=index, excerpt=ExcerptConfig(strategy="loudest"), **common)
    else:  # the same files, listed without the index: the probe search
        paths = open_index(index).paths()
        ds = create_audio_dataset(filepaths=paths, excerpt=ExcerptConfig(strategy="loudest"), **common)
    for i in range(warmup):
        ds[i]
    cpu0, wall0 = _cpu(), time.perf_counter()
    hits = 0
    for i in range(warmup, warmup + items):
        tree = ds[i]
        hits += tree.lufs is not None and float(tree.lufs[0]) > -40.0
    wall, cpu = time.perf_counter() - wall0, _cpu() - cpu0
    return dict(config=config, items=items, wall_s=wall, cpu_s=cpu, items_per_s=items / wall,
                items_per_cpu_s=items / cpu, hits=hits)


SECTION = "loudest"
LABELS = {"random": "`random`", "loudest_index": "`loudest`, with the index", "loudest_search": "`loudest`, search (no index)"}


def render(data: dict) -> str:
    """The BENCHMARKS.md section for one run's results."""
    import datetime

    s = data["summary"]
    rows = "\n".join(
        f"| {LABELS[c]} | {s[c]['items_per_s']:.1f} | {s[c]['items_per_cpu_s']:.1f} | "
        f"{s[c]['ratio_cpu_vs_random']:.2f}x | {s[c]['ratio_wall_vs_random']:.2f}x | "
        + ("not metered |" if c == "random" else f"{100 * s[c]['hit_share']:.1f} % |")
        for c in CONFIGS)
    by_run = {(r["run"], r["config"]): r["items_per_cpu_s"] for r in data["records"]}
    paired = ", ".join(f"{by_run[(run, 'loudest_index')] / by_run[(run, 'random')]:.2f}"
                       for run in range(data["runs"]))
    ratio = s["loudest_index"]["ratio_cpu_vs_random"]
    verdict = "HOLDS" if ratio >= 0.9 else "MISSES"
    return f"""## `loudest` next to `random` (issue 14)

Generated by `python benchmarks/loudest.py` on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC
(2 cores, shared machine; load average {data['loadavg'][0]:.1f}). Corpus: 24 mono 16 kHz FLAC files of 60 to 600 s,
half dense (noise bursts over room tone), half sparse (room tone at -60 dBFS, one 2.5 s event at -20 dBFS), and
their corpus index. 3 s excerpts at the native rate (no resampling, so decoding and metering are all the work),
one item at a time with `ds[i]`, in a fresh interpreter per configuration and run, configurations interleaved;
{data['items']} timed items per run after 8 warm-up items, medians of {data['runs']} runs. CPU = user + sys of the
process tree over the timed window.

| configuration | items/s (wall) | items per CPU-second | vs `random` (CPU) | vs `random` (wall) | excerpts above -40 LUFS |
|---|---|---|---|---|---|
{rows}

| target (issue 14) | measured | verdict |
|---|---|---|
| `loudest` with an index >= 0.9x the items/s of `random`, per CPU-second | {ratio:.2f}x | {verdict} |

With the index an item is one seek and one read, like `random`, plus a draw among the qualifying starts and the
gating of one window's profile blocks (no meter pass). The search costs more on this corpus because half of it is
sparse: a first miss there costs the probes (about 400 on a 10 min file) and a read of 2 x 3 s per region; the
dense half mostly clears the cutoff on the first read. Wall figures swing with the machine's load; the CPU ratios
are the steadier figure. Per run, `loudest` with the index over `random` (CPU): {paired}.
"""


def write_section(data: dict, path: Path) -> None:
    replace_section(path, SECTION, wrap(SECTION, render(data)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--items", type=int, default=None)
    ap.add_argument("--worker", nargs=4, metavar=("CONFIG", "INDEX", "ITEMS", "WARMUP"), help=argparse.SUPPRESS)
    ap.add_argument("--render", action="store_true", help="rewrite the BENCHMARKS.md section from the last results")
    args = ap.parse_args(argv)
    if args.render:
        write_section(json.loads((RESULTS / "loudest.json").read_text()), HERE.parent / "BENCHMARKS.md")
        return
    if args.worker:
        config, index, items, warmup = args.worker
        print(json.dumps(worker(config, index, int(items), int(warmup))))
        return
    runs = args.runs or (1 if args.quick else 3)
    items = args.items or (48 if args.quick else 240)
    index = build_corpus(CORPUS)
    records = []
    for run in range(runs):
        for config in CONFIGS:
            out = subprocess.run([sys.executable, __file__, "--worker", config, str(index), str(items), "8"],
                                 check=True, capture_output=True, text=True, timeout=1800)
            rec = json.loads(out.stdout.strip().splitlines()[-1])
            rec["run"] = run
            records.append(rec)
            print(f"run {run} {config:15s} {rec['items_per_s']:8.1f} items/s  {rec['items_per_cpu_s']:8.1f} "
                  f"items/CPU-s  hits {rec['hits']}/{items}", flush=True)
    summary = {}
    for config in CONFIGS:
        mine = [r for r in records if r["config"] == config]
        summary[config] = {k: statistics.median(r[k] for r in mine) for k in ("items_per_s", "items_per_cpu_s")}
        summary[config]["hit_share"] = sum(r["hits"] for r in mine) / sum(r["items"] for r in mine)
    for config in CONFIGS:
        s = summary[config]
        s["ratio_cpu_vs_random"] = s["items_per_cpu_s"] / summary["random"]["items_per_cpu_s"]
        s["ratio_wall_vs_random"] = s["items_per_s"] / summary["random"]["items_per_s"]
        print(f"{config:15s} {s['items_per_s']:8.1f} items/s {s['items_per_cpu_s']:8.1f} items/CPU-s "
              f"x{s['ratio_cpu_vs_random']:.2f} (CPU) x{s['ratio_wall_vs_random']:.2f} (wall) "
              f"cutoff cleared {100 * s['hit_share']:.1f}%")
    RESULTS.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    (RESULTS / "loudest.json").write_text(json.dumps(
        {"records": records, "summary": summary, "runs": runs, "items": items, "loadavg": load}, indent=2))
    print(f"load average {load[0]:.1f}")
    if not args.quick:
        write_section(json.loads((RESULTS / "loudest.json").read_text()), HERE.parent / "BENCHMARKS.md")


if __name__ == "__main__":
    main()

"""Bucketed whole-utterance loading from long recordings: ours (a segment index) vs lhotse (cuts).

    python benchmarks/bucketing_segments.py [--lhotse-python PY]   # rewrites its BENCHMARKS.md section
    python benchmarks/bucketing_segments.py --quick                # small corpus, benchmarks/.results/

Run by ``benchmarks/bucketing.py --segments`` too. The corpus: 200 recordings of
10-60 minutes (8 kHz mono 16-bit FLAC, a cheap tiled signal) cut into 30,000
segments of 0.5-20 s (uniform), with a transcript and a speaker each. It is
written once into ``benchmarks/.results/segments-corpus/``; so are its segment
index (``audiotree index --segments``, no loudness profiles: nothing here reads
them) and, from it, lhotse recordings + supervisions (``audiotree export
lhotse``) and lhotse's own cuts (``CutSet.from_manifests(...).trim_to_supervisions()``).

Each run is a fresh process, single-threaded, 0 workers, interleaved (ours,
lhotse, ours, ...):

* ours: ``create_audio_dataset(corpus=Corpus(index=...), duration=None)`` then
  ``batch_by_duration(items, bucketing=BucketConfig(max_seconds=M, buckets=K))``; a batch is a padded
  ``AudioTree``;
* lhotse: ``load_manifest(cuts)``, ``DynamicBucketingSampler(cuts,
  max_duration=M, num_buckets=K, shuffle=True)``, and
  ``lhotse.dataset.collation.collate_audio(batch)`` (load + pad to the longest cut).

Metrics: start -> first batch (wall seconds from the process's first line,
imports included, i.e. what a training script waits), items per CPU-second over
the first ``--items`` items after the first batch (``time.process_time`` of
the process), padding efficiency (real / padded samples) and distinct batch
shapes over one whole epoch's plan (lhotse: its batches' longest cut; ours:
the bucket edge, filler slots counted as padding). ``max_duration`` bounds real
seconds per batch in lhotse and padded seconds in ours.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _sections import replace_section  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / ".results"
SECTION = "bucketing-segments"
RATE = 8000

OURS = r"""
import time
t0 = time.perf_counter()
import json, sys
import numpy as np
from audiotree.sources import BucketConfig, Corpus, batch_by_duration, create_audio_dataset
index, max_seconds, buckets, seed, want = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
items = create_audio_dataset(corpus=Corpus(index=index), duration=None, sample_rate=8000, shuffle=True, shuffle_seed=seed)
batches = batch_by_duration(items, bucketing=BucketConfig(max_seconds=max_seconds, buckets=buckets), shuffle_seed=seed, num_epochs=1)
first = batches[0]
startup = time.perf_counter() - t0
cpu0 = time.process_time()
count, k = 0, 1
while count < want and k < len(batches):
    batch = batches[k]
    count += int((batch.lengths > 0).sum())
    k += 1
cpu = time.process_time() - cpu0
plan = batches.plan
real = padded = 0.0
shapes = set()
for slots, b in zip(plan.epoch(0).batches, plan.epoch(0).buckets):
    samples = int(np.ceil(plan.edges[b] * 8000 - 1e-6))
    real += float(sum(int(round(plan.durations[i] * 8000)) for i in slots if i >= 0))
    padded += slots.size * samples
    shapes.add((slots.size, samples))
print(json.dumps({"startup_s": startup, "items": count, "cpu_s": cpu, "efficiency": real / padded,
                  "shapes": len(shapes), "batches": len(plan.epoch(0))}))
"""

LHOTSE = r"""
import time
t0 = time.perf_counter()
import json, sys
from lhotse import load_manifest
from lhotse.dataset import DynamicBucketingSampler
from lhotse.dataset.collation import collate_audio
cuts_path, max_seconds, buckets, seed, want = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
cuts = load_manifest(cuts_path)
sampler = DynamicBucketingSampler(cuts, max_duration=max_seconds, num_buckets=buckets, shuffle=True, seed=seed)
it = iter(sampler)
audio, lengths = collate_audio(next(it))
startup = time.perf_counter() - t0
cpu0 = time.process_time()
count = 0
for batch in it:
    audio, lengths = collate_audio(batch)
    count += len(batch)
    if count >= want:
        break
cpu = time.process_time() - cpu0
real = padded = 0
shapes = set()
n = 0
sampler = DynamicBucketingSampler(cuts, max_duration=max_seconds, num_buckets=buckets, shuffle=True, seed=seed)
for batch in sampler:
    samples = [c.num_samples for c in batch]
    real += sum(samples)
    padded += len(samples) * max(samples)
    shapes.add((len(samples), max(samples)))
    n += 1
import lhotse
print(json.dumps({"startup_s": startup, "items": count, "cpu_s": cpu, "efficiency": real / padded,
                  "shapes": len(shapes), "batches": n, "version": lhotse.__version__}))
"""

MAKE_CUTS = r"""
import sys
from lhotse import CutSet, load_manifest
recordings, supervisions, out = sys.argv[1:4]
cuts = CutSet.from_manifests(recordings=load_manifest(recordings), supervisions=load_manifest(supervisions))
cuts.trim_to_supervisions(keep_overlapping=False).to_file(out)
"""


def log(msg: str) -> None:
    print(f"[segments] {msg}", file=sys.stderr, flush=True)


def make_corpus(folder: Path, recordings: int, segments: int, fmt: str, seed: int = 0) -> Path:
    """The recordings (``fmt``: WAV or FLAC) and ``segments.csv``; returns the CSV (kept when already written)."""
    import soundfile

    csv = folder / "segments.csv"
    if csv.exists():
        return csv
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    minutes = rng.uniform(10, 60, recordings)
    # Segments per recording in proportion to its length, each 0.5-20 s, laid end to end with gaps.
    share = np.floor(minutes / minutes.sum() * segments).astype(int)
    share[: segments - share.sum()] += 1
    t = np.arange(RATE) / RATE
    second = (np.sin(2 * np.pi * 220 * t) * 0.05 + rng.uniform(-0.002, 0.002, RATE)).astype(np.float32)
    lines = ["path,start,end,id,text,speaker"]
    for r in range(recordings):
        seconds = int(minutes[r] * 60)
        lengths = rng.uniform(0.5, 20.0, share[r])
        room = seconds - lengths.sum()
        if room < 0:  # a short recording: shorten its segments to fit
            lengths *= seconds * 0.9 / lengths.sum()
            room = seconds - lengths.sum()
        gaps = rng.dirichlet(np.ones(share[r] + 1)) * room
        start = 0.0
        for k in range(share[r]):
            start += gaps[k]
            end = start + lengths[k]
            lines.append(f"rec{r:03d}.{fmt},{start:.3f},{min(end, seconds):.3f},rec{r:03d}-{k:04d},"
                         f"utterance {k} of recording {r},spk{r % 50}")
            start = end
        with soundfile.SoundFile(str(folder / f"rec{r:03d}.{fmt}"), "w", RATE, 1, subtype="PCM_16") as f:
            block = np.tile(second, 60) * np.float32(rng.uniform(0.5, 1.5))
            for _ in range(seconds // 60):
                f.write(block)
            f.write(block[: (seconds % 60) * RATE])
        if r % 20 == 0:
            log(f"wrote recording {r + 1}/{recordings}")
    csv.write_text("\n".join(lines) + "\n")
    return csv


def prepare(folder: Path, recordings: int, segments: int, fmt: str, lhotse_python: str) -> tuple[Path, Path]:
    """The segment index and lhotse's cuts of the corpus (built once)."""
    csv = make_corpus(folder, recordings, segments, fmt)
    index = folder / "segments.parquet"
    if not index.exists():
        from audiotree.index import build_index

        log("indexing the segments (headers only, no loudness)")
        started = time.perf_counter()
        build_index([str(folder)], str(index), segments=str(csv), loudness=False, show_progress=False,
                    executor="process", max_workers=2)
        log(f"indexed in {time.perf_counter() - started:.1f} s")
    cuts = folder / "cuts.jsonl.gz"
    if not cuts.exists():
        from audiotree.index import export_lhotse

        rec, sup = export_lhotse(str(index), str(folder / "lhotse"))
        subprocess.run([lhotse_python, "-c", MAKE_CUTS, rec, sup, str(cuts)], check=True)
    return index, cuts


def run(python: str, script: str, args: list) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run([python, "-c", script, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def median(records: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in records]))


def render(cells: list[dict], machine: str, recordings: int, segments: int, want: int) -> str:
    version = cells[0]["lhotse"][0].get("version", "?")
    lines = [
        f"<!-- section:{SECTION} -->",
        "## Bucketed utterances from long recordings (segments) vs lhotse",
        "",
        f"Generated by `python benchmarks/bucketing_segments.py` ({time.strftime('%Y-%m-%d %H:%M')}, {machine}); "
        f"lhotse {version}. Corpus: {recordings} recordings of 10-60 min (8 kHz mono 16-bit WAV or FLAC) cut into {segments} "
        "segments of 0.5-20 s. Ours: a segment index, `create_audio_dataset(corpus=Corpus(index=...), duration=None)` + "
        "`batch_by_duration`; lhotse: `load_manifest(cuts)` + `DynamicBucketingSampler` + `collate_audio`. "
        "Fresh process per run, one thread, 0 workers, runs interleaved, medians. Start -> first batch: wall "
        f"seconds from the process's first line (imports included). Items / CPU-s: the first {want} items after "
        "the first batch. Efficiency and shapes: one whole epoch's batches.",
        "",
        "| format | buckets | max_duration | loader | start -> first batch (s) | items / CPU-s | padding efficiency "
        "| shapes | batches / epoch |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        for name in ("ours", "lhotse"):
            rs = cell[name]
            lines.append(f"| {cell['format']} | {cell['buckets']} | {cell['max_seconds']:g} s | {name} | {median(rs, 'startup_s'):.2f} "
                         f"| {median(rs, 'items') / median(rs, 'cpu_s'):.0f} | {median(rs, 'efficiency'):.3f} "
                         f"| {median(rs, 'shapes'):.0f} | {median(rs, 'batches'):.0f} |")
    lines.append("")
    for cell in cells:
        o, l = cell["ours"], cell["lhotse"]
        rate = (median(o, "items") / median(o, "cpu_s")) / (median(l, "items") / median(l, "cpu_s"))
        per_run = [(a["items"] / a["cpu_s"]) / (b["items"] / b["cpu_s"]) for a, b in zip(o, l)]
        lines.append(f"Ratios, {cell['format']} at {cell['buckets']} buckets (ours ÷ lhotse): items / CPU-s {rate:.2f}× "
                     f"(runs {min(per_run):.2f}–{max(per_run):.2f}×), start -> first "
                     f"batch {median(o, 'startup_s') / median(l, 'startup_s'):.2f}×, padding efficiency "
                     f"{median(o, 'efficiency') / median(l, 'efficiency'):.3f}×; shapes {median(o, 'shapes'):.0f} "
                     f"(configured {cell['buckets']}) vs {median(l, 'shapes'):.0f}.")
        lines.append("")
    lines.append(f"<!-- /section:{SECTION} -->")
    return "\n".join(lines) + "\n"


def rerender(path: Path, out: Path, recordings: int = 200, segments: int = 30000, want: int = 3000) -> None:
    """Rewrites the section from a saved ``bucketing-segments.json`` (no new runs)."""
    cells = json.loads(path.read_text())
    replace_section(out, SECTION, render(cells, f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}", recordings,
                                         segments, want))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="20 recordings, 1,500 segments, one run")
    ap.add_argument("--lhotse-python", default=None, help="a Python with lhotse (default: benchmarks/.venv-lhotse)")
    ap.add_argument("--runs", type=int, default=None, help="interleaved runs (default 3; quick 1)")
    ap.add_argument("--items", type=int, default=None, help="items timed per run (default 3000; quick 300)")
    ap.add_argument("--buckets", default="8", help="bucket counts, comma-separated")
    ap.add_argument("--max-seconds", type=float, default=200.0)
    ap.add_argument("--format", default="wav,flac", help="recording formats, comma-separated (a corpus each)")
    ap.add_argument("--out", default=None, help="report (default: BENCHMARKS.md; quick: benchmarks/.results/)")
    args = ap.parse_args(argv)
    recordings, segments = (20, 1500) if args.quick else (200, 30000)
    runs = args.runs or (1 if args.quick else 3)
    want = args.items or (300 if args.quick else 3000)
    python = args.lhotse_python
    if python is None:
        from bucketing import ensure_lhotse

        python = str(ensure_lhotse())
    cells = []
    for fmt, buckets in ((f, int(b)) for f in args.format.split(",") for b in args.buckets.split(",")):
        folder = RESULTS / f"segments-corpus-{fmt}{'-quick' if args.quick else ''}"
        index, cuts = prepare(folder, recordings, segments, fmt, python)
        cell = {"format": fmt.upper(), "buckets": buckets, "max_seconds": args.max_seconds, "ours": [], "lhotse": []}
        for r in range(runs):
            cell["ours"].append(run(sys.executable, OURS, [index, args.max_seconds, buckets, r, want]))
            cell["lhotse"].append(run(python, LHOTSE, [cuts, args.max_seconds, buckets, r, want]))
            log(f"K={buckets} run {r}: ours {cell['ours'][-1]} lhotse {cell['lhotse'][-1]}")
        cells.append(cell)
    report = render(cells, f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}", recordings, segments, want)
    (RESULTS / f"bucketing-segments{'-quick' if args.quick else ''}.json").write_text(json.dumps(cells, indent=1))
    out = Path(args.out) if args.out else (RESULTS / "bucketing-segments-quick.md" if args.quick else REPO / "BENCHMARKS.md")
    replace_section(out, SECTION, report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

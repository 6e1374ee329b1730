"""Duration bucketing, ours vs lhotse's ``DynamicBucketingSampler``, on the same durations.

    python benchmarks/bucketing.py            # full run; rewrites the bucketing section of BENCHMARKS.md
    python benchmarks/bucketing.py --quick    # smoke run (small corpus, one run), writes benchmarks/.results/
    python benchmarks/bucketing.py --segments # the segments corpus: loading, not just planning
                                              # (benchmarks/bucketing_segments.py; its own section)

lhotse lives in its own venv, ``benchmarks/.venv-lhotse`` (created on first use with
``pip install lhotse urllib3``); it never enters the dev venv. Both samplers get the same
durations (no audio is read: both plan from durations alone), the same ``max_duration``
and the same bucket count. Runs are interleaved (ours, lhotse, ours, ...) and timed
single-threaded, so the times are per CPU core; medians are reported.

Metrics, over one epoch:
* padding efficiency: real seconds / padded seconds (lhotse batches pad to their longest
  cut, ours to the bucket edge; our filler slots count as padding);
* batch size (items): min / mean / max and standard deviation;
* shapes: distinct ``(batch size, padded length)`` pairs, i.e. jit compilations;
* padded seconds per batch, max (what accelerator memory must hold);
* planning time for an epoch, and per batch.

Note the two meanings of ``max_duration``: lhotse bounds the *real* seconds of a batch,
ours the *padded* seconds (so a batch's memory is bounded by construction).
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
VENV = REPO / "benchmarks" / ".venv-lhotse"
SECTION = "bucketing"

LHOTSE_SCRIPT = r"""
import json, sys, time
import numpy as np
from lhotse import CutSet, MonoCut, Recording, AudioSource
from lhotse.dataset import DynamicBucketingSampler

durations = np.load(sys.argv[1])
max_duration, num_buckets, seed = float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rate = 16000
cuts = []
for i, d in enumerate(durations.tolist()):
    rec = Recording(id=f"r{i}", sources=[AudioSource(type="file", channels=[0], source=f"/none/{i}.wav")],
                    sampling_rate=rate, num_samples=int(round(d * rate)), duration=d)
    cuts.append(MonoCut(id=f"c{i}", start=0.0, duration=d, channel=0, recording=rec))
cutset = CutSet.from_cuts(cuts)
index = {c.id: i for i, c in enumerate(cuts)}
start = time.process_time()
sampler = DynamicBucketingSampler(cutset, max_duration=max_duration, num_buckets=num_buckets, shuffle=True, seed=seed)
batches = [[index[c.id] for c in batch] for batch in sampler]
planning = time.process_time() - start
print(json.dumps({"batches": batches, "planning_s": planning, "version": __import__("lhotse").__version__}))
"""


def log(msg: str) -> None:
    print(f"[bucketing] {msg}", file=sys.stderr, flush=True)


def ensure_lhotse() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        log(f"creating {VENV} (pip install lhotse urllib3)")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "lhotse", "urllib3"], check=True)
    return python


def corpus(kind: str, n: int, seed: int = 0) -> np.ndarray:
    """Utterance durations in [0.5, 20] s: uniform, or speech-like (log-normal, median ~4 s)."""
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        return rng.uniform(0.5, 20.0, n)
    return np.clip(np.exp(rng.normal(np.log(4.0), 0.6, n)), 0.5, 20.0)


def metrics(durations: np.ndarray, batches: list[np.ndarray], padded_to: list[float]) -> dict:
    real = padded = 0.0
    sizes, shapes, padded_seconds = [], set(), []
    for items, edge in zip(batches, padded_to):
        real_items = items[items >= 0]
        real += float(durations[real_items].sum())
        padded += items.size * edge
        padded_seconds.append(items.size * edge)
        sizes.append(int(real_items.size))
        shapes.add((int(items.size), round(edge, 4)))
    sizes = np.asarray(sizes)
    return {
        "efficiency": real / padded, "batches": len(batches), "size_min": int(sizes.min()),
        "size_mean": float(sizes.mean()), "size_max": int(sizes.max()), "size_std": float(sizes.std()),
        "shapes": len(shapes), "padded_s_max": float(max(padded_seconds)),
    }


def run_ours(durations: np.ndarray, max_seconds: float, buckets: int, seed: int) -> dict:
    from audiotree.sources.bucketing import BucketConfig, plan_buckets

    start = time.process_time()
    plan = plan_buckets(durations, BucketConfig(max_seconds=max_seconds, buckets=buckets), shuffle_seed=seed)
    epoch = plan.epoch(0)
    first = time.process_time() - start
    start = time.process_time()
    plan.epoch(1)
    again = time.process_time() - start
    edges = [float(plan.edges[b]) for b in epoch.buckets]
    out = metrics(durations, list(epoch.batches), edges)
    out.update(planning_s=first, replanning_s=again)
    return out


def run_lhotse(python: Path, durations_path: Path, durations: np.ndarray, max_seconds: float, buckets: int,
               seed: int) -> dict:
    proc = subprocess.run(
        [str(python), "-c", LHOTSE_SCRIPT, str(durations_path), str(max_seconds), str(buckets), str(seed)],
        capture_output=True, text=True, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"lhotse run failed:\n{proc.stderr[-3000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    batches = [np.asarray(b, dtype=np.int64) for b in data["batches"]]
    out = metrics(durations, batches, [float(durations[b].max()) for b in batches])
    out.update(planning_s=data["planning_s"], replanning_s=float("nan"), version=data["version"])
    return out


def median(records: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in records]))


def render(results: list[dict], machine: str) -> str:
    lines = [
        f"<!-- section:{SECTION} -->",
        "## Duration bucketing vs lhotse",
        "",
        f"Generated by `python benchmarks/bucketing.py` ({time.strftime('%Y-%m-%d %H:%M')}, {machine}); lhotse "
        f"{results[0]['lhotse'][0].get('version', '?')} in `benchmarks/.venv-lhotse`. Same durations, same "
        "`max_duration` and bucket count for both; medians of the interleaved runs; times are CPU seconds of one "
        "core. Efficiency = real / padded seconds over one epoch (ours pads to the bucket edge and counts filler "
        "slots as padding; lhotse pads to each batch's longest cut). Shapes = distinct (batch size, padded "
        "length) pairs = jit compilations. lhotse's `max_duration` bounds real seconds per batch, ours padded "
        "seconds, hence the padded-seconds column.",
        "",
        "| corpus | buckets | sampler | efficiency | batches | batch size min / mean / max (std) | shapes "
        "| max padded s / batch | planning, epoch (s) | per batch (µs) | next epoch (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for name, records in (("ours", r["ours"]), ("lhotse", r["lhotse"])):
            eff = median(records, "efficiency")
            plan_s = median(records, "planning_s")
            batches = median(records, "batches")
            replan = median(records, "replanning_s")
            lines.append(
                f"| {r['corpus']} ({r['items']} items, max_duration {r['max_seconds']:g} s) | {r['buckets']} | {name} "
                f"| {eff:.1%} | {batches:.0f} | {median(records, 'size_min'):.0f} / {median(records, 'size_mean'):.1f} / "
                f"{median(records, 'size_max'):.0f} ({median(records, 'size_std'):.1f}) | {median(records, 'shapes'):.0f} "
                f"| {median(records, 'padded_s_max'):.0f} | {plan_s:.3f} | {1e6 * plan_s / batches:.0f} "
                f"| {'—' if np.isnan(replan) else f'{replan:.3f}'} |"
            )
    lines += ["", "Ratios (ours ÷ lhotse, same row pair): efficiency "
              + ", ".join(f"{r['corpus']}/{r['buckets']}: {median(r['ours'], 'efficiency') / median(r['lhotse'], 'efficiency'):.3f}×"
                          for r in results)
              + "; planning time "
              + ", ".join(f"{r['corpus']}/{r['buckets']}: {median(r['ours'], 'planning_s') / median(r['lhotse'], 'planning_s'):.3f}×"
                          for r in results) + ".",
              "",
              "Batch sizes spread wider in ours by design: every batch of a bucket with edge `e` holds exactly "
              "`floor(max_duration / e)` slots, so the shortest bucket's batches are the largest; in exchange each "
              "bucket is one shape and no batch exceeds `max_duration` padded seconds.",
              f"<!-- /section:{SECTION} -->", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--segments" in argv:
        from bucketing_segments import main as segments_main

        argv.remove("--segments")
        return segments_main(argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small corpus, one run; writes benchmarks/.results/")
    ap.add_argument("--items", type=int, default=None, help="utterances per corpus (default 50000; quick 3000)")
    ap.add_argument("--runs", type=int, default=None, help="interleaved runs per cell (default 3; quick 1)")
    ap.add_argument("--max-seconds", type=float, default=200.0, help="max_duration for both samplers")
    ap.add_argument("--buckets", default="16,30", help="bucket counts, comma-separated (ours defaults to 16)")
    ap.add_argument("--out", default=None, help="report (default: BENCHMARKS.md; quick: benchmarks/.results/)")
    args = ap.parse_args(argv)
    items = args.items or (3000 if args.quick else 50000)
    runs = args.runs or (1 if args.quick else 3)
    python = ensure_lhotse()
    RESULTS.mkdir(parents=True, exist_ok=True)
    results = []
    for kind in ("uniform", "speech-like"):
        durations = corpus(kind, items)
        path = RESULTS / f"durations-{kind}.npy"
        np.save(path, durations)
        for buckets in (int(b) for b in args.buckets.split(",")):
            cell = {"corpus": kind, "items": items, "buckets": buckets, "max_seconds": args.max_seconds,
                    "ours": [], "lhotse": []}
            for run in range(runs):
                cell["ours"].append(run_ours(durations, args.max_seconds, buckets, seed=run))
                cell["lhotse"].append(run_lhotse(python, path, durations, args.max_seconds, buckets, seed=run))
                log(f"{kind} K={buckets} run {run}: ours {cell['ours'][-1]['efficiency']:.3f} "
                    f"lhotse {cell['lhotse'][-1]['efficiency']:.3f}")
            results.append(cell)
    machine = f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    report = render(results, machine)
    (RESULTS / ("bucketing-quick.json" if args.quick else "bucketing.json")).write_text(json.dumps(results, indent=1))
    out = Path(args.out) if args.out else (RESULTS / "bucketing-quick.md" if args.quick else REPO / "BENCHMARKS.md")
    replace_section(out, SECTION, report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

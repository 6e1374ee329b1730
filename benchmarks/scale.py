#!/usr/bin/env python
"""Scale-out costs measured here, and their extrapolation to a cluster.

    python benchmarks/scale.py           # ~5 min on 2 cores; rewrites the "Scale-out" section of BENCHMARKS.md
    python benchmarks/scale.py --quick   # small corpus, 1 run, prints only

What is measured (on the benchmark corpus of ``benchmarks/corpus.py``: 72 files
in WAV, FLAC, MP3 and OGG at 16 to 48 kHz, 0.4 s to 2 min), each configuration
run ``--runs`` times, interleaved, medians reported:

* per-file cost of the corpus index's per-file work, on one core: the header
  probe (duration, rate, channels, format; ``scan_durations``), and the
  integrated loudness of the first 30 s (``audiotree scan --loudness``);
* window-LUFS cache cost per hour of audio (``precompute_window_lufs``, 0.4 s cells);
* Ray: local cluster start and stop (``ray.init(num_cpus=2)``), the overhead
  of one task (a no-op chunk) and the header scan on Ray, a process pool and
  serially, as rates per core and as ratios.

The extrapolation to 10 million files / 50,000 hours on 100 nodes is computed
from these numbers with the assumptions printed next to it (see
docs/scaling.md for the reasoning).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import corpus as corpus_mod  # noqa: E402
from _sections import replace_section  # noqa: E402

SECTION = "scale"
BEGIN, END = f"<!-- section:{SECTION} -->", f"<!-- /section:{SECTION} -->"

# Assumptions of the extrapolation (docs/scaling.md explains each).
TARGET = {
    "files": 10_000_000, "hours": 50_000, "nodes": 100, "cores_per_node": 32, "parallel_efficiency": 0.7,
    "index_row_bytes": 110, "lufs_window_sec": 0.4, "hosts": 256, "batch_per_host": 32, "excerpt_s": 3.0,
    "sample_rate": 44_100, "encoded_kbps": 256,
}


def _median(values):
    return statistics.median(values) if values else float("nan")


def _noop(chunk):
    return len(chunk)


def measure(files: list[str], runs: int, log) -> dict:
    from audiotree.parallel import map_chunks, open_executor
    from audiotree.sources import precompute_window_lufs, scan_durations
    from audiotree.cli.scan import _loudness

    out: dict = {"files": len(files)}
    durations = scan_durations(files)  # warm the page cache: we measure decode work, not the disk
    out["audio_hours"] = sum(durations.values()) / 3600

    probe, loud, lufs_cache = [], [], []
    for _ in range(runs):
        t = time.perf_counter()
        scan_durations(files)
        probe.append((time.perf_counter() - t) / len(files))
        t = time.perf_counter()
        for path in files:
            _loudness(path, 30.0)
        loud.append((time.perf_counter() - t) / len(files))
        t = time.perf_counter()
        precompute_window_lufs(files, 0.4)
        lufs_cache.append((time.perf_counter() - t) / out["audio_hours"])
    out["probe_ms_per_file"] = _median(probe) * 1e3
    out["loudness30_ms_per_file"] = _median(loud) * 1e3
    out["window_lufs_s_per_audio_hour"] = _median(lufs_cache)
    log(f"per file: probe {out['probe_ms_per_file']:.2f} ms, loudness(30 s) {out['loudness30_ms_per_file']:.1f} ms; "
        f"window LUFS {out['window_lufs_s_per_audio_hour']:.1f} s per audio hour")

    import ray

    temp_dir = tempfile.mkdtemp(prefix="atbench", dir="/tmp")
    starts, stops, task_ms, rates = [], [], [], {"serial": [], "process": [], "ray": []}
    many = files * max(1, 2000 // len(files))  # enough files that a scan takes seconds
    with open_executor("process") as pool:
        for _ in range(runs):
            t = time.perf_counter()
            ray.init(num_cpus=2, _temp_dir=temp_dir, include_dashboard=False, log_to_driver=False)
            starts.append(time.perf_counter() - t)
            with open_executor("ray") as runner:
                map_chunks(_noop, [[0]] * 20, executor=runner)  # workers up
                n = 400
                t = time.perf_counter()
                map_chunks(_noop, [[0]] * n, executor=runner)
                task_ms.append((time.perf_counter() - t) / n * 1e3)
                for name, executor in (("serial", None), ("process", pool), ("ray", runner)):
                    scan_durations(files, executor=executor, show_progress=False)  # warm: workers import the readers
                    t = time.perf_counter()
                    scan_durations(many, executor=executor, show_progress=False)
                    rates[name].append(len(many) / (time.perf_counter() - t))
            t = time.perf_counter()
            ray.shutdown()
            stops.append(time.perf_counter() - t)
    out["ray_start_s"] = _median(starts)
    out["ray_stop_s"] = _median(stops)
    out["ray_task_overhead_ms"] = _median(task_ms)
    out["scan_files_per_s"] = {k: _median(v) for k, v in rates.items()}
    out["loadavg"] = os.getloadavg()[0]
    log(f"ray: start {out['ray_start_s']:.1f} s, stop {out['ray_stop_s']:.1f} s, {out['ray_task_overhead_ms']:.2f} ms "
        f"per task; scan files/s {out['scan_files_per_s']}")
    return out


def extrapolate(m: dict) -> dict:
    t = TARGET
    cores = t["nodes"] * t["cores_per_node"]
    per_file_s = (m["probe_ms_per_file"] + m["loudness30_ms_per_file"]) / 1e3
    chunk = max(1, min(1000, -(-t["files"] // (cores * 8))))
    task_share = m["ray_task_overhead_ms"] / 1e3 / chunk  # per file, on the driver
    index_s = t["files"] * per_file_s / (cores * t["parallel_efficiency"])
    probe_only_s = t["files"] * m["probe_ms_per_file"] / 1e3 / (cores * t["parallel_efficiency"])
    lufs_s = t["hours"] * m["window_lufs_s_per_audio_hour"] / (cores * t["parallel_efficiency"])
    step_item_bytes = t["excerpt_s"] * t["sample_rate"] * 4
    encoded_item_bytes = t["excerpt_s"] * t["encoded_kbps"] * 1000 / 8
    return {
        "cores": cores,
        "chunk_files": chunk,
        "tasks": -(-t["files"] // chunk),
        "index_minutes_probe_and_loudness": index_s / 60,
        "index_seconds_probe_only": probe_only_s,
        "files_per_node_hour": t["cores_per_node"] * t["parallel_efficiency"] * 3600 / per_file_s,
        "window_lufs_minutes": lufs_s / 60,
        # the driver's dispatch time per file over the cluster's wall time per file
        "driver_task_overhead_share": task_share / (per_file_s / (cores * t["parallel_efficiency"])),
        "index_gb": t["files"] * t["index_row_bytes"] / 1e9,
        "window_lufs_gb": t["hours"] * 3600 / t["lufs_window_sec"] * 4 / 1e9,
        "decoded_mb_per_step_per_host": t["batch_per_host"] * step_item_bytes / 1e6,
        "encoded_mb_per_step_per_host": t["batch_per_host"] * encoded_item_bytes / 1e6,
        "encoded_gb_per_step_pod": t["hosts"] * t["batch_per_host"] * encoded_item_bytes / 1e9,
    }


def render(m: dict, x: dict, runs: int, when: str | None = None) -> str:
    t = TARGET
    s = m["scan_files_per_s"]
    lines = [
        BEGIN,
        "## Scale-out (executors, Ray) and the cluster extrapolation",
        "",
        f"Generated by `python benchmarks/scale.py` ({when or f'{_dt.datetime.now():%Y-%m-%d %H:%M}'}, {runs} run(s), "
        "medians) "
        f"on this machine ({os.cpu_count()} cores shared with other jobs, load average {m['loadavg']:.1f} at the "
        f"end: read the ratios). Corpus: the benchmark corpus, {m['files']} files, {m['audio_hours']:.2f} h, "
        "page cache warm (so the probe measures parsing, not storage latency).",
        "",
        "| measured here | value |",
        "|---|---|",
        f"| header probe per file, one core (the index's per-file metadata) | {m['probe_ms_per_file']:.2f} ms |",
        f"| integrated loudness of the first 30 s per file, one core | {m['loudness30_ms_per_file']:.1f} ms |",
        f"| window-LUFS cache (0.4 s cells) per hour of audio, one core | {m['window_lufs_s_per_audio_hour']:.1f} s |",
        f"| Ray local cluster start (`ray.init(num_cpus=2)`) / shutdown | {m['ray_start_s']:.1f} s / "
        f"{m['ray_stop_s']:.1f} s |",
        f"| Ray overhead per task (no-op chunk, 2 workers, driver-side) | {m['ray_task_overhead_ms']:.2f} ms |",
        f"| header scan, files/s: serial / process pool (2) / Ray (2) | {s['serial']:.0f} / {s['process']:.0f} / "
        f"{s['ray']:.0f} |",
        f"| ratio process pool / serial; Ray / serial | {s['process'] / s['serial']:.2f}x; "
        f"{s['ray'] / s['serial']:.2f}x |",
        "",
        f"Extrapolation to {t['files']:,} files / {t['hours']:,} h on {t['nodes']} nodes x {t['cores_per_node']} "
        f"cores (assumed parallel efficiency {t['parallel_efficiency']}, files like ours, storage keeping up):",
        "",
        "| quantity | value |",
        "|---|---|",
        f"| chunk size (`auto_chunk_size`) and tasks | {x['chunk_files']} files, {x['tasks']:,} tasks |",
        f"| index build CPU, probe + 30 s loudness per file | {x['index_minutes_probe_and_loudness']:.1f} min "
        f"({x['files_per_node_hour'] / 1e6:.2f} M files per node-hour) |",
        f"| index build CPU, probe only (storage request rate bounds it, see docs/scaling.md) | "
        f"{x['index_seconds_probe_only']:.0f} s |",
        f"| window-LUFS cache of all {t['hours']:,} h, CPU | {x['window_lufs_minutes']:.1f} min |",
        f"| driver busy dispatching Ray tasks (share of wall time; 100% = driver-bound) | "
        f"{x['driver_task_overhead_share'] * 100:.1f}% |",
        f"| index size ({t['index_row_bytes']} B/row, Parquet) / window-LUFS cache (float32) | "
        f"{x['index_gb']:.1f} GB / {x['window_lufs_gb']:.1f} GB |",
        f"| bytes read per step per host ({t['batch_per_host']} x {t['excerpt_s']:g} s at {t['encoded_kbps']} kbit/s "
        f"encoded; decoded float32 at {t['sample_rate']} Hz) | {x['encoded_mb_per_step_per_host']:.2f} MB "
        f"({x['decoded_mb_per_step_per_host']:.1f} MB decoded) |",
        f"| bytes read per step, whole pod ({t['hosts']} hosts) | {x['encoded_gb_per_step_pod']:.2f} GB |",
        "",
        "See docs/scaling.md for the plan these numbers feed and the known limits.",
        END,
    ]
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    replace_section(path, SECTION, section)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small corpus, one run, print only")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    ap.add_argument("--from-json", default=None, help="re-render the section from a saved benchmarks/.results/scale.json")
    args = ap.parse_args(argv)
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        section = render(saved["measured"], extrapolate(saved["measured"]), saved.get("runs", args.runs),
                         when=saved.get("finished"))
        write_section(Path(args.out), section)
        print(section)
        return 0
    # The local cluster: loopback only, no usage stats, and an auth token from the environment
    # (Ray would otherwise save a new one under ~/.ray). Set before Ray is imported.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))
    log = lambda msg: print(f"[scale] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    spec = corpus_mod.QUICK_SPEC if args.quick else corpus_mod.FULL_SPEC
    folders = corpus_mod.build_corpus(HERE / ".corpus" / ("quick" if args.quick else "full"), spec, log=log)
    from audiotree.sources import find_audio_files

    files = sorted(str(p) for folder in folders.values() for p in find_audio_files(folder))
    runs = 1 if args.quick else args.runs
    measured = measure(files, runs, log)
    extrapolated = extrapolate(measured)
    section = render(measured, extrapolated, runs)
    print(section)
    (HERE / ".results").mkdir(exist_ok=True)
    (HERE / ".results" / "scale.json").write_text(json.dumps(
        {"measured": measured, "extrapolated": extrapolated, "assumptions": TARGET, "runs": runs,
         "finished": f"{_dt.datetime.now():%Y-%m-%d %H:%M}"}, indent=1))
    if not args.quick:
        write_section(Path(args.out), section)
        log(f"wrote the Scale-out section of {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

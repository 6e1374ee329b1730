#!/usr/bin/env python
"""Start-up, memory and items per CPU-second from corpus indexes of 100 to 10^7 rows (issue 22).

    python benchmarks/index_scale.py                          # 100, 10^5, 10^6, 10^7 rows; rewrites its BENCHMARKS.md section
    python benchmarks/index_scale.py --sizes 100,100000       # some sizes only
    python benchmarks/index_scale.py --quick --out /tmp/x.md  # smoke run: 100 and 10^4 rows, small corpus
    python benchmarks/index_scale.py --render                 # rewrite the section from the last results

The indexes (``benchmarks/index_synth.py``, cached in ``benchmarks/.corpus/index-scale``):
~100 real files indexed by ``build_index`` with loudness profiles, then their
rows repeated with pyarrow to ``rows`` rows, every column and the metadata as
``audiotree index`` wrote them; each row points at its own hard link to a real
file (up to ``--max-links`` rows, and where the file system's link limit and
the free disk allow), else at the real file itself (repeated paths).

Each configuration runs in a fresh interpreter (``--worker``), the dataset a
user writes for a large corpus::

    ds = create_balanced_audio_dataset(corpus=Corpus(index=INDEX, group_by="group"), weights=WEIGHTS, duration=3.0,
                                       sample_rate=16_000, excerpt=ExcerptConfig(strategy=STRATEGY))
    it = ds.to_iter_dataset(read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    it = it.batch(32, batch_fn=AudioTree.batch)      # + .mp_prefetch(num_workers=2) for 2 workers

for ``random`` and ``loudest`` (with the index's profiles), with 0 and 2
workers. Measured: interpreter start -> first batch (wall, from outside), the
CPU seconds of the whole process tree (user + sys of the process, its threads
and every worker) at the first batch, from interpreter start and from after
the imports; the tree's peak RSS (sampled every 50 ms from outside, a run
that passes ``--max-rss-gb`` is stopped); each worker's RSS and peak RSS after
the timed window; items per CPU-second of the tree over ``--batches`` batches
after the first (after the first 2k with k workers); the index file's size.
Before the runs of a size, one untimed run (``random``, 0 workers, one batch)
warms the page cache and anything the library caches beside the index.
Only the public API is used, so the same script measures any version of the
index's internals. ``benchmarks/index_startup.py`` compares an index with a
folder walk at 200,000 files; this script follows one index across sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import bench_worker  # noqa: E402  (protocol markers, tree CPU time)
from _sections import replace_section, wrap  # noqa: E402

SECTION = "index-scale"
WORK = HERE / ".corpus" / "index-scale"
RESULTS = HERE / ".results"
SIZES = (100, 100_000, 1_000_000, 10_000_000)
QUICK_SIZES = (100, 10_000)
STRATEGIES = ("random", "loudest")
WORKERS = (0, 2)
RATE, DURATION, BATCH = 16_000, 3.0, 32
WEIGHTS = {"speech": 0.5, "music": 0.3, "effects": 0.2}


# ---------------------------------------------------------------- one run (in its own interpreter)
def _status(pid: int | str = "self") -> dict:
    """VmRSS and VmHWM of a process, bytes (``{}`` if it is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def _workers() -> list[dict]:
    """RSS, peak RSS and PSS of each child process (Grain's workers; a resource tracker is named as such)."""
    import psutil

    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
            pss = child.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        st = _status(child.pid)
        kind = "resource_tracker" if "resource_tracker" in cmd else "forkserver" if "forkserver" in cmd else "worker"
        out.append({"pid": child.pid, "kind": kind, "rss": st.get("VmRSS"), "hwm": st.get("VmHWM"), "pss": pss})
    return out


def worker(strategy: str, workers: int, index: str, batches: int) -> None:
    cpu_start = bench_worker.tree_cpu_seconds()  # the interpreter's own start-up, before any import of ours
    import grain
    import numpy as np

    from audiotree import AudioTree, ExcerptConfig
    from audiotree.sources import Corpus, create_balanced_audio_dataset

    cpu_imports, t_imports = bench_worker.tree_cpu_seconds(), time.perf_counter()
    excerpt = ExcerptConfig(strategy=strategy)
    ds = create_balanced_audio_dataset(corpus=Corpus(index=index, group_by="group"), weights=WEIGHTS, duration=DURATION,
                                       sample_rate=RATE, excerpt=excerpt)
    cpu_built, t_built = bench_worker.tree_cpu_seconds(), time.perf_counter()
    rss_built = _status().get("VmRSS")
    it = ds.to_iter_dataset(read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    it = it.batch(BATCH, batch_fn=AudioTree.batch)
    if workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    it = iter(it)
    first = next(it)
    cpu_first, t_first = bench_worker.tree_cpu_seconds(), time.perf_counter()
    print(bench_worker.FIRST, flush=True)
    at_first = _workers()
    for _ in range(2 * workers - 1 if workers else 0):  # every worker past its start-up before the clock starts
        next(it)
    items = above = metered = 0
    cpu0, t0 = bench_worker.tree_cpu_seconds(), time.perf_counter()
    for _ in range(batches):
        batch = next(it)
        items += int(batch.waveform.shape[0])
        if strategy == "loudest" and batch.lufs is not None:
            lufs = np.asarray(batch.lufs, dtype=np.float64).reshape(-1)
            metered += lufs.size
            above += int((lufs > excerpt.lufs_cutoff).sum())
    cpu, wall = bench_worker.tree_cpu_seconds() - cpu0, time.perf_counter() - t0
    me = _status()
    result = {
        "first_batch_items": int(first.waveform.shape[0]), "build_s": t_built - t_imports,
        "after_imports_to_first_s": t_first - t_imports, "cpu_interpreter_s": cpu_start,
        "cpu_to_first_s": cpu_first, "cpu_after_imports_to_first_s": cpu_first - cpu_imports,
        "cpu_build_s": cpu_built - cpu_imports, "rss_built": rss_built, "parent_rss": me.get("VmRSS"),
        "parent_hwm": me.get("VmHWM"), "workers_at_first": at_first, "workers_end": _workers(),
        "items": items, "window_s": wall, "cpu_window_s": cpu, "items_per_cpu_s": items / cpu if cpu > 0 else None,
        "above_cutoff": above, "metered": metered,
    }
    print(bench_worker.RESULT, json.dumps(result), flush=True)
    bench_worker._shutdown()


# ---------------------------------------------------------------- the harness
def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _run(strategy: str, workers: int, index: Path, batches: int, *, timeout: float, max_rss: int, logs: Path,
         name: str) -> dict:
    import run as harness

    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", strategy, str(workers), str(index),
           str(batches)]
    env = harness.subprocess_env({"PYTHONPATH": str(REPO / "src")})
    raw = harness.run_process(cmd, env=env, timeout=timeout, log_path=logs / f"{name}.log", max_rss=max_rss)
    rec = {"strategy": strategy, "workers": workers, "first_batch_s": raw["first_batch_s"],
           "peak_rss": raw["peak_rss"], "seconds": raw.get("seconds"), "ok": raw["result"] is not None}
    if raw["result"] is not None:
        rec.update(raw["result"])
    else:
        rec["error"] = raw.get("error") or "failed"
    return rec


def _git_commit() -> str:
    try:
        sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "src"], capture_output=True,
                               text=True).stdout.strip()
        return sha + (" (src/ modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def measure(args) -> dict:
    import index_synth

    sys.path.insert(0, str(REPO / "src"))
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    base = index_synth.real_index(work, quick=args.quick, log=log)
    import pyarrow.parquet as pq

    base_table = pq.read_table(base, columns=["path", "duration"])
    base_paths = base_table.column("path").to_pylist()
    hours = sum(d or 0.0 for d in base_table.column("duration").to_pylist()) / 3600
    logs = RESULTS / "logs" / f"index-scale-{time.strftime('%Y%m%d-%H%M%S')}"
    data = {"label": args.label, "note": args.note, "commit": _git_commit(), "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "loadavg_start": os.getloadavg(), "cores": os.cpu_count(), "batches": args.batches,
            "base_files": len(base_paths), "base_hours": hours, "base_bytes": base.stat().st_size,
            "max_rss": args.max_rss, "quick": args.quick, "sizes": {}, "records": []}
    indexes = {}
    for rows in args.sizes:
        links, why = index_synth.link_budget(base_paths, rows, work, max_links=args.max_links)
        indexes[rows] = work / f"index-{rows}.parquet"
        t = time.perf_counter()
        made = index_synth.repeat_index(base, rows, indexes[rows], links=links, log=log)
        made.update(why_not_links=why or None, synth_s=time.perf_counter() - t, commit=data["commit"],
                    timeout=args.timeout)
        data["sizes"][str(rows)] = made
        log(f"{rows:,} rows: {made['paths']}{' (' + why + ')' if why else ''}, {made['bytes'] / 2**20:.1f} MB")
    # Runs outermost: every size and configuration once, then again, so a drift in the machine's load
    # spreads over all sizes instead of biasing one size against another.
    for run in range(args.runs):
        for rows, index in indexes.items():
            if run == 0 and not args.quick:
                warm = _run("random", 0, index, 0, timeout=args.timeout, max_rss=args.max_rss, logs=logs,
                            name=f"{rows}-warm")
                data["sizes"][str(rows)]["warm_run"] = {k: warm.get(k) for k in ("ok", "error", "first_batch_s",
                                                                                  "cpu_to_first_s")}
            for strategy in STRATEGIES:
                for workers in WORKERS:
                    rec = _run(strategy, workers, index, args.batches, timeout=args.timeout, max_rss=args.max_rss,
                               logs=logs, name=f"{rows}-{strategy}-{workers}w-{run}")
                    rec.update(rows=rows, run=run)
                    data["records"].append(rec)
                    if rec["ok"]:
                        log(f"run {run + 1}: {rows:,} {strategy} {workers}w: first batch {rec['first_batch_s']:.1f} s, "
                            f"{rec['cpu_to_first_s']:.1f} CPU-s, peak {rec['peak_rss'] / 2**20:.0f} MB, "
                            f"{rec['items_per_cpu_s']:.1f} items/CPU-s")
                    else:
                        log(f"run {run + 1}: {rows:,} {strategy} {workers}w: FAILED: {rec['error']} "
                            f"(peak {rec['peak_rss'] / 2**20:.0f} MB)")
    data["loadavg_end"] = os.getloadavg()
    data["finished"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    return data


def merge(old: dict, new: dict) -> dict:
    """``new``'s sizes and runs, plus ``old``'s of the sizes ``new`` did not measure."""
    mine = set(new["sizes"])
    out = dict(new, sizes={**{k: v for k, v in old["sizes"].items() if k not in mine}, **new["sizes"]})
    out["records"] = [r for r in old["records"] if str(r["rows"]) not in mine] + new["records"]
    out.update(started=min(old["started"], new["started"]), loadavg_start=old["loadavg_start"])
    if old["label"] != new["label"] or old["quick"] != new["quick"] or old["batches"] != new["batches"]:
        raise SystemExit("--merge: the last results have another --label, --quick or --batches; rerun every size")
    return out


# ---------------------------------------------------------------- the report
GOALS_NOTE = "2 workers, `random` and `loudest`"


def _median(values):
    import statistics

    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(data: dict) -> dict:
    """``{(rows, strategy, workers): medians}`` over the runs that reached a first batch."""
    out = {}
    for rec in data["records"]:
        out.setdefault((rec["rows"], rec["strategy"], rec["workers"]), []).append(rec)
    summary = {}
    for key, recs in out.items():
        ok = [r for r in recs if r["ok"]]
        if not ok:
            summary[key] = {"error": recs[-1].get("error"), "peak_rss": max(r["peak_rss"] for r in recs),
                            "seconds": max(r.get("seconds") or 0 for r in recs)}
            continue
        # Worker k of every run (by pid order), its figures the median over the runs.
        per_run = [sorted((w for w in r["workers_end"] if w["kind"] == "worker"), key=lambda w: w["pid"]) for r in ok]
        count = min(len(ws) for ws in per_run)
        workers = [{f: _median([ws[k][f] for ws in per_run]) for f in ("rss", "hwm", "pss")} for k in range(count)]
        summary[key] = {
            "runs": len(recs), "ok": len(ok),
            **{k: _median([r.get(k) for r in ok]) for k in (
                "first_batch_s", "cpu_to_first_s", "cpu_after_imports_to_first_s", "build_s", "peak_rss",
                "items_per_cpu_s", "parent_hwm")},
            "worker_rss": [w["rss"] for w in workers], "worker_hwm": [w["hwm"] for w in workers],
            "worker_pss": [w["pss"] for w in workers],
            "above": sum(r["above_cutoff"] for r in ok), "metered": sum(r["metered"] for r in ok),
            "per_cpu_range": (min(r["items_per_cpu_s"] for r in ok), max(r["items_per_cpu_s"] for r in ok)),
            "cpu_range": (min(r["cpu_to_first_s"] for r in ok), max(r["cpu_to_first_s"] for r in ok)),
        }
    return summary


def _mb(v) -> str:
    return "n/a" if v is None else f"{v / 2**20:,.0f}"


def _num(v, digits=1) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


def _verdict(ok) -> str:
    return "not measured" if ok is None else "HOLDS" if ok else "MISSES"


def goals(data: dict, s: dict) -> list[tuple[str, str, str]]:
    """(goal, measured, verdict) for issue 22's "Done means", for the sizes this run measured."""
    rows_out = []

    def get(rows, strategy, field, workers=2):
        return (s.get((rows, strategy, workers)) or {}).get(field)

    def add(goal, measured, ok):
        rows_out.append((goal, measured, _verdict(ok)))

    small = min((int(k) for k in data["sizes"]), default=None)
    for rows, cpu_goal, rss_goal in ((10_000_000, 10.0, 1.5), (1_000_000, 5.0, 1.0)):
        for strategy in STRATEGIES:
            key = (rows, strategy, 2)
            if key not in s:
                add(f"{rows:,} rows, `{strategy}`, 2 workers: start → first batch ≤ {cpu_goal:g} CPU-s of the tree",
                    "not measured", None)
                add(f"{rows:,} rows, `{strategy}`, 2 workers: peak RSS of the tree ≤ {rss_goal:g} GB", "not measured",
                    None)
                continue
            e = s[key]
            if "error" in e:
                add(f"{rows:,} rows, `{strategy}`, 2 workers: start → first batch ≤ {cpu_goal:g} CPU-s of the tree",
                    f"no first batch ({e['error']})", False)
                add(f"{rows:,} rows, `{strategy}`, 2 workers: peak RSS of the tree ≤ {rss_goal:g} GB",
                    f"≥ {e['peak_rss'] / 2**30:.2f} GB before it was stopped", e["peak_rss"] <= rss_goal * 2**30)
                continue
            add(f"{rows:,} rows, `{strategy}`, 2 workers: start → first batch ≤ {cpu_goal:g} CPU-s of the tree",
                f"{e['cpu_to_first_s']:.1f} CPU-s ({e['cpu_after_imports_to_first_s']:.1f} after the imports)",
                e["cpu_to_first_s"] <= cpu_goal)
            add(f"{rows:,} rows, `{strategy}`, 2 workers: peak RSS of the tree ≤ {rss_goal:g} GB",
                f"{e['peak_rss'] / 2**30:.2f} GB", e["peak_rss"] <= rss_goal * 2**30)
            if rows == 10_000_000:
                ref = s.get((small, strategy, 2)) or {}
                if e["worker_rss"] and ref.get("worker_rss"):
                    grow = max(e["worker_rss"]) - max(ref["worker_rss"])
                    add(f"10,000,000 rows, `{strategy}`: each worker within 100 MB of its {small}-row RSS",
                        f"{grow / 2**20:+.0f} MB", grow <= 100 * 2**20)
                ratio = e["items_per_cpu_s"] / ref["items_per_cpu_s"] if ref.get("items_per_cpu_s") else None
                add(f"10,000,000 rows, `{strategy}`: items per CPU-second ≥ 0.9× the {small}-row run",
                    "n/a" if ratio is None else f"{ratio:.2f}×", None if ratio is None else ratio >= 0.9)
    lo, ra = get(10_000_000, "loudest", "items_per_cpu_s"), get(10_000_000, "random", "items_per_cpu_s")
    add("10,000,000 rows, 2 workers: `loudest` ≥ 0.9× `random`'s items per CPU-second",
        "not measured" if not (lo and ra) else f"{lo / ra:.2f}×", None if not (lo and ra) else lo / ra >= 0.9)
    # Repeated rows compress far better than distinct files (Parquet's dictionary and zstd find the
    # repeats), so the verdict uses the real index's bytes per row; the repeated file is shown beside it.
    distinct = data["base_bytes"] / data["base_files"] * 1_000_000
    size = (data["sizes"].get(str(1_000_000)) or {}).get("bytes")
    written = "" if size is None else f"; the file of 1,000,000 repeated rows written here: {size / 2**20:.0f} MB"
    add("index of 1,000,000 rows ≤ 200 MB (half of 400 MB)",
        f"{distinct / 2**20:,.0f} MB for 1,000,000 distinct files (the real {data['base_files']}-file index's "
        f"{data['base_bytes'] / data['base_files']:,.0f} bytes per row){written}", distinct <= 200 * 2**20)
    return rows_out


def render(data: dict) -> str:
    s = summarize(data)
    sizes = sorted(int(k) for k in data["sizes"])
    small = sizes[0] if sizes else None
    commits = ", ".join(dict.fromkeys(data["sizes"][str(r)].get("commit", data["commit"]) for r in sizes))
    runs = max((r["run"] for r in data["records"]), default=0) + 1
    lines = [
        "## Index scale (issue 22)",
        "",
        f"**{data['label']}.** Generated by `python benchmarks/index_scale.py{' --quick' if data['quick'] else ''}"
        f"{' --sizes ' + ','.join(map(str, sizes)) if not data['quick'] else ''}` on {data['started']} UTC at commit "
        f"{commits} ({data['cores']} cores, shared with other jobs: load average "
        f"{data['loadavg_start'][0]:.1f} at the start, {data['loadavg_end'][0]:.1f} at the end; read the ratios and "
        "the CPU seconds, not the wall times). Each index repeats the rows of a real index of "
        f"{data['base_files']} files ({data['base_hours'] * 60:.0f} min of audio: speech, music, effects; WAV, FLAC, "
        "MP3, OGG; 16 to 48 kHz; loudness profiles) with every column and the metadata as `audiotree index` wrote "
        "them. `create_balanced_audio_dataset(corpus=Corpus(index=..., group_by=\"group\"), weights=..., duration=3.0, "
        "sample_rate=16000, excerpt=ExcerptConfig(strategy=...))`, sync reads, batches of 32, `mp_prefetch` for 2 "
        "workers; one fresh interpreter per row"
        + (f", medians of {runs} runs (every size and configuration once, then again)" if runs > 1 else "")
        + f". Items per CPU-second over {data['batches']} batches after the first (the first 4 with 2 workers).",
        "",
        "| rows | rows point at | index file (MB) |",
        "|---|---|---|",
    ]
    for rows in sizes:
        info = data["sizes"][str(rows)]
        why = f" ({info['why_not_links']})" if info.get("why_not_links") else ""
        mb = info["bytes"] / 2**20
        lines.append(f"| {rows:,} | {info['paths']}{why} | {mb:,.1f} |" if mb >= 10 else
                     f"| {rows:,} | {info['paths']}{why} | {mb:.3f} |")
    lines += [
        "",
        "| rows | strategy | workers | start → 1st batch, wall (s) | CPU-s of the tree to the 1st batch: from "
        "interpreter start / after the imports | building the dataset, wall (s) | peak RSS of the tree (MB) | "
        "each worker: RSS / peak RSS (MB) | items per CPU-s | vs the "
        f"{small}-row run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rows in sizes:
        for strategy in STRATEGIES:
            for workers in WORKERS:
                e = s.get((rows, strategy, workers))
                if e is None:
                    continue
                head = f"| {rows:,} | `{strategy}` | {workers} |"
                if "error" in e:
                    lines.append(f"{head} no first batch: {e['error']} | — | — | ≥ {_mb(e['peak_rss'])} | — | — | — |")
                    continue
                ref = s.get((small, strategy, workers)) or {}
                ratio = (f"{e['items_per_cpu_s'] / ref['items_per_cpu_s']:.2f}×" if ref.get("items_per_cpu_s")
                         and e.get("items_per_cpu_s") else "—")
                each = ", ".join(f"{_mb(r)} / {_mb(h)}" for r, h in zip(e["worker_rss"], e["worker_hwm"])) or "—"
                lo, hi = e["per_cpu_range"]
                spread = f" ({lo:,.0f}–{hi:,.0f})" if e["ok"] > 1 else ""
                lines.append(
                    f"{head} {_num(e['first_batch_s'])} | {_num(e['cpu_to_first_s'])} / "
                    f"{_num(e['cpu_after_imports_to_first_s'])} | {_num(e['build_s'], 2)} | {_mb(e['peak_rss'])} | "
                    f"{each} | {_num(e['items_per_cpu_s'], 0)}{spread} | {ratio} |")
    loud = [(rows, e) for (rows, strategy, _), e in sorted(s.items()) if strategy == "loudest" and e.get("metered")]
    lines += ["", f"| goal (issue 22, \"Done means\"; {GOALS_NOTE}) | measured | verdict |", "|---|---|---|"]
    lines += [f"| {g} | {m} | {v} |" for g, m, v in goals(data, s)]
    if loud:
        share = sum(e["above"] for _, e in loud) / sum(e["metered"] for _, e in loud)
        lines += ["", f"`loudest` items above the cutoff (-40 LUFS), over every timed `loudest` batch: "
                      f"{100 * share:.1f} % (the corpus has mostly silent files; benchmarks/loudest.py measures "
                      "the sparse-file share)."]
    if data.get("note"):
        lines += ["", data["note"]]
    lines += [
        "",
        "CPU seconds are user + system of the process and every live descendant (Grain's spawned workers and "
        "Python's resource tracker), read in the run's process; \"from interpreter start\" includes importing "
        "audiotree, Grain and JAX (about as much as the rest at 100 rows), \"after the imports\" is what the index "
        "and the dataset cost. Peak RSS of the tree is the sum of the processes' RSS, sampled every 50 ms; a worker's "
        "RSS counts the pages of memory-mapped files it has touched, so it is an upper bound on what it holds alone. "
        "A row that did not reach its first batch reports the peak until it was stopped "
        f"(at {data.get('max_rss', 0) / 2**30:.0f} GB of RSS, or at its time limit: the machine is shared). The index "
        "files of repeated rows are small because Parquet's dictionary encoding and zstd find the repeats; the real "
        "index's bytes per row say what an index of distinct files weighs.",
    ]
    return "\n".join(lines) + "\n"


def _write(data: dict, out: Path) -> None:
    replace_section(out, SECTION, wrap(SECTION, render(data)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=None, help="comma-separated row counts (default 100,100000,1000000,10000000)")
    ap.add_argument("--quick", action="store_true", help="100 and 10,000 rows from a 12-file corpus, 2 batches")
    ap.add_argument("--runs", type=int, default=1, help="runs per configuration (medians)")
    ap.add_argument("--batches", type=int, default=None, help="timed batches after the first (default 30; quick 2)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a run may take before it is stopped")
    ap.add_argument("--max-rss-gb", type=float, default=6.0, help="stop a run whose process tree passes this RSS")
    ap.add_argument("--max-links", type=int, default=None, help="most hard links to make (default 1,000,000)")
    ap.add_argument("--label", default="", help="what the numbers describe, e.g. 'before the column store'")
    ap.add_argument("--note", default="", help="a paragraph to print under the tables (what the run shows)")
    ap.add_argument("--work", default=str(WORK), help="where the corpus, links and indexes are cached")
    ap.add_argument("--out", default=None, help="the Markdown file whose section to write (default BENCHMARKS.md; "
                                                "quick: benchmarks/.results/index_scale_quick.md)")
    ap.add_argument("--no-write", action="store_true", help="print the section only")
    ap.add_argument("--merge", action="store_true", help="keep the other sizes of the last results (runs of "
                                                         "different sizes may take different --timeout)")
    ap.add_argument("--render", action="store_true", help="rewrite the section from benchmarks/.results/index_scale.json")
    ap.add_argument("--worker", nargs=4, metavar=("STRATEGY", "WORKERS", "INDEX", "BATCHES"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        strategy, workers, index, batches = args.worker
        worker(strategy, int(workers), index, int(batches))
        return 0
    import index_synth

    results = RESULTS / ("index_scale_quick.json" if args.quick else "index_scale.json")
    out = Path(args.out) if args.out else (RESULTS / "index_scale_quick.md" if args.quick else REPO / "BENCHMARKS.md")
    if args.render:
        data = json.loads(results.read_text())
        if args.note:
            data["note"] = args.note
            results.write_text(json.dumps(data, indent=1))
    else:
        args.sizes = tuple(int(x) for x in args.sizes.split(",")) if args.sizes else (
            QUICK_SIZES if args.quick else SIZES)
        args.batches = args.batches if args.batches is not None else (2 if args.quick else 30)
        args.max_links = index_synth.MAX_LINKS if args.max_links is None else args.max_links
        args.max_rss = int(args.max_rss_gb * 2**30)
        args.label = args.label or ("smoke run" if args.quick else "a run")
        data = measure(args)
        if args.merge and results.exists():
            data = merge(json.loads(results.read_text()), data)
        RESULTS.mkdir(parents=True, exist_ok=True)
        results.write_text(json.dumps(data, indent=1))
    section = render(data)
    print(section)
    if not args.no_write:
        out.parent.mkdir(parents=True, exist_ok=True)
        _write(data, out)
        log(f"wrote the section {SECTION!r} of {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

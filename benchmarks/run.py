#!/usr/bin/env python
"""audiotree benchmarks: ours vs the published audiotree 1.0.0 vs the physical floor.

    python benchmarks/run.py            # full run, rewrites BENCHMARKS.md (~12 min on 2 cores)
    python benchmarks/run.py --quick    # smoke run: tiny corpus, ours + floor, 1 run

Run it with the dev venv (``audiotree`` installed, plus ``psutil`` and
``loudness``). See BENCHMARKS.md for the method; in short:

1. A deterministic synthetic corpus (``benchmarks/corpus.py``) is built once
   and cached under ``benchmarks/.corpus/``.
2. The reference, ``audiotree==1.0.0`` from PyPI, lives in its own venv
   ``benchmarks/.venv-reference/`` (created here if missing; torch is
   constrained to 2.13.0 should anything ask for it).
3. Every configuration runs ours, the reference and the floor *interleaved*
   (A, B, C, A, B, C, ...), each run in a fresh interpreter
   (``benchmarks/bench_worker.py``), and we report medians and ratios. While a
   run is alive the harness samples the RSS of its whole process tree and
   times interpreter start to the first batch from outside.
4. First run in a fresh venv: ours is pip-installed from this repo into a
   throwaway venv; the reference's first run is emulated with an empty
   ``NUMBA_CACHE_DIR``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORKER = HERE / "bench_worker.py"
REF_VENV = HERE / ".venv-reference"
FRESH_VENV = HERE / ".venv-fresh-ours"
RESULTS = HERE / ".results"
CORPUS_ROOT = HERE / ".corpus"
REFERENCE_PIN = "audiotree==1.0.0"
TORCH_PIN = "torch==2.13.0"

sys.path.insert(0, str(HERE))
import bench_worker  # noqa: E402  (shared protocol constants and configs)
import corpus as corpus_mod  # noqa: E402

IMPLS = ("ours", "reference", "floor", "torch")


@dataclasses.dataclass(frozen=True)
class Group:
    """One configuration; its impls run interleaved."""

    key: str
    label: str
    config: str
    workers: int
    impls: tuple[str, ...]
    batches: int


def groups_for(args) -> list[Group]:
    rb, lb = (args.batches, args.batches) if args.batches else (80, 40)
    three = ("ours", "reference", "floor")
    return [
        Group("random_0w", "random 3 s @44.1k, 0 workers", "random", 0, three, rb),
        Group("random_2w", "random 3 s @44.1k, 2 workers", "random", 2, three, rb),
        Group("loudest_0w", "balanced loudest 3 s @48k, 0 workers", "loudest", 0, three, lb),
        Group("loudest_2w", "balanced loudest 3 s @48k, 2 workers", "loudest", 2, three + ("torch",), lb),
    ]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------- one run
def _tree_rss(proc) -> int:
    import psutil

    total = 0
    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def _end_group(pid: int) -> None:
    """Ends the process group this harness started for one run (its id is the run's pid)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_process(cmd: list[str], *, env: dict, timeout: float, log_path: Path, cwd: Path = REPO,
                sample_rss: bool = True, stop_at_first_batch: bool = False) -> dict:
    """Runs ``cmd``; returns first-batch time, parsed result, peak tree RSS, errors."""
    import psutil

    out: dict = {"first_batch_s": None, "result": None, "peak_rss": 0, "returncode": None}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=cwd, start_new_session=True,
        )
        first = threading.Event()
        done = threading.Event()

        def reader():
            for line in proc.stdout:
                if line.startswith(bench_worker.FIRST):
                    out["first_batch_s"] = time.monotonic() - t0
                    first.set()
                elif line.startswith(bench_worker.RESULT):
                    out["result"] = json.loads(line[len(bench_worker.RESULT):])
            done.set()

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        ps = psutil.Process(proc.pid)
        deadline = t0 + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            if stop_at_first_batch and first.is_set():
                break
            if sample_rss:
                out["peak_rss"] = max(out["peak_rss"], _tree_rss(ps))
            time.sleep(0.05)
        timed_out = proc.poll() is None and not (stop_at_first_batch and first.is_set())
        if proc.poll() is None:
            try:
                proc.wait(timeout=0 if stop_at_first_batch else 5)
            except subprocess.TimeoutExpired:
                pass
        _end_group(proc.pid)
        proc.wait()
        done.wait(timeout=10)
        out["returncode"] = proc.returncode
        out["seconds"] = time.monotonic() - t0
    if timed_out:
        out["error"] = f"timed out after {timeout:.0f} s"
    elif out["result"] is None and not (stop_at_first_batch and out["first_batch_s"] is not None):
        out["error"] = _error_summary(log_path)
    return out


def _error_summary(log_path: Path) -> str:
    lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    lines = [ln for ln in lines if "libmpg123" not in ln and "resource_tracker" not in ln]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln:
            return ln[:300]
    return (lines[-1] if lines else "no output")[:300]


def subprocess_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.update(extra or {})
    return env


def python_for(impl: str) -> str:
    return str(REF_VENV / "bin" / "python") if impl == "reference" else sys.executable


def run_one(impl: str, group: Group, corpus_dir: str, *, run: int, timeout: float, logs: Path) -> dict:
    cmd = [
        python_for(impl), str(WORKER), "--impl", impl, "--config", group.config, "--workers", str(group.workers),
        "--corpus", corpus_dir, "--batches", str(group.batches),
    ]
    raw = run_process(cmd, env=subprocess_env(), timeout=timeout, log_path=logs / f"{group.key}-{impl}-{run}.log")
    rec = {"impl": impl, "group": group.key, "run": run, "ok": raw["result"] is not None,
           "first_batch_s": raw["first_batch_s"], "peak_rss": raw["peak_rss"], "wall_s": raw.get("seconds")}
    if raw["result"] is not None:
        rec.update(items_per_s=raw["result"]["items_per_s"], cpu_seconds=raw["result"]["cpu_seconds"],
                   window_s=raw["result"]["seconds"], versions=raw["result"]["versions"])
    else:
        rec["error"] = raw.get("error") or "failed"
        text = (logs / f"{group.key}-{impl}-{run}.log").read_text(errors="replace")
        rec["unavailable"] = impl == "torch" and ("ImportError" in text or "ModuleNotFoundError" in text)
    return rec


# --------------------------------------------------------------- reference
def write_constraints() -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "constraints.txt"
    path.write_text(TORCH_PIN + "\n")  # never let pip pick another torch
    return path


def _pip_list(python: Path) -> list[str]:
    res = subprocess.run([str(python), "-m", "pip", "list", "--format", "json"], capture_output=True, text=True)
    try:
        return [f"{p['name']}=={p['version']}" for p in json.loads(res.stdout)]
    except ValueError:
        return []


def ensure_reference() -> dict:
    """Creates the reference venv if missing; returns {ok, note, packages}."""
    py = REF_VENV / "bin" / "python"
    check = [str(py), "-c", "import audiotree, psutil; print(audiotree.__version__)"]
    if py.exists() and subprocess.run(check, capture_output=True, text=True).stdout.strip() == "1.0.0":
        return {"ok": True, "created": False, "packages": _pip_list(py)}
    log(f"creating the reference venv {REF_VENV.relative_to(REPO)} ({REFERENCE_PIN}) ...")
    shutil.rmtree(REF_VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(REF_VENV)], check=True)
    res = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", str(write_constraints()),
         REFERENCE_PIN, "psutil"], capture_output=True, text=True,
    )
    if res.returncode != 0:
        return {"ok": False, "created": True, "note": "pip install failed: " + res.stderr.strip().splitlines()[-1][:300]}
    version = subprocess.run(check, capture_output=True, text=True).stdout.strip()
    return {"ok": version == "1.0.0", "created": True, "packages": _pip_list(py),
            "note": None if version == "1.0.0" else f"import check printed {version!r}"}


# --------------------------------------------------------------- fresh venv
FIRST_RUN_CODE = """
import os
{absl}from audiotree import AudioTree
from audiotree.sources import ExcerptConfig, create_balanced_audio_dataset
ds = create_balanced_audio_dataset({folders!r}, weights={weights!r}, duration=3.0, sample_rate=48000,
    excerpt=ExcerptConfig(strategy="loudest", lufs_cutoff=-40, num_tries=5))
it = iter(ds.to_iter_dataset().batch(32, batch_fn=AudioTree.batch))
next(it)
print({marker!r}, flush=True)
os._exit(0)
"""


def _first_run(python: str, folders: dict, *, reference: bool, env_extra: dict, name: str, logs: Path) -> dict:
    code = FIRST_RUN_CODE.format(
        absl="from absl import flags\nflags.FLAGS.mark_as_parsed()\n" if reference else "",
        folders=folders, weights=corpus_mod.WEIGHTS, marker=bench_worker.FIRST,
    )
    with tempfile.TemporaryDirectory() as cwd:
        raw = run_process([python, "-c", code], env=subprocess_env(env_extra), timeout=600,
                          log_path=logs / f"{name}.log", cwd=Path(cwd), sample_rss=False, stop_at_first_batch=True)
    return {"seconds": raw["first_batch_s"], "error": raw.get("error")}


def fresh_venv_runs(folders: dict, ref_ok: bool, logs: Path) -> dict:
    out: dict = {}
    log(f"fresh venv: pip install ours from the repo into {FRESH_VENV.relative_to(REPO)} ...")
    shutil.rmtree(FRESH_VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(FRESH_VENV)], check=True)
    t = time.monotonic()
    res = subprocess.run(
        [str(FRESH_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "-c", str(write_constraints()), str(REPO)], capture_output=True, text=True,
    )
    out["ours_install_s"] = time.monotonic() - t
    if res.returncode != 0:
        out["ours"] = {"seconds": None, "error": "pip install failed: " + (res.stderr.strip().splitlines() or ["?"])[-1][:300]}
    else:
        py = str(FRESH_VENV / "bin" / "python")
        out["ours"] = _first_run(py, folders, reference=False, env_extra={}, name="fresh-ours-1", logs=logs)
        out["ours_second"] = _first_run(py, folders, reference=False, env_extra={}, name="fresh-ours-2", logs=logs)
        out["ours_has_torch"] = any(p.lower().startswith("torch==") for p in _pip_list(FRESH_VENV / "bin" / "python"))
    log(f"fresh venv ours: first run {out['ours'].get('seconds')} s")
    if ref_ok:
        with tempfile.TemporaryDirectory() as numba_cache:
            env = {"NUMBA_CACHE_DIR": numba_cache}
            out["reference"] = _first_run(str(REF_VENV / "bin" / "python"), folders, reference=True, env_extra=env,
                                          name="fresh-reference-1", logs=logs)
            out["reference_second"] = _first_run(str(REF_VENV / "bin" / "python"), folders, reference=True,
                                                 env_extra=env, name="fresh-reference-2", logs=logs)
        log(f"fresh venv reference (empty NUMBA_CACHE_DIR): first run {out['reference'].get('seconds')} s")
    return out


# ------------------------------------------------------------------ report
def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def machine_info() -> dict:
    import psutil

    model = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cores": os.cpu_count(), "ram_gb": psutil.virtual_memory().total / 2**30, "cpu": model,
            "os": f"{platform.system()} {platform.release()}", "loadavg": os.getloadavg()}


def summarize(records: list[dict], groups: list[Group]) -> dict:
    """Medians per (group, impl) plus min/max spread."""
    summary: dict = {}
    for g in groups:
        for impl in g.impls:
            recs = [r for r in records if r["group"] == g.key and r["impl"] == impl]
            ok = [r for r in recs if r["ok"]]
            entry = {"runs": len(recs), "ok": len(ok)}
            if ok:
                rates = [r["items_per_s"] for r in ok]
                entry.update(
                    items_per_s=median(rates), min=min(rates), max=max(rates),
                    first_batch_s=median([r["first_batch_s"] for r in ok]),
                    peak_rss=median([r["peak_rss"] for r in ok]),
                    cores=median([r["cpu_seconds"] / r["window_s"] for r in ok]) if not g.workers else None,
                )
            elif recs:
                entry["error"] = recs[-1].get("error")
                entry["unavailable"] = all(r.get("unavailable") for r in recs)
            summary[f"{g.key}/{impl}"] = entry
    return summary


def _fmt(v, kind="rate"):
    if v is None:
        return "n/a"
    if kind == "rate":
        return f"{v:.0f}" if v >= 100 else f"{v:.1f}"
    if kind == "ratio":
        return f"{v:.2f}×"
    if kind == "mb":
        return f"{v / 2**20:.0f} MB"
    if kind == "s":
        return f"{v:.1f} s" if v >= 10 else f"{v:.2f} s"
    return str(v)


def _ratio(a, b):
    return a / b if a is not None and b else None


def _cell(summary, key, field="items_per_s", kind="rate", skipped=False):
    e = summary.get(key)
    if e is None:
        return "skipped" if skipped else "—"
    if e.get(field) is None:
        if e.get("unavailable"):
            return "n/a (not importable)"
        return "skipped" if skipped else ("error" if "error" in e else "n/a")
    return _fmt(e[field], kind)


def build_tables(summary: dict, fresh: dict | None, ref_skipped: bool) -> tuple[list[list[str]], dict]:
    """Rows of the main table and the numbers the targets use."""
    def val(key, field="items_per_s"):
        e = summary.get(key) or {}
        return e.get(field)

    rows, nums = [], {}
    for key, label in (
        ("random_0w", "random 3 s @44.1k, 0 workers (items/s)"),
        ("random_2w", "random 3 s @44.1k, 2 workers (items/s)"),
        ("loudest_0w", "balanced loudest 3 s @48k, 0 workers (items/s)"),
        ("loudest_2w", "balanced loudest 3 s @48k, 2 workers (items/s)"),
    ):
        o, r, f = val(f"{key}/ours"), val(f"{key}/reference"), val(f"{key}/floor")
        nums[key] = (o, r, f)
        rows.append([label, _cell(summary, f"{key}/ours"), _cell(summary, f"{key}/reference", skipped=ref_skipped),
                     _cell(summary, f"{key}/floor"), _fmt(_ratio(o, r), "ratio"), _fmt(_ratio(o, f), "ratio")])
    t, r, f = val("loudest_2w/torch"), val("loudest_2w/reference"), val("loudest_2w/floor")
    nums["torch_2w"] = (t, r, f)
    rows.append(["our torch DataLoader, balanced loudest, 2 workers (items/s; reference/floor: their 2-worker rows)",
                 _cell(summary, "loudest_2w/torch"), _cell(summary, "loudest_2w/reference", skipped=ref_skipped),
                 _cell(summary, "loudest_2w/floor"), _fmt(_ratio(t, r), "ratio"), _fmt(_ratio(t, f), "ratio")])
    for cfg, label in (("random", "random"), ("loudest", "balanced loudest")):
        s = [_ratio(val(f"{cfg}_2w/{i}"), val(f"{cfg}_0w/{i}")) for i in ("ours", "reference", "floor")]
        nums[f"scaling_{cfg}"] = tuple(s)
        rows.append([f"{label}: 2-worker rate / 0-worker rate", _fmt(s[0], "ratio"),
                     _fmt(s[1], "ratio") if not ref_skipped else "skipped", _fmt(s[2], "ratio"), "", ""])
    o, r, f = val("loudest_2w/ours", "peak_rss"), val("loudest_2w/reference", "peak_rss"), val("loudest_2w/floor", "peak_rss")
    nums["rss"] = (o, r, f)
    rows.append(["peak RSS of the process tree, loudest 2 workers", _fmt(o, "mb"),
                 _fmt(r, "mb") if not ref_skipped else "skipped", _fmt(f, "mb"), _fmt(_ratio(o, r), "ratio"), _fmt(_ratio(o, f), "ratio")])
    o, r, f = (val("loudest_2w/ours", "first_batch_s"), val("loudest_2w/reference", "first_batch_s"),
               val("loudest_2w/floor", "first_batch_s"))
    nums["first_batch"] = (o, r, f)
    rows.append(["interpreter start → first batch, loudest 2 workers", _fmt(o, "s"),
                 _fmt(r, "s") if not ref_skipped else "skipped", _fmt(f, "s"), _fmt(_ratio(o, r), "ratio"), _fmt(_ratio(o, f), "ratio")])
    if fresh:
        o = (fresh.get("ours") or {}).get("seconds")
        r = (fresh.get("reference") or {}).get("seconds")
        nums["fresh"] = (o, r, None)
        rows.append(["first run in a fresh venv → first batch, loudest 0 workers", _fmt(o, "s"), _fmt(r, "s"),
                     "—", _fmt(_ratio(o, r), "ratio"), ""])
    else:
        nums["fresh"] = (None, None, None)
        rows.append(["first run in a fresh venv → first batch, loudest 0 workers", "skipped", "skipped", "—", "", ""])
    return rows, nums


def targets(nums: dict) -> list[tuple[str, str, str]]:
    """(target, measured, verdict)."""
    def verdict(value, ok):
        return "n/a" if value is None else ("HOLDS" if ok(value) else "MISSES")

    out = []
    o, r, f = nums["random_0w"]
    x = _ratio(o, r)
    out.append(("random (0 workers) ≥ 1.4× reference", _fmt(x, "ratio"), verdict(x, lambda v: v >= 1.4)))
    x = _ratio(o, f)
    out.append(("random (0 workers) within 5% of the floor (≥ 0.95× floor)", _fmt(x, "ratio"), verdict(x, lambda v: v >= 0.95)))
    for key, label in (("loudest_0w", "0 workers"), ("loudest_2w", "2 workers")):
        o, r, _ = nums[key]
        x = _ratio(o, r)
        out.append((f"balanced loudest ({label}) ≥ 4× reference", _fmt(x, "ratio"), verdict(x, lambda v: v >= 4.0)))
    for cfg in ("loudest", "random"):
        x = nums[f"scaling_{cfg}"][0]
        out.append((f"ours 2 workers ≥ 1.85× our 0-worker rate ({cfg})", _fmt(x, "ratio"), verdict(x, lambda v: v >= 1.85)))
    o, r, _ = nums["rss"]
    x = _ratio(o, r)
    out.append(("peak RSS with 2 workers ≤ 0.6× reference", _fmt(x, "ratio"), verdict(x, lambda v: v <= 0.6)))
    o, r, _ = nums["first_batch"]
    x = _ratio(o, r)
    out.append(("interpreter start → first batch ≤ 0.5× reference", _fmt(x, "ratio"), verdict(x, lambda v: v <= 0.5)))
    o = nums["fresh"][0]
    out.append(("first run in a fresh venv ≤ 3 s", _fmt(o, "s"), verdict(o, lambda v: v <= 3.0)))
    return out


def _md_table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _versions(records, impl):
    for r in records:
        if r["impl"] == impl and r.get("versions"):
            return r["versions"]
    return {}


def render(data: dict) -> str:
    args = data["args"]
    groups = [Group(**g) for g in data["groups"]]
    summary = summarize(data["records"], groups)
    ref_skipped = not data["reference"].get("ok")
    rows, nums = build_tables(summary, data.get("fresh"), ref_skipped)
    m = data["machine"]
    c = data["corpus"]
    mode = "quick (smoke) run" if args["quick"] else "full run"
    cmd = "python benchmarks/run.py" + (" --quick" if args["quick"] else "")
    parts = [
        "# Benchmarks",
        "",
        f"Generated by `{cmd}` ({mode}, {data['finished']}); every number below comes from that one run on one machine."
        " Do not edit by hand: rerun the harness.",
        "",
        "Ours is this repository's `audiotree` (dev venv); the reference is the published "
        f"`{REFERENCE_PIN}` in its own venv (`benchmarks/.venv-reference/`); the floor is a plain loop of soundfile "
        "seek+read, soxr resampling and the libloudness meter doing the same per-item work (`benchmarks/floor.py`).",
        "",
        "## Reproduce",
        "",
        "```bash",
        "# from the repository root, in the dev venv (audiotree installed, e.g. pip install -e '.[test]')",
        "pip install psutil loudness        # once: RSS sampling, and the floor's libloudness meter",
        "python benchmarks/run.py           # full run (~12 min on 2 cores), rewrites BENCHMARKS.md",
        "python benchmarks/run.py --quick   # smoke run (tests/test_benchmarks_smoke.py), writes benchmarks/.results/quick.md",
        "python benchmarks/profile_paths.py # per-item time breakdown (decode, meter, resample, ...) of ours and the floor",
        "```",
        "",
        "The reference venv is created on first use (`pip install audiotree==1.0.0 psutil`, torch constrained to "
        f"`{TORCH_PIN}`); the corpus is cached in `benchmarks/.corpus/`; per-run logs and raw JSON go to "
        "`benchmarks/.results/`. `--runs`, `--batches`, `--skip-reference` and `--skip-fresh` trade time for detail.",
        "",
        "## Results",
        "",
        f"Medians of {args['runs']} run(s) per cell. Ratios are ours ÷ other: above 1 is better for rates, "
        "below 1 is better for memory and time.",
        "",
        _md_table(["config", "ours", "reference 1.0.0", "floor", "ours/reference", "ours/floor"], rows),
        "",
        "## Targets",
        "",
        _md_table(["target", "measured", "verdict"], targets(nums)),
        "",
    ]
    # Detail: spread and CPU use.
    detail = []
    for g in groups:
        for impl in g.impls:
            e = summary.get(f"{g.key}/{impl}") or {}
            if e.get("items_per_s") is None:
                detail.append([g.label, impl, e.get("error", "n/a") or "n/a", "", "", "", ""])
                continue
            failed = f" ({e['runs'] - e['ok']} of {e['runs']} runs failed)" if e["ok"] < e["runs"] else ""
            detail.append([g.label, impl, f"{e['items_per_s']:.1f}", f"{e['min']:.1f}–{e['max']:.1f}{failed}",
                           f"{e['cores']:.2f}" if e.get("cores") is not None else "—",
                           _fmt(e["first_batch_s"], "s"), _fmt(e["peak_rss"], "mb")])
    parts += [
        "## Detail",
        "",
        "Per configuration and implementation: median items/s, min–max over the runs, CPU cores used by the main "
        "process during the timed window (0-worker runs; the default `ReadOptions` read with a thread pool, so this "
        "can exceed 1), "
        "interpreter start → first batch, and peak RSS of the process tree.",
        "",
        _md_table(["config", "impl", "items/s", "spread", "cores (main proc)", "start → 1st batch", "peak RSS"], detail),
        "",
    ]
    failures = [r for r in data["records"] if not r["ok"] and not r.get("unavailable")]
    if failures:
        parts += ["Failed runs (excluded from the medians; logs in `benchmarks/.results/logs/`):", ""]
        parts += [f"* {r['group']} {r['impl']} run {r['run'] + 1}: `{r.get('error')}`" for r in failures]
        parts.append("")
    fresh = data.get("fresh")
    if fresh:
        parts += [
            "First run in a fresh venv: " + (
                f"ours: `pip install .` into a new venv took {_fmt(fresh.get('ours_install_s'), 's')}, then the first "
                f"`python -c` run of the loudest 0-worker config took {_fmt((fresh.get('ours') or {}).get('seconds'), 's')} "
                f"to its first batch (second run: {_fmt((fresh.get('ours_second') or {}).get('seconds'), 's')}; "
                f"torch installed: {fresh.get('ours_has_torch')}). "
            ) + (
                f"Reference, with an empty `NUMBA_CACHE_DIR` to emulate its first run: "
                f"{_fmt((fresh.get('reference') or {}).get('seconds'), 's')} (second run, cache warm: "
                f"{_fmt((fresh.get('reference_second') or {}).get('seconds'), 's')})."
                if fresh.get("reference") else ""
            ),
            "",
        ]
    parts += [
        "## Where the time goes",
        "",
        "Targets that miss are analysed in [benchmarks/PROFILE.md](benchmarks/PROFILE.md): a per-item time "
        "breakdown of our paths and the floor's (`python benchmarks/profile_paths.py`), and what bounds them.",
        "",
        "## Method",
        "",
        f"* Corpus (`benchmarks/corpus.py`, signals from `audiotree.synth.synthesize`): {c['files']} files, "
        f"{c['bytes'] / 2**20:.0f} MB, {c['hours'] * 60:.0f} min of audio in three groups (speech, music, effects); "
        f"{c['under_2s']} files under 2 s, {c['from_30_to_120s']} from 30 to 120 s, the rest 2 to 30 s; formats "
        f"{', '.join(c['formats'])}; rates {', '.join(str(r) for r in c['rates'])} Hz; "
        f"{'mono and stereo' if len(c['channels']) > 1 else 'channels ' + str(c['channels'])}; near-silent gaps "
        f"everywhere and {c['mostly_silent']} files that are silent (-60 dB) outside one 4-12 s loud passage.",
        "* Configurations, as a user writes them: `create_audio_dataset([speech, music, effects], duration=3.0, "
        "sample_rate=44100, num_epochs=None)`; `create_balanced_audio_dataset({...}, weights={speech: 0.5, music: 0.3, "
        "effects: 0.2}, duration=3.0, sample_rate=48000, excerpt=ExcerptConfig(strategy=\"loudest\", lufs_cutoff=-40, "
        "num_tries=5))`; then `.to_iter_dataset().batch(32, batch_fn=AudioTree.batch)` with each library's default "
        "`ReadOptions` (what a user gets: Grain's 16 threads / 500 items for the reference; ours sizes its own, "
        "`audiotree.sources.memory.default_read_options`), and "
        "`.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))` for 2 workers. The reference "
        "gets `absl.flags.FLAGS.mark_as_parsed()` first (it needs it for `mp_prefetch` in a plain script). Our torch row "
        "uses `audiotree.torch` with `num_workers=2` over the same dataset.",
        f"* Items/s: {groups[0].batches} (random) / {groups[-1].batches} (loudest) batches of 32 timed after a "
        "warm-up (the first batch; with 2 workers the first 4, so both workers have started). Each run is a fresh interpreter; the implementations of a configuration run interleaved "
        f"(A, B, C, A, B, C, ...), {args['runs']} time(s) each, after {'one untimed warm-up run each' if not args['quick'] else 'no warm-up run'}.",
        "* Floor: one process for 0 workers; for 2 workers, two forked processes each run the loop and send their "
        "batches to the parent through a `multiprocessing.Queue`.",
        "* Peak RSS: the sum of RSS over the run's process and all its descendants, sampled every 50 ms by the "
        "harness (psutil). Start → first batch: wall time from `Popen` to the marker line the run prints after its "
        "first batch.",
        f"* Machine load average at start / end: {' / '.join(', '.join(f'{x:.1f}' for x in la) for la in (data['machine']['loadavg'], data['loadavg_end']))} "
        "(the machine is shared; hence medians, ratios and interleaving).",
        "",
        "## Machine and versions",
        "",
        f"* {m['cores']} cores, {m['ram_gb']:.0f} GB RAM, CPU: {m['cpu']}, {m['os']}",
    ]
    vrows = []
    for impl, label in (("ours", "ours"), ("reference", "reference"), ("floor", "floor")):
        v = _versions(data["records"], impl)
        if v:
            vrows.append([label, v.get("audiotree", "—"), v.get("python", "?"), v.get("numpy", "?"), v.get("grain", "—"),
                          v.get("jax", "—"), v.get("soundfile", "?"), v.get("soxr", "?"), v.get("libsndfile", "?")])
    if vrows:
        parts += ["", _md_table(["venv", "audiotree", "python", "numpy", "grain", "jax", "soundfile", "soxr", "libsndfile"], vrows)]
    tv = _versions(data["records"], "torch")
    fv = _versions(data["records"], "floor")
    extras = []
    if tv.get("torch"):
        extras.append(f"torch {tv['torch']}")
    if fv.get("meter"):
        extras.append(f"floor meter: {fv['meter']}")
    ref = data["reference"]
    if ref.get("packages"):
        pkgs = ref["packages"]
        heavy = [p for p in pkgs if p.split("==")[0].lower() in ("torch", "numba", "llvmlite", "librosa", "flax", "jaxloudnorm", "tensorstore", "scikit-learn")]
        extras.append(f"the reference venv holds {len(pkgs)} packages, among them {', '.join(heavy)} (no torch, no CUDA)"
                      if not any(p.lower().startswith(("torch==", "nvidia")) for p in pkgs)
                      else f"the reference venv holds {len(pkgs)} packages, among them {', '.join(heavy)}")
    if ref.get("note"):
        extras.append(f"reference: {ref['note']}")
    if extras:
        parts += ["", "* " + "\n* ".join(extras)]
    parts.append("")
    return "\n".join(parts)


# -------------------------------------------------------------------- main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny corpus, 1 run, 3 batches, ours + floor only, no venvs")
    ap.add_argument("--runs", type=int, default=None, help="runs per implementation and config (default 3; quick 1)")
    ap.add_argument("--batches", type=int, default=None, help="timed batches per run (default 80 random / 40 loudest; quick 3)")
    ap.add_argument("--skip-reference", action="store_true", help="ours + floor only")
    ap.add_argument("--skip-fresh", action="store_true", help="skip the fresh-venv first-run timings")
    ap.add_argument("--only", default=None, help="comma-separated config keys, e.g. loudest_0w,loudest_2w")
    ap.add_argument("--corpus-dir", default=None, help="where to build/cache the corpus (default benchmarks/.corpus/<full|quick>)")
    ap.add_argument("--out", default=None, help="report path (default: BENCHMARKS.md; quick: benchmarks/.results/quick.md)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per run before it is killed (default 600; quick 240)")
    ap.add_argument("--report-only", default=None, metavar="JSON", help="re-render a report from a saved results JSON")
    args = ap.parse_args(argv)
    if args.quick:
        args.skip_reference = args.skip_fresh = True
        args.runs = args.runs or 1
        args.batches = args.batches or 3
        args.timeout = args.timeout or 240
    args.runs = args.runs or 3
    args.timeout = args.timeout or 600
    return args


def _keep_scale_section(report: str, out_path: Path) -> str:
    """Carries over the section benchmarks/scale.py wrote (it has its own harness and run)."""
    begin, end = "<!-- scale:begin -->", "<!-- scale:end -->"
    old = out_path.read_text() if out_path.exists() else ""
    if begin in old and end in old:
        section = old[old.index(begin):old.index(end) + len(end)]
        return report.rstrip("\n") + "\n\n" + section + "\n"
    return report


def main(argv=None) -> int:
    args = parse_args(argv)
    default_out = RESULTS / "quick.md" if args.quick else REPO / "BENCHMARKS.md"
    out_path = Path(args.out) if args.out else default_out
    if args.report_only:
        data = json.loads(Path(args.report_only).read_text())
        out_path.write_text(render(data))
        print(render(data))
        return 0

    machine = machine_info()
    spec = corpus_mod.QUICK_SPEC if args.quick else corpus_mod.FULL_SPEC
    corpus_dir = Path(args.corpus_dir) if args.corpus_dir else CORPUS_ROOT / ("quick" if args.quick else "full")
    folders = corpus_mod.build_corpus(corpus_dir, spec, log=log)
    corpus_info = corpus_mod.describe(corpus_dir)
    log(f"corpus: {corpus_info['files']} files, {corpus_info['bytes'] / 2**20:.0f} MB in {corpus_dir}")

    groups = groups_for(args)
    if args.only:
        keep = set(args.only.split(","))
        groups = [g for g in groups if g.key in keep]
    reference = {"ok": False, "note": "skipped (--skip-reference/--quick)"}
    if not args.skip_reference:
        reference = ensure_reference()
        if not reference.get("ok"):
            log(f"reference unavailable: {reference.get('note')}")
    impls_allowed = {"ours", "floor", "torch"} | ({"reference"} if reference.get("ok") else set())
    groups = [dataclasses.replace(g, impls=tuple(i for i in g.impls if i in impls_allowed)) for g in groups]

    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = RESULTS / "logs" / f"{'quick' if args.quick else 'full'}-{stamp}"
    records: list[dict] = []
    total = sum(len(g.impls) for g in groups) * (args.runs + (0 if args.quick else 1))
    done = 0
    unavailable: set[str] = set()
    for g in groups:
        schedule = ([-1] if not args.quick else []) + list(range(args.runs))  # -1: untimed warm-up
        for run in schedule:
            for impl in g.impls:
                done += 1
                if impl in unavailable:
                    records.append({"impl": impl, "group": g.key, "run": run, "ok": False, "unavailable": True,
                                    "error": "not importable", "first_batch_s": None, "peak_rss": 0})
                    continue
                rec = run_one(impl, g, str(corpus_dir), run=run, timeout=args.timeout, logs=logs)
                if rec.get("unavailable"):
                    unavailable.add(impl)
                status = (f"{rec['items_per_s']:.1f} items/s, first batch {rec['first_batch_s']:.2f} s, "
                          f"peak RSS {rec['peak_rss'] / 2**20:.0f} MB") if rec["ok"] else f"FAILED: {rec['error']}"
                log(f"[{done}/{total}] {g.key} {impl} {'warm-up' if run < 0 else f'run {run + 1}'}: {status}")
                if run >= 0 or not rec["ok"]:
                    records.append(rec)

    fresh = None
    if not args.skip_fresh:
        fresh = fresh_venv_runs(folders, bool(reference.get("ok")), logs)

    data = {
        "args": {"quick": args.quick, "runs": args.runs, "batches": args.batches},
        "groups": [dataclasses.asdict(g) for g in groups],
        "records": [r for r in records if r.get("run", 0) >= 0],
        "reference": reference, "fresh": fresh, "machine": machine, "loadavg_end": os.getloadavg(),
        "corpus": corpus_info, "finished": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    raw_path = RESULTS / f"{'quick' if args.quick else 'full'}-{stamp}.json"
    raw_path.write_text(json.dumps(data, indent=1, default=str))
    report = _keep_scale_section(render(data), out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(report)
    print(report, flush=True)
    log(f"wrote {out_path} (raw results: {raw_path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

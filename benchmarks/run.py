#!/usr/bin/env python
"""audiotree benchmarks, per CPU core: ours vs audiotree 1.0 vs lhotse vs plain loops.

    python benchmarks/run.py            # full run: both corpora, all peers; rewrites BENCHMARKS.md
    python benchmarks/run.py --quick    # smoke run: tiny synthetic corpus, ours + plain loops, 1 run

Run it with the dev venv (``audiotree`` installed, plus ``psutil``, ``loudness``
and ``torch``). In short:

1. Two corpora, cached under ``benchmarks/.corpus/``: the synthetic one
   (``benchmarks/corpus.py``) and a real one built from audio Debian packages
   ship (``benchmarks/real_corpus.py``).
2. Peers live in their own venvs, created here if missing: the published
   ``audiotree==1.0.0`` in ``benchmarks/.venv-reference/`` and lhotse in
   ``benchmarks/.venv-lhotse/`` (torch pinned to 2.13.0 in both).
3. Every configuration runs its implementations *interleaved* (A, B, C, A, B,
   C, ...), each run in a fresh interpreter (``benchmarks/bench_worker.py``),
   which reports items per CPU-second of its whole process tree. The harness
   samples the tree's RSS and times start to first batch from outside.
4. BENCHMARKS.md is rewritten; sections other harnesses append (from their
   ``<!-- ... -->`` marker on) are kept.
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
LHOTSE_VENV = HERE / ".venv-lhotse"
FRESH_VENV = HERE / ".venv-fresh-ours"
RESULTS = HERE / ".results"
CORPUS_ROOT = HERE / ".corpus"
REFERENCE_PIN = "audiotree==1.0.0"
TORCH_PIN = "torch==2.13.0"

sys.path.insert(0, str(HERE))
import bench_worker  # noqa: E402  (shared protocol constants and configs)
import corpus as corpus_mod  # noqa: E402
from _sections import keep_sections, replace_section, wrap  # noqa: E402

IMPLS = ("ours", "reference", "floor", "plain", "lhotse", "torch")
CORPORA = ("synthetic", "real", "hires")
OURS_SRC = [str(REPO / "src")]  # --ours-src: measure a frozen copy while the tree is being edited


@dataclasses.dataclass(frozen=True)
class Group:
    """One configuration on one corpus; its impls run interleaved."""

    key: str
    label: str
    config: str
    workers: int
    reads: str  # "sync": ReadOptions(num_threads=0, prefetch_buffer_size=0); "default": the library's own
    impls: tuple[str, ...]
    batches: int
    corpus: str = "synthetic"


def groups_for(args) -> list[Group]:
    rb, lb = (args.batches, args.batches) if args.batches else (12, 8)
    out = []
    for corpus in args.corpora:
        out += [
            Group("random_sync_0w", "random 3 s @44.1k, sync reads, 0 workers", "random", 0, "sync",
                  ("ours", "reference", "floor", "plain", "lhotse"), rb, corpus),
            Group("random_sync_2w", "random 3 s @44.1k, sync reads, 2 workers", "random", 2, "sync",
                  ("ours", "reference", "plain", "lhotse"), rb, corpus),
            Group("random_default_0w", "random 3 s @44.1k, default ReadOptions, 0 workers", "random", 0, "default",
                  ("ours", "reference"), rb, corpus),
            Group("loudest_sync_0w", "balanced loudest 3 s @48k, sync reads, 0 workers", "loudest", 0, "sync",
                  ("ours", "reference", "floor"), lb, corpus),
            Group("loudest_sync_2w", "balanced loudest 3 s @48k, sync reads, 2 workers", "loudest", 2, "sync",
                  ("ours", "reference", "torch"), lb, corpus),
        ]
    return out



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
                sample_rss: bool = True, stop_at_first_batch: bool = False, max_rss: int | None = None) -> dict:
    """Runs ``cmd``; returns first-batch time, parsed result, peak tree RSS, errors.

    With ``max_rss`` (bytes), a run whose process tree passes it is stopped (the machine is shared).
    """
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
                if max_rss is not None and out["peak_rss"] > max_rss:
                    break
            time.sleep(0.05)
        too_big = max_rss is not None and out["peak_rss"] > max_rss and proc.poll() is None
        timed_out = proc.poll() is None and not (stop_at_first_batch and first.is_set()) and not too_big
        if proc.poll() is None:
            try:
                proc.wait(timeout=0 if stop_at_first_batch or too_big else 5)
            except subprocess.TimeoutExpired:
                pass
        _end_group(proc.pid)
        proc.wait()
        done.wait(timeout=10)
        out["returncode"] = proc.returncode
        out["seconds"] = time.monotonic() - t0
    if too_big:
        out["error"] = f"stopped when the process tree passed {max_rss / 2**30:.1f} GB, after {out['seconds']:.0f} s"
    elif timed_out:
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
    # One BLAS thread in every run, as a DataLoader worker sets torch's threads to one: the plain loop's
    # stereo downmix is a matrix-vector product, and OpenBLAS's idle threads spinning on the second
    # core took 57 % of its CPU (real corpus, 253 against 595 items per CPU-second with one thread).
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, "1")
    env.update(extra or {})
    return env


def python_for(impl: str) -> str:
    if impl == "reference":
        return str(REF_VENV / "bin" / "python")
    if impl == "lhotse":
        return str(LHOTSE_VENV / "bin" / "python")
    return sys.executable


def run_one(impl: str, group: Group, corpus_dir: str, *, run: int, timeout: float, logs: Path) -> dict:
    cmd = [
        python_for(impl), str(WORKER), "--impl", impl, "--config", group.config, "--workers", str(group.workers),
        "--corpus", corpus_dir, "--batches", str(group.batches), "--reads", group.reads,
    ]
    name = f"{group.corpus}-{group.key}-{impl}-{run}"
    # "ours" is this checkout's source tree, whatever the dev venv's editable install points at.
    env = subprocess_env({"PYTHONPATH": OURS_SRC[0]} if impl in ("ours", "torch") else None)
    raw = run_process(cmd, env=env, timeout=timeout, log_path=logs / f"{name}.log")
    rec = {"impl": impl, "group": group.key, "corpus": group.corpus, "run": run, "ok": raw["result"] is not None,
           "first_batch_s": raw["first_batch_s"], "peak_rss": raw["peak_rss"], "wall_s": raw.get("seconds")}
    if raw["result"] is not None:
        res = raw["result"]
        rec.update(items_per_s=res["items_per_s"], cpu_seconds=res["cpu_seconds"], window_s=res["seconds"],
                   items_per_cpu_s=res.get("items_per_cpu_s"), versions=res["versions"],
                   items_made=res.get("items_made"), ahead=res.get("ahead"))
    else:
        rec["error"] = raw.get("error") or "failed"
        text = (logs / f"{name}.log").read_text(errors="replace")
        rec["unavailable"] = impl in ("torch", "lhotse", "plain") and (
            "ImportError" in text or "ModuleNotFoundError" in text)
    return rec


# ------------------------------------------------------------------ lhotse
def ensure_lhotse() -> dict:
    """Creates ``benchmarks/.venv-lhotse`` if missing (lhotse never enters the dev venv)."""
    py = LHOTSE_VENV / "bin" / "python"
    check = [str(py), "-c", "import lhotse, torch, psutil, scipy; print(lhotse.__version__)"]
    res = subprocess.run(check, capture_output=True, text=True, env=subprocess_env()) if py.exists() else None
    if res is not None and res.returncode == 0:
        return {"ok": True, "version": res.stdout.strip(), "packages": _pip_list(py)}
    log(f"creating the lhotse venv {LHOTSE_VENV.relative_to(REPO)} ...")
    shutil.rmtree(LHOTSE_VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(LHOTSE_VENV)], check=True)
    wheel = sorted(Path("/opt/wheels").glob("torch-2.13.0*.whl")) if Path("/opt/wheels").is_dir() else []
    # scipy: lhotse's resampling backend when torchaudio is absent; urllib3: imported by lhotse.
    pkgs = [str(wheel[0]) if wheel else TORCH_PIN, "lhotse", "soundfile", "soxr", "psutil", "scipy", "urllib3"]
    res = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c",
                          str(write_constraints()), *pkgs], capture_output=True, text=True, env=subprocess_env())
    if res.returncode != 0:
        return {"ok": False, "note": "pip install failed: " + (res.stderr.strip().splitlines() or ["?"])[-1][:300]}
    res = subprocess.run(check, capture_output=True, text=True, env=subprocess_env())
    return {"ok": res.returncode == 0, "version": res.stdout.strip(), "packages": _pip_list(py),
            "note": None if res.returncode == 0 else res.stderr.strip()[-300:]}


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
    if py.exists() and subprocess.run(check, capture_output=True, text=True, env=subprocess_env()).stdout.strip() == "1.0.0":
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
    version = subprocess.run(check, capture_output=True, text=True, env=subprocess_env()).stdout.strip()
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
    """Per (corpus, group, impl): medians and min/max of items per CPU-second, wall rate, RSS, first batch."""
    summary: dict = {}
    for g in groups:
        for impl in g.impls:
            recs = [r for r in records if r["group"] == g.key and r["impl"] == impl and r.get("corpus") == g.corpus]
            ok = [r for r in recs if r["ok"] and r.get("items_per_cpu_s")]
            entry = {"runs": len(recs), "ok": len(ok)}
            if ok:
                per_cpu = [r["items_per_cpu_s"] for r in ok]
                rates = [r["items_per_s"] for r in ok]
                entry.update(
                    per_cpu=median(per_cpu), min=min(per_cpu), max=max(per_cpu),
                    items_per_s=median(rates), wall_min=min(rates), wall_max=max(rates),
                    first_batch_s=median([r["first_batch_s"] for r in ok]),
                    peak_rss=median([r["peak_rss"] for r in ok]),
                    cores=median([r["cpu_seconds"] / r["window_s"] for r in ok]),
                )
            elif recs:
                entry["error"] = recs[-1].get("error")
                entry["unavailable"] = all(r.get("unavailable") for r in recs)
            summary[f"{g.corpus}/{g.key}/{impl}"] = entry
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


IMPL_LABELS = {"ours": "ours", "reference": "audiotree 1.0", "floor": "plain loop", "plain": "plain torch Dataset",
               "lhotse": "lhotse", "torch": "ours via audiotree.torch"}


def _rate_cell(e: dict | None) -> str:
    if not e:
        return "—"
    if e.get("per_cpu") is None:
        return "n/a (not installed)" if e.get("unavailable") else "failed"
    return f"{_fmt(e['per_cpu'])} ({_fmt(e['min'])}–{_fmt(e['max'])})"


def goals(summary: dict, corpora: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(goal, measured, verdict) for issue 27's goals (per CPU-second), per corpus."""
    def v(corpus, key, impl, field="per_cpu"):
        return (summary.get(f"{corpus}/{key}/{impl}") or {}).get(field)

    def verdict(x, ok):
        return "n/a" if x is None else ("HOLDS" if ok(x) else "MISSES")

    out = []
    for c in corpora:
        x = _ratio(v(c, "random_sync_0w", "ours"), v(c, "random_sync_0w", "floor"))
        out.append((f"{c}: random ≥ 1.0× the plain loop (sync, 0 workers)", _fmt(x, "ratio"),
                    verdict(x, lambda r: r >= 1.0)))
        x = _ratio(v(c, "random_sync_0w", "ours"), v(c, "random_sync_0w", "plain"))
        out.append((f"{c}: random ≥ 1.0× a plain torch Dataset (sync, 0 workers)", _fmt(x, "ratio"),
                    verdict(x, lambda r: r >= 1.0)))
        x = _ratio(v(c, "loudest_sync_0w", "ours"), v(c, "loudest_sync_0w", "floor"))
        out.append((f"{c}: loudest without an index ≥ 1.0× the plain loop with libloudness and up to 5 tries "
                    "(sync, 0 workers)", _fmt(x, "ratio"), verdict(x, lambda r: r >= 1.0)))
        for kind in ("random", "loudest"):
            x = _ratio(v(c, f"{kind}_sync_2w", "ours"), v(c, f"{kind}_sync_0w", "ours"))
            out.append((f"{c}: {kind}, 2 workers ≥ 0.95× the 0-worker items per CPU-second", _fmt(x, "ratio"),
                        verdict(x, lambda r: r >= 0.95)))
        for key, label in (("random_sync_0w", "0 workers"), ("random_sync_2w", "2 workers")):
            x = _ratio(v(c, key, "ours"), v(c, key, "lhotse"))
            out.append((f"{c}: random ≥ 2× lhotse ({label})", _fmt(x, "ratio"), verdict(x, lambda r: r >= 2.0)))
        for key in ("random_sync_2w", "loudest_sync_2w"):
            x = _ratio(v(c, key, "ours", "peak_rss"), v(c, key, "reference", "peak_rss"))
            out.append((f"{c}: peak RSS of the process tree, {key.split('_')[0]} 2 workers ≤ 0.6× audiotree 1.0",
                        _fmt(x, "ratio"), verdict(x, lambda r: r <= 0.6)))
        x = _ratio(v(c, "loudest_sync_2w", "ours", "first_batch_s"), v(c, "loudest_sync_2w", "reference", "first_batch_s"))
        out.append((f"{c}: loudest, 2 workers: start → first batch ≤ 0.5× audiotree 1.0", _fmt(x, "ratio"),
                    verdict(x, lambda r: r <= 0.5)))
        out.append((f"{c}: loudest with a corpus index ≥ 0.9× our random", "—",
                    "see the section “`loudest` next to `random`” below (benchmarks/loudest.py measures it)"))
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


def _corpus_line(name: str, c: dict) -> str:
    if name == "real":
        pk = ", ".join(f"{p} {v}" for p, v in c.get("packages", {}).items())
        return (f"* **real** (`benchmarks/real_corpus.py`): {c['files']} files ({', '.join(f'{k} {n}' for k, n in c['per_group'].items())}), "
                f"{c['bytes'] / 2**20:.0f} MB, {c['hours'] * 60:.0f} min, from the Debian packages {pk} "
                f"(`apt-get download` + `dpkg-deb -x`), converted to {', '.join(c['formats'])} at "
                f"{', '.join(str(r) for r in c['rates'])} Hz; {c['under_2s']} files under 2 s, {c['from_30_to_120s']} "
                "of 30 s or more (cut at 120 s).")
    if name == "hires":
        lo, hi = c["minutes_min_max"]
        return (f"* **hires** (`benchmarks/corpus.py`, `HIRES_SPEC`, issue 27): {c['files']} stereo files, "
                f"{c['bytes'] / 2**20:.0f} MB, {c['hours'] * 60:.0f} min, {lo:.1f} to {hi:.1f} min each; "
                f"{', '.join(f'{n} {x}' for x, n in c['by_format'].items())}; MP3 at 44.1/48 kHz (MPEG's limit), "
                f"the rest at {', '.join(str(r) for r in c['rates'] if r > 48000)} Hz; "
                f"{c.get('mostly_silent', 0)} files silent outside one loud passage.")
    return (f"* **synthetic** (`benchmarks/corpus.py`): {c['files']} files, {c['bytes'] / 2**20:.0f} MB, "
            f"{c['hours'] * 60:.0f} min in three groups; {c['under_2s']} under 2 s, {c['from_30_to_120s']} from 30 to "
            f"120 s; {', '.join(c['formats'])} at {', '.join(str(r) for r in c['rates'])} Hz; "
            f"{c.get('mostly_silent', 0)} files silent outside one loud passage.")


def render(data: dict) -> str:
    args = data["args"]
    groups = [Group(**g) for g in data["groups"]]
    corpora = tuple(dict.fromkeys(g.corpus for g in groups))
    summary = summarize(data["records"], groups)
    m = data["machine"]
    mode = "quick (smoke) run" if args["quick"] else ("subset run" if args.get("subset") else "full run")
    cmd = "python benchmarks/run.py" + (" --quick" if args["quick"] else "") + (
        f" {args['argv']}" if args.get("argv") else "")
    impls = [i for i in IMPLS if any(i in g.impls for g in groups)]
    parts = [
        "# Benchmarks",
        "",
        f"Generated by `{cmd}` ({mode}, {data['finished']}); every number below comes from that one run on one "
        "machine. Do not edit by hand: rerun the harness."
        + (" This is a subset run: only the corpora, configurations and implementations of that command line "
           "ran (cells and goals of the others show n/a); it does not replace the full run's tables."
           if args.get("subset") else ""),
        "",
        "**The unit is items per CPU-second**: items made in the timed window (between two quiet points, see Method) divided by the user + system CPU "
        "time of the whole process tree (the run's process, its threads, every worker) in that window. Cores are "
        "what a training host gives a loader, and the machine is shared, so wall rates say little; the wall rates "
        "and the cores each run kept busy are in the detail table.",
        "",
        "## Reproduce",
        "",
        "```bash",
        "# from the repository root, in the dev venv (audiotree installed, e.g. pip install -e '.[test]')",
        "pip install psutil loudness torch==2.13.0   # once: CPU/RSS sampling, the plain loop's meter, the torch rows",
        "python benchmarks/run.py                    # full run: both corpora, all peers; rewrites BENCHMARKS.md",
        "python benchmarks/run.py --quick            # smoke run (tests/test_benchmarks_smoke.py), writes benchmarks/.results/quick.md",
        "python benchmarks/profile_paths.py          # per-item time breakdown of ours and the plain loop (PROFILE.md)",
        "```",
        "",
        "Created on first use, each in its own venv: the published `audiotree==1.0.0` (`benchmarks/.venv-reference/`) "
        "and lhotse (`benchmarks/.venv-lhotse/`, with `torch==2.13.0`); lhotse is never installed in the dev venv. The "
        "corpora are cached in `benchmarks/.corpus/`; logs and raw JSON go to `benchmarks/.results/`.",
        "",
        "## Results: items per CPU-second",
        "",
        f"Median over {args['runs']} interleaved run(s) per cell (min–max in brackets). *sync reads* = "
        "`ReadOptions(num_threads=0, prefetch_buffer_size=0)`, the primary configuration (the seed page's advice); "
        "*default ReadOptions* come second. The plain loop (`benchmarks/floor.py`) and the plain torch `Dataset` "
        "(soundfile seek+read, mono, soxr HQ, pad) do the same physical work as ours without a framework; lhotse and the "
        "plain `Dataset` run under a torch `DataLoader` (batch 32, `num_workers` 0 or 2).",
        "",
    ]
    for c in corpora:
        rows = []
        for g in [g for g in groups if g.corpus == c]:
            rows.append([g.label] + [_rate_cell(summary.get(f"{c}/{g.key}/{i}")) if i in g.impls else "" for i in impls])
        parts += [f"### {c} corpus", "", _md_table(["configuration"] + [IMPL_LABELS[i] for i in impls], rows), ""]
    parts += ["## Goals (issues 18, 27)", "", _md_table(["goal", "measured", "verdict"], goals(summary, corpora)), "",
              "Misses are analysed in [benchmarks/PROFILE.md](benchmarks/PROFILE.md).", ""]
    detail = []
    for g in groups:
        for impl in g.impls:
            e = summary.get(f"{g.corpus}/{g.key}/{impl}") or {}
            if e.get("per_cpu") is None:
                detail.append([g.corpus, g.label, IMPL_LABELS[impl], e.get("error", "n/a") or "n/a", "", "", "", ""])
                continue
            failed = f" ({e['runs'] - e['ok']} of {e['runs']} failed)" if e["ok"] < e["runs"] else ""
            detail.append([g.corpus, g.label, IMPL_LABELS[impl], f"{e['per_cpu']:.1f}{failed}",
                           f"{e['items_per_s']:.1f} ({e['wall_min']:.1f}–{e['wall_max']:.1f})", f"{e['cores']:.2f}",
                           _fmt(e["first_batch_s"], "s"), _fmt(e["peak_rss"], "mb")])
    parts += [
        "## Detail",
        "",
        "Items per CPU-second (median), wall items/s (median, min–max; the machine is shared, so these depend on "
        "its load), CPU cores the process tree kept busy in the timed window, interpreter start → first batch, and "
        "the peak RSS of the process tree (sum over the process and its descendants, sampled every 50 ms).",
        "",
        _md_table(["corpus", "configuration", "impl", "items/CPU-s", "wall items/s", "cores", "start → 1st batch",
                   "peak RSS"], detail),
        "",
    ]
    failures = [r for r in data["records"] if not r["ok"] and not r.get("unavailable")]
    if failures:
        parts += ["Failed runs (excluded from the medians; logs in `benchmarks/.results/logs/`):", ""]
        parts += [f"* {r.get('corpus')} {r['group']} {r['impl']} run {r['run'] + 1}: `{r.get('error')}`" for r in failures]
        parts.append("")
    fresh = data.get("fresh")
    if fresh:
        parts += [
            f"First run in a fresh venv (`--fresh`): `pip install .` took {_fmt(fresh.get('ours_install_s'), 's')}; the "
            f"first run of the loudest 0-worker config took {_fmt((fresh.get('ours') or {}).get('seconds'), 's')} to "
            f"its first batch (audiotree 1.0 with an empty numba cache: "
            f"{_fmt((fresh.get('reference') or {}).get('seconds'), 's')}).", ""]
    lb = [g for g in groups if g.config == "loudest"]
    rb = [g for g in groups if g.config == "random"]
    parts += [
        "## Method",
        "",
        "* Corpora:",
        *["  " + _corpus_line(c, data["corpora"][c]) for c in corpora],
        "* Work per item, the same for everyone: `random` = a random 3 s excerpt of a random file, mono, resampled to "
        "44.1 kHz (soxr HQ), padded; `loudest` = `create_balanced_audio_dataset(..., weights={speech: 0.5, music: 0.3, "
        "effects: 0.2}, duration=3.0, sample_rate=48000, excerpt=ExcerptConfig(strategy=\"loudest\", lufs_cutoff=-40, "
        "num_tries=5))` (the plain loop retries up to 5 random reads metered with libloudness). Batches of 32: "
        "`.to_iter_dataset(read_options=...).batch(32, batch_fn=AudioTree.batch)` for audiotree, with "
        "`.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))` for 2 workers; a torch `DataLoader(batch_size=32, "
        "num_workers=...)` for lhotse (`CutSet.from_manifests(recordings=RecordingSet.from_recordings(Recording.from_file(p) ...))`, "
        "then per item `cut.truncate(offset=random, duration=3.0).resample(44100).load_audio()`) and the plain "
        "`Dataset` (in-process, i.e. 0 workers, the harness calls `torch.set_num_threads(1)`, as a `DataLoader` "
        "worker does itself, so torch's intra-op pool does not spin on the second core); the plain loop forks 2 "
        "processes for 2 workers. Every run has one BLAS/OpenMP thread (`OPENBLAS_NUM_THREADS=1`, ...), so no "
        "implementation pays for idle BLAS threads spinning on the other core. Each library's dataset is built the "
        "way its docs show; lhotse resamples with its own backend (SciPy here, torchaudio is not installed).",
        f"* Timed window: {rb[0].batches if rb else '?'} (random) / {lb[0].batches if lb else '?'} (loudest) batches "
        "after a warm-up (the first batch; with 2 workers the first 4). Items per CPU-second count the items the "
        "process tree made between two quiet points (every item is stamped where it is made; the CPU clock starts "
        "and stops when no item is being made, so workers running ahead are neither charged for batches the "
        "window never takes nor credited with batches made before it; `bench_worker.py`). Each run is a fresh "
        "interpreter; the "
        f"implementations of a configuration run interleaved (A, B, C, A, B, C, ...), {args['runs']} time(s) each"
        + (f", {args.get('lanes', 1)} harness lanes in parallel (one per corpus; CPU time is per process tree, so "
           "lanes do not distort it)" if args.get("lanes", 1) > 1 else "") + ".",
        f"* Machine load average at start / end: "
        f"{' / '.join(', '.join(f'{x:.1f}' for x in la) for la in (m['loadavg'], data['loadavg_end']))} "
        "(shared machine: hence CPU time, medians, ratios and interleaving).",
        "",
        "## Machine and versions",
        "",
        f"* {m['cores']} cores, {m['ram_gb']:.0f} GB RAM, CPU: {m['cpu']}, {m['os']}",
    ]
    vrows = []
    for impl in ("ours", "reference", "floor", "lhotse"):
        v = _versions(data["records"], impl)
        if v:
            vrows.append([IMPL_LABELS[impl], v.get("audiotree", "—"), v.get("lhotse", "—"), v.get("python", "?"),
                          v.get("numpy", "?"), v.get("grain", "—"), v.get("jax", "—"), v.get("torch", "—"),
                          v.get("soundfile", "?"), v.get("soxr", "?"), v.get("libsndfile", "?")])
    if vrows:
        parts += ["", _md_table(["venv", "audiotree", "lhotse", "python", "numpy", "grain", "jax", "torch", "soundfile",
                                 "soxr", "libsndfile"], vrows)]
    tv = _versions(data["records"], "torch") or _versions(data["records"], "plain")
    extras = []
    if tv.get("torch"):
        extras.append(f"dev venv torch {tv['torch']}")
    lh = data.get("lhotse") or {}
    if lh.get("packages"):
        extras.append("lhotse venv: " + ", ".join(p for p in lh["packages"] if p.split("==")[0].lower()
                                                  in ("lhotse", "torch", "torchaudio", "scipy", "soundfile")))
    if lh.get("note"):
        extras.append(f"lhotse: {lh['note']}")
    ref = data["reference"]
    if ref.get("note"):
        extras.append(f"audiotree 1.0: {ref['note']}")
    if extras:
        parts += ["", "* " + "\n* ".join(extras)]
    parts.append("")
    return "\n".join(parts)


# -------------------------------------------------------------------- main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny synthetic corpus, 1 run, 2 batches, no reference/lhotse venvs")
    ap.add_argument("--runs", type=int, default=None, help="interleaved runs per implementation and config (default 3; quick 1)")
    ap.add_argument("--batches", type=int, default=None, help="timed batches per run (default 12 random / 8 loudest; quick 2)")
    ap.add_argument("--corpora", default=None, help="comma-separated: synthetic,real (default both; quick synthetic)")
    ap.add_argument("--lanes", type=int, default=1, help="corpora measured in parallel harness lanes (CPU time is per tree)")
    ap.add_argument("--skip-reference", action="store_true", help="no audiotree 1.0 runs")
    ap.add_argument("--skip-lhotse", action="store_true", help="no lhotse runs")
    ap.add_argument("--fresh", action="store_true", help="also time the first run in a fresh venv")
    ap.add_argument("--only", default=None, help="comma-separated config keys, e.g. random_sync_0w,loudest_sync_0w")
    ap.add_argument("--corpus-dir", default=None, help="where to build/cache the corpora (default benchmarks/.corpus/)")
    ap.add_argument("--out", default=None, help="report path (default: BENCHMARKS.md; quick: benchmarks/.results/quick.md)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per run before it is killed (default 600; quick 240)")
    ap.add_argument("--ours-src", default=None, help="source tree to measure as ours (default: this checkout's src/)")
    ap.add_argument("--report-only", default=None, metavar="JSON", help="re-render a report from a saved results JSON")
    ap.add_argument("--section", default=None, metavar="NAME",
                    help="write the report as section NAME of the report file (headings one level down) and keep "
                         "the rest of the file: for a subset run (--only/--corpora/--skip-*) next to a full one")
    ap.add_argument("--device", action="store_true",
                    help="only the device-feeding loop (benchmarks/device_feed.py --write): step-time hiding of "
                         "audiotree.jax.prefetch_to_device, on an accelerator when one is present")
    args = ap.parse_args(argv)
    if args.quick:
        args.skip_reference = args.skip_lhotse = True
        args.runs = args.runs or 1
        args.batches = args.batches or 2
        args.timeout = args.timeout or 240
        args.corpora = args.corpora or "synthetic"
    args.corpora = tuple((args.corpora or ",".join(CORPORA)).split(","))
    args.runs = args.runs or 3
    args.timeout = args.timeout or 600
    return args




def _write_report(out_path: Path, report: str, section: str | None) -> None:
    """The whole report file (keeping its sections), or with ``section`` only that section of it."""
    if section is None:
        out_path.write_text(keep_sections(out_path, report))
        return
    lines = report.splitlines()
    lines[0] = f"# Subset run ({section})" if lines and lines[0] == "# Benchmarks" else lines[0]
    out, fenced = [], False
    for line in lines:  # headings one level down; a '#' comment inside a code block is not a heading
        fenced = fenced != line.startswith("```")
        out.append("#" + line if line.startswith("#") and not fenced else line)
    demoted = "\n".join(out)
    replace_section(out_path, section, wrap(section, demoted))


def _corpus(name: str, args) -> tuple[str, dict]:
    base = Path(args.corpus_dir) if args.corpus_dir else CORPUS_ROOT
    if name == "real":
        import real_corpus

        root = base / "real"
        real_corpus.build_real_corpus(root, log=log)
        return str(root), real_corpus.describe(root)
    if name == "hires":
        root = base / "hires"
        corpus_mod.build_corpus(root, corpus_mod.HIRES_SPEC, log=log)
        return str(root), corpus_mod.describe(root)
    root = base / ("quick" if args.quick else "full")
    corpus_mod.build_corpus(root, corpus_mod.QUICK_SPEC if args.quick else corpus_mod.FULL_SPEC, log=log)
    return str(root), corpus_mod.describe(root)


def _warm_page_cache(root: str) -> None:
    """Reads every corpus file once, so the first timed run does not pay for the disk."""
    for dirpath, _, names in os.walk(root):
        for n in names:
            with open(os.path.join(dirpath, n), "rb") as f:
                while f.read(1 << 20):
                    pass


def _lane(groups: list[Group], corpus_dir: str, args, logs: Path, unavailable: set, records: list, counter: list) -> None:
    for g in groups:
        for run in range(args.runs):
            for impl in g.impls:
                counter[0] += 1
                if impl in unavailable:
                    records.append({"impl": impl, "group": g.key, "corpus": g.corpus, "run": run, "ok": False,
                                    "unavailable": True, "error": "not importable", "first_batch_s": None, "peak_rss": 0})
                    continue
                rec = run_one(impl, g, corpus_dir, run=run, timeout=args.timeout, logs=logs)
                if rec.get("unavailable"):
                    unavailable.add(impl)
                status = (f"{rec['items_per_cpu_s']:.1f} items/CPU-s, {rec['items_per_s']:.1f} items/s, "
                          f"peak RSS {rec['peak_rss'] / 2**20:.0f} MB") if rec["ok"] else f"FAILED: {rec['error']}"
                log(f"[{counter[0]}/{counter[1]}] {g.corpus} {g.key} {impl} run {run + 1}: {status}")
                records.append(rec)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device:  # its own interpreter: XLA_FLAGS must be set before JAX starts
        return subprocess.call([sys.executable, str(Path(__file__).with_name("device_feed.py")), "--write"])
    default_out = RESULTS / "quick.md" if args.quick else REPO / "BENCHMARKS.md"
    out_path = Path(args.out) if args.out else default_out
    if args.report_only:
        data = json.loads(Path(args.report_only).read_text())
        _write_report(out_path, render(data), args.section)
        print(render(data))
        return 0

    if args.ours_src:
        OURS_SRC[0] = str(Path(args.ours_src).resolve())
    machine = machine_info()
    corpora = {name: _corpus(name, args) for name in args.corpora}
    for name, (root, info) in corpora.items():
        log(f"corpus {name}: {info['files']} files, {info['bytes'] / 2**20:.0f} MB in {root}")
        _warm_page_cache(root)

    groups = groups_for(args)
    if args.only:
        keep = set(args.only.split(","))
        groups = [g for g in groups if g.key in keep]
    reference = {"ok": False, "note": "skipped (--skip-reference/--quick)"}
    if not args.skip_reference:
        reference = ensure_reference()
        if not reference.get("ok"):
            log(f"reference unavailable: {reference.get('note')}")
    lhotse = {"ok": False, "note": "skipped (--skip-lhotse/--quick)"}
    if not args.skip_lhotse:
        lhotse = ensure_lhotse()
        if not lhotse.get("ok"):
            log(f"lhotse unavailable: {lhotse.get('note')}")
    allowed = {"ours", "floor", "torch", "plain"} | ({"reference"} if reference.get("ok") else set()) | (
        {"lhotse"} if lhotse.get("ok") else set())
    groups = [dataclasses.replace(g, impls=tuple(i for i in g.impls if i in allowed)) for g in groups]

    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = RESULTS / "logs" / f"{'quick' if args.quick else 'full'}-{stamp}"
    records: list[dict] = []
    counter = [0, sum(len(g.impls) for g in groups) * args.runs]
    unavailable: set[str] = set()
    lanes = [[g for g in groups if g.corpus == c] for c in args.corpora]
    if args.lanes > 1:
        threads = [threading.Thread(target=_lane, args=(lane, corpora[lane[0].corpus][0], args, logs, unavailable,
                                                        records, counter)) for lane in lanes if lane]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for lane in lanes:
            if lane:
                _lane(lane, corpora[lane[0].corpus][0], args, logs, unavailable, records, counter)

    fresh = None
    if args.fresh:
        fresh = fresh_venv_runs(corpus_mod.build_corpus(Path(corpora["synthetic"][0])), bool(reference.get("ok")), logs)

    data = {
        "args": {"quick": args.quick, "runs": args.runs, "batches": args.batches, "lanes": args.lanes,
                 "subset": bool(args.section or args.only or args.skip_reference or args.skip_lhotse
                                or set(args.corpora) != set(CORPORA)),
                 "argv": " ".join(a for a in (argv if argv is not None else sys.argv[1:]) if a != "--quick")},
        "groups": [dataclasses.asdict(g) for g in groups],
        "records": records, "reference": {k: v for k, v in reference.items()},
        "lhotse": lhotse, "fresh": fresh, "machine": machine, "loadavg_end": os.getloadavg(),
        "corpora": {name: info for name, (_, info) in corpora.items()},
        "finished": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    raw_path = RESULTS / f"{'quick' if args.quick else 'full'}-{stamp}.json"
    raw_path.write_text(json.dumps(data, indent=1, default=str))
    report = render(data)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    _write_report(out_path, report, args.section)
    print(report, flush=True)
    log(f"wrote {out_path} (raw results: {raw_path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Training from HTTP as from a local disk? A rig that is not the bottleneck (issue 39).

1. A real corpus: 100 files (WAV, FLAC, Ogg Vorbis, MP3; 8 to 96 kHz; mono and
   stereo; ``--min-seconds`` to ``--max-seconds`` long), written at benchmark
   time by soundfile (WAV), ``flac``, ``oggenc`` and ``lame`` (MP3 at 44.1/48
   kHz where the source rate is above MPEG's 48 kHz), cached under
   ``--corpus-dir``.
2. Served over HTTP with Range by nginx (Debian's ``nginx-light``; 2 worker
   processes, sendfile, no access log), on 127.0.0.1. Without nginx
   (``--server aiohttp``, or nginx not installed) a Python aiohttp static
   server in its own process stands in, and the ceiling below says what it
   serves.
3. In front of it, a delay proxy (a thread pair per connection, ``--proxy-processes``
   processes on one port, default 1; 127.0.0.1 only; the replies pass by
   ``splice``, never copied through Python):
   every request a client sends is held ``--delays`` ms (default 0/20/50/100)
   before it is forwarded; connections and bytes are never limited. It counts
   the requests and the bytes the server sends back (HTTP headers included):
   every request of every worker passes through it.
   The same corpus on S3: moto's server (its own process) behind its own delay
   proxy, for ``--s3-delays`` (default 0 and 50 ms). No S3 server faster than
   moto installs here (MinIO is in neither Debian bookworm nor PyPI, whose
   ``minio`` is the client SDK; LocalStack's S3 is Python too), so the S3
   cells show moto's limits, not the loader's: read their ceiling row first.
4. First the rig's own ceiling, with no loader: ``--ceiling-clients`` concurrent
   ranged GETs (64 KiB for requests/s, 1 MiB for MB/s) from one aiohttp
   client process, straight to the server and through the proxy at +0 ms.
5. Then, in one run, the pipeline against the local corpus and over
   ``http://`` at each delay, each cell in a fresh process: an index over the
   files (``build_index``; the remote one over the proxy's URLs), random 3 s
   excerpts at 16 kHz, batch 32, ``ReadOptions(num_threads=8,
   prefetch_buffer_size=16)``, ``on_stale="trust"``, 2 ``mp_prefetch``
   workers. Per cell: time to the first batch, items made per wall-second and
   per CPU-second of the process tree while ``--batches`` batches are taken
   and for at least ``--min-window`` s (3 s quick, 10 s full; after the
   first batch and one per worker; items made, not taken, since the
   workers' buffers are full when the window starts), peak RSS of the tree
   (sampled), and requests and bytes per item made (proxy counts over the
   whole cell / items made in every process, start-up included).

6. With ``--render ITEMS`` (default off), a render cell: a ``tree`` render of
   ITEMS items of 3 s 44.1 kHz mono float32 (529 KB each) written by
   ``audiotree.render`` (cached like the corpus), its folder served by its own
   nginx behind its own delay proxy, read as a training job reads it:
   ``open_render(path or url)`` (its default read-ahead), in item order and
   ``.shuffle(0)``-ed, repeated, ``ReadOptions(num_threads=8,
   prefetch_buffer_size=16)``, batch 32, in one process and with 2
   ``mp_prefetch`` workers, locally and at ``--render-delays`` (default +50
   ms); the same figures as the other cells. ``--render-only`` skips every
   other cell (and the corpus).

Every server and proxy it starts is stopped on the way out (``finally`` and
``atexit``).

    python benchmarks/remote.py            # full: ~90 s files, 20 batches per cell
    python benchmarks/remote.py --quick    # a few seconds per cell
    python benchmarks/remote.py --render 2000 --render-only   # the render cells alone
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench_worker import ItemStamp  # counts items made in any process (this folder is the script's, so first on sys.path)

HERE = Path(__file__).resolve().parent
RATES = (8000, 16000, 22050, 32000, 44100, 48000, 88200, 96000)
EXTS = ("wav", "flac", "ogg", "mp3")
RESULT = "REMOTE-CELL-RESULT"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server on port {port} exited with rc {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:g} s")


# --------------------------------------------------------------------------- the corpus


def _signal(seconds: float, rate: int, channels: int, seed: int) -> np.ndarray:
    """Tones with vibrato and a little noise (compresses like music), ``(frames, channels)`` float32."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    f = 110 * 2 ** (seed % 24 / 12)
    cols = []
    for c in range(channels):
        x = sum(0.2 / k * np.sin(2 * np.pi * k * f * (1 + 0.01 * c) * t + 3 * np.sin(2 * np.pi * 0.2 * t))
                for k in (1, 2, 3, 5) if k * f < rate / 2)
        cols.append(x * (0.6 + 0.4 * np.sin(2 * np.pi * 0.05 * t + c)) + 0.01 * rng.standard_normal(t.size))
    return np.stack(cols, axis=1).astype(np.float32)


def _plan(files: int, lo: float, hi: float) -> list[dict]:
    rng = np.random.default_rng(39)
    plan = []
    for k in range(files):
        ext = EXTS[k % len(EXTS)]
        rate = RATES[(k // len(EXTS) + k) % len(RATES)]
        plan.append({"name": f"f{k:03d}.{ext}", "ext": ext, "rate": rate, "channels": 1 + (k // 2) % 2,
                     "seconds": round(float(rng.uniform(lo, hi)), 2), "seed": k})
    return plan


def write_corpus(folder: Path, files: int, lo: float, hi: float) -> list[dict]:
    """Writes (or reuses) the corpus under ``folder``; returns its plan."""
    import soundfile

    plan = _plan(files, lo, hi)
    manifest = folder / "manifest.json"
    if manifest.exists() and json.loads(manifest.read_text()) == plan and all((folder / p["name"]).exists()
                                                                              for p in plan):
        return plan
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.chmod(folder, 0o755)
    with tempfile.TemporaryDirectory() as tmp:
        for p in plan:
            out = folder / p["name"]
            x = _signal(p["seconds"], p["rate"], p["channels"], p["seed"])
            wav = Path(tmp) / "in.wav"
            soundfile.write(out if p["ext"] == "wav" else wav, x, p["rate"], subtype="PCM_16")
            if p["ext"] == "flac":
                subprocess.run(["flac", "-s", "-f", str(wav), "-o", str(out)], check=True)
            elif p["ext"] == "ogg":
                subprocess.run(["oggenc", "-Q", str(wav), "-o", str(out)], check=True)
            elif p["ext"] == "mp3":
                resample = [] if p["rate"] <= 48000 else ["--resample", "48" if p["rate"] % 48000 == 0 else "44.1"]
                subprocess.run(["lame", "--quiet", *resample, str(wav), str(out)], check=True)
    manifest.write_text(json.dumps(plan))
    return plan


def write_packed(folder: Path, plan: list[dict], shards: int = 4) -> tuple[list[str], list[str]]:
    """The corpus packed as tar shards and as Parquet files in Hugging Face's layout (an ``audio`` struct of
    ``bytes`` and ``path``, uncompressed, PLAIN), under ``folder / "packed"`` (reused when present); returns the
    names of both, relative to ``folder``."""
    import tarfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    packed = folder / "packed"
    tars = [f"packed/shard-{k:03d}.tar" for k in range(shards)]
    parquets = [f"packed/part-{k:03d}.parquet" for k in range(shards)]
    if all((folder / n).exists() for n in tars + parquets):
        return tars, parquets
    packed.mkdir(exist_ok=True)
    os.chmod(packed, 0o755)
    for k in range(shards):
        members = [p["name"] for i, p in enumerate(plan) if i % shards == k]
        with tarfile.open(folder / tars[k], "w") as tar:
            for name in members:
                tar.add(folder / name, arcname=name)
        audio = pa.array([{"bytes": (folder / n).read_bytes(), "path": n} for n in members],
                         type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
        pq.write_table(pa.table({"audio": audio}), folder / parquets[k], row_group_size=5, compression="NONE",
                       use_dictionary=False)
    return tars, parquets


# --------------------------------------------------------------------------- servers


_started: list[subprocess.Popen] = []


def _stop_all() -> None:
    """Stops every server process this run started (terminate, then kill)."""
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


atexit.register(_stop_all)


def _nginx_conf(prefix: Path, root: Path, port: int) -> Path:
    temp = "\n".join(f"  {k}_temp_path {prefix / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = prefix / "nginx.conf"
    conf.write_text(f"""
daemon off;
{"user root;" if os.geteuid() == 0 else ""}
worker_processes 2;
pid {prefix / "nginx.pid"};
error_log {prefix / "error.log"} warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  sendfile on;
  tcp_nodelay on;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  default_type application/octet-stream;
{temp}
  server {{ listen 127.0.0.1:{port}; root {root}; autoindex on; }}
}}
""")
    return conf


def start_server(kind: str, root: Path, work: Path) -> tuple[str, int]:
    """Starts the HTTP server over ``root``; returns (its name and version, port)."""
    port = _free_port()
    if kind == "nginx":
        prefix = work / "nginx"
        prefix.mkdir()
        conf = _nginx_conf(prefix, root, port)
        proc = subprocess.Popen([shutil.which("nginx"), "-p", str(prefix), "-c", str(conf)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _started.append(proc)
        _wait_port(port, proc)
        version = subprocess.run([shutil.which("nginx"), "-v"], capture_output=True, text=True).stderr.strip()
        return f"{version.split(': ')[-1]} (2 workers, sendfile)", port
    code = ("import sys; from aiohttp import web; app = web.Application(); "
            "app.router.add_static('/', sys.argv[1]); web.run_app(app, host='127.0.0.1', port=int(sys.argv[2]), "
            "print=None, access_log=None)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(root), str(port)], stdout=subprocess.DEVNULL)
    _started.append(proc)
    _wait_port(port, proc)
    return "aiohttp static server (one Python process)", port


def start_moto(root: Path, names: list[str]) -> int:
    """moto's S3 server in its own process with the corpus in ``s3://bench/corpus/``; returns its port."""
    import s3fs

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from moto.server import main; main(sys.argv[1:])",
                             "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _started.append(proc)
    _wait_port(port, proc)
    fs = s3fs.S3FileSystem(endpoint_url=f"http://127.0.0.1:{port}", key="bench", secret="bench-secret",
                           skip_instance_cache=True)
    fs.mkdir("bench")
    for n in names:
        fs.put_file(str(root / n), f"bench/corpus/{n}", ACL="public-read")  # the ceiling's GETs are unsigned
    return port


_PROXY = r'''
import fcntl, mmap, os, socket, struct, sys, threading, time
port, target, slot = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[4])
stats = open(sys.argv[3], "r+b")
m = mmap.mmap(stats.fileno(), 0)
# layout: delay seconds (double), then per proxy process (slot): requests, bytes from server, connections (int64)
base = 8 + 24 * slot
lock = threading.Lock()

def delay():
    return struct.unpack_from("d", m, 0)[0]

def add(offset, n):
    with lock:
        struct.pack_into("q", m, offset, struct.unpack_from("q", m, offset)[0] + n)

def up(client, server):
    # Each request is held `delay` s before it goes on; replies are not delayed.
    try:
        while True:
            data = client.recv(65536)
            if not data:
                break
            add(base, data.count(b" HTTP/1.1\r\n"))
            d = delay()
            if d > 0:
                time.sleep(d)
            server.sendall(data)
    except OSError:
        pass
    finally:
        try:
            server.shutdown(socket.SHUT_WR)
        except OSError:
            pass

def down(server, client):
    # The server's bytes go to the client through a pipe by splice: they never enter this process's memory
    # (half the CPU of copying them through asyncio, measured: 0.10 against 0.19 ms per 200 KB GET).
    if not hasattr(os, "splice"):  # (Python < 3.10 or not Linux: copied)
        try:
            while data := server.recv(262144):
                add(base + 8, len(data))
                client.sendall(data)
        except OSError:
            pass
        return
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)
    except OSError:
        pass
    try:
        while True:
            n = os.splice(server.fileno(), w, 1 << 20)
            if n == 0:
                break
            add(base + 8, n)
            while n:
                n -= os.splice(r, client.fileno(), n)
    except OSError:
        pass
    finally:
        os.close(r); os.close(w)

def handle(client):
    add(base + 16, 1)
    try:
        server = socket.create_connection(("127.0.0.1", target))
    except OSError:
        client.close()
        return
    for s in (client, server):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t = threading.Thread(target=up, args=(client, server), daemon=True)
    t.start()
    down(server, client)
    try:
        client.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    t.join()
    client.close(); server.close()

listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
listener.bind(("127.0.0.1", port))
listener.listen(4096)
print("ready", flush=True)
while True:
    conn, _ = listener.accept()
    threading.Thread(target=handle, args=(conn,), daemon=True).start()
'''


class DelayProxy:
    """The delay proxy: ``processes`` processes sharing one port (SO_REUSEPORT), two threads per connection.

    ``set_delay`` applies at run time; the counters are read through a shared file (one slot per process).
    """

    def __init__(self, target_port: int, work: Path, name: str = "proxy", processes: int = 1) -> None:
        import mmap

        self.port = _free_port()
        self.processes = processes
        path = work / f"{name}.stats"
        path.write_bytes(b"\0" * (8 + 24 * processes))
        self._file = open(path, "r+b")  # noqa: SIM115 - kept open for the map
        self._map = mmap.mmap(self._file.fileno(), 0)
        for slot in range(processes):
            proc = subprocess.Popen([sys.executable, "-c", _PROXY, str(self.port), str(target_port), str(path),
                                     str(slot)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _started.append(proc)
            _wait_port(self.port, proc)

    def set_delay(self, ms: float) -> None:
        import struct

        struct.pack_into("d", self._map, 0, ms / 1000)

    def counts(self) -> tuple[int, int]:
        """(requests forwarded, bytes the server sent) so far, over every proxy process."""
        import struct

        slots = [struct.unpack_from("qq", self._map, 8 + 24 * k) for k in range(self.processes)]
        return sum(r for r, _ in slots), sum(b for _, b in slots)


# --------------------------------------------------------------------------- the ceiling


def ceiling(port: int, names: list[str], sizes: list[int], clients: int, seconds: float, chunk: int) -> dict:
    """Requests/s and MB/s that ``clients`` concurrent ranged GETs of ``chunk`` bytes get from 127.0.0.1:port."""
    import aiohttp

    rng = np.random.default_rng(0)

    async def run() -> tuple[int, int, float]:
        done = [0, 0]
        stop = time.perf_counter() + seconds
        connector = aiohttp.TCPConnector(limit=clients)
        async with aiohttp.ClientSession(connector=connector) as session:
            async def client() -> None:
                while time.perf_counter() < stop:
                    k = int(rng.integers(len(names)))
                    start = int(rng.integers(max(1, sizes[k] - chunk)))
                    headers = {"Range": f"bytes={start}-{start + chunk - 1}"}
                    async with session.get(f"http://127.0.0.1:{port}/{names[k]}", headers=headers) as r:
                        body = await r.read()
                        if r.status not in (200, 206):
                            raise RuntimeError(f"the ceiling's GET of {names[k]} got HTTP {r.status}")
                    done[0] += 1
                    done[1] += len(body)
            t0 = time.perf_counter()
            await asyncio.gather(*(client() for _ in range(clients)))
            return done[0], done[1], time.perf_counter() - t0

    n, nbytes, elapsed = asyncio.run(run())
    return {"requests_per_s": n / elapsed, "mb_per_s": nbytes / elapsed / 1e6}


# --------------------------------------------------------------------------- one cell (its own process)


def _tree_cpu_and_rss() -> tuple[float, int]:
    import psutil

    me = psutil.Process()
    t = me.cpu_times()
    cpu, rss = t.user + t.system + t.children_user + t.children_system, me.memory_info().rss
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            c = child.cpu_times()
            cpu += c.user + c.system
            rss += child.memory_info().rss
    return cpu, rss


def _sample_peak_rss() -> tuple[list, threading.Event]:
    """``(peak, stop)``: a thread samples the process tree's RSS into ``peak[0]`` every 0.2 s until ``stop`` is set."""
    peak = [0]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.2):
            peak[0] = max(peak[0], _tree_cpu_and_rss()[1])

    threading.Thread(target=sample, daemon=True).start()
    return peak, sampling


def _pipeline(ds, stamps: str, workers: int):
    """``ds`` as every cell reads it: stamped, 8 reader threads, batch 32, ``workers`` mp_prefetch workers."""
    import grain

    from audiotree import AudioTree

    it = ds.map(ItemStamp(stamps)).to_iter_dataset(grain.ReadOptions(num_threads=8, prefetch_buffer_size=16))
    it = it.batch(32, batch_fn=AudioTree.batch)
    if workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return it


def run_cell(index: str, batches: int, workers: int, stamps: str, min_window: float, read_ahead: bool = True) -> dict:
    from audiotree.sources import Corpus, create_audio_dataset

    peak, sampling = _sample_peak_rss()
    t_start = time.perf_counter()
    corpus = Corpus(index=index, on_stale="trust") if read_ahead else Corpus(index=index, on_stale="trust",
                                                                              read_ahead=None)
    ds = create_audio_dataset(corpus=corpus, duration=3.0, sample_rate=16000, num_epochs=None)
    return _window(_pipeline(ds, stamps, workers), t_start, stamps, batches, workers, min_window, peak, sampling)


def _window(it, t_start: float, stamps: str, batches: int, workers: int, min_window: float, peak: list,
            sampling: threading.Event, count_paths: bool = True) -> dict:
    """Takes batches of ``it`` (its first, one more from each worker, then ``batches`` and at least ``min_window``
    s) and measures the window after the first ones: items made, CPU, reads, peak RSS."""
    it = iter(it)
    next(it)
    first = time.perf_counter() - t_start
    for _ in range(max(0, workers - 1) + 1):  # one more from each worker: past the start-up
        next(it)
    # The workers' buffers are full by now, so taking batches is faster than making them at first: the rates are
    # of items *made* (stamped, in every process) while the window lasts, not of items taken.
    from audiotree.io import read_stats

    cpu0, _ = _tree_cpu_and_rss()
    reads0 = read_stats()
    made0, t0 = os.path.getsize(stamps), time.perf_counter()
    items = taken = 0
    paths: dict[str, int] = {}  # the items taken, by file: the excerpts' encoded bytes (see cell)
    while taken < batches or time.perf_counter() - t0 < min_window:
        batch = next(it)
        if count_paths:
            for p in batch.filepath:
                paths[str(p)] = paths.get(str(p), 0) + 1
        items += int(np.shape(batch.waveform)[0])
        taken += 1
    made, elapsed = os.path.getsize(stamps) - made0, time.perf_counter() - t0
    cpu = _tree_cpu_and_rss()[0] - cpu0
    reads = read_stats() - reads0
    sampling.set()
    peak[0] = max(peak[0], _tree_cpu_and_rss()[1])
    return {"first_batch_s": first, "items_per_s": made / elapsed, "items_per_cpu_s": made / max(cpu, 1e-9),
            "peak_rss_mb": peak[0] / 1e6, "items": items, "made_in_window": made, "paths": paths,
            # the loader's own counts over the window (all processes): how long readers waited on storage, and
            # how many reads the read-ahead did not hold
            "wait_ms_per_item": reads.wait_seconds * 1e3 / max(made, 1),
            "misses_per_item": reads.cache_misses / max(made, 1),
            # what the loader fetched while the window lasted (steady state: no start-up, no plans left unread at
            # the end), per item made in it
            "window_kb_per_item": reads.bytes / 1e3 / max(made, 1),
            "window_requests_per_item": reads.requests / max(made, 1)}


def run_render_cell(where: str, batches: int, workers: int, stamps: str, min_window: float, order: str) -> dict:
    """A render read as a training job reads it: ``open_render(where)`` (its default read-ahead), ``.shuffle(0)``
    when ``order`` is ``shuffled``, repeated, 8 reader threads, batch 32, ``workers`` mp_prefetch workers."""
    from audiotree.sources import open_render

    peak, sampling = _sample_peak_rss()
    t_start = time.perf_counter()
    ds = open_render(where)
    ds = (ds.shuffle(seed=0) if order == "shuffled" else ds).repeat()
    return _window(_pipeline(ds, stamps, workers), t_start, stamps, batches, workers, min_window, peak, sampling,
                   count_paths=False)


def _render_item(i: int, frames: int):
    from audiotree import AudioTree

    rng = np.random.default_rng(i)
    return AudioTree.create((rng.standard_normal((1, 1, frames)) * 0.1).astype(np.float32), 44100,
                            offset=np.asarray([float(i)]))


def write_render(folder: Path, items: int, seconds: float = 3.0) -> int:
    """A ``tree`` render of ``items`` items of ``seconds`` s 44.1 kHz mono float32 noise in ``folder / "render"``
    (reused when a finished one of that many items is there); returns its bytes."""
    import functools

    import grain

    import audiotree
    from audiotree.sources import open_render

    out = folder / "render"
    try:
        reusable = len(open_render(out)) == items
    except (FileNotFoundError, RuntimeError, ValueError):
        reusable = False
    if not reusable:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        frames = int(round(seconds * 44100))
        audiotree.render(grain.MapDataset.range(items).map(functools.partial(_render_item, frames=frames)), out,
                         items, batch_size=50)
    os.chmod(folder, 0o755)
    for p in out.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    os.chmod(out, 0o755)
    return sum(p.stat().st_size for p in out.rglob("*") if p.is_file())


def render_cell(where: str, order: str, workers: int, args, proxy: "DelayProxy | None") -> dict:
    """Runs one render cell in a fresh process (see :func:`_counted_run`)."""
    result = _counted_run(["--render-cell", where, "--order", order, "--batches", str(args.batches), "--workers",
                           str(workers), "--min-window", str(args.min_window)], f"render cell {where}", proxy)
    result.pop("paths")
    return result


def _counted_run(argv: list[str], what: str, proxy: "DelayProxy | None") -> dict:
    """Runs this script with ``argv`` (a cell) in a fresh process and returns its result with the rig's CPU, and
    the requests and bytes counted at the proxy, per item made."""
    fd, stamps = tempfile.mkstemp(prefix="remote-bench-", suffix=".stamps")
    os.close(fd)
    before = proxy.counts() if proxy else (0, 0)
    rig0 = rig_cpu()
    try:
        env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
        done = subprocess.run([sys.executable, __file__, *argv, "--stamps", stamps], capture_output=True, text=True,
                              timeout=1800, env=env)
        line = next((x for x in done.stdout.splitlines() if x.startswith(RESULT)), None)
        if line is None:
            raise RuntimeError(f"{what} failed (rc {done.returncode}):\n{done.stderr[-3000:]}")
        result = json.loads(line[len(RESULT):])
        made = os.path.getsize(stamps)
    finally:
        os.unlink(stamps)
    time.sleep(0.2)
    after = proxy.counts() if proxy else (0, 0)
    result["rig_cpu_ms_per_item"] = (rig_cpu() - rig0) * 1e3 / made
    result["made"] = made
    result["requests_per_item"] = (after[0] - before[0]) / made
    result["kb_per_item"] = (after[1] - before[1]) / made / 1e3
    return result


def _cell_main(args) -> int:
    if args.render_cell:
        result = run_render_cell(args.render_cell, args.batches, args.workers, args.stamps, args.min_window,
                                 args.order)
    else:
        result = run_cell(args.cell, args.batches, args.workers, args.stamps, args.min_window, not args.no_read_ahead)
    print(RESULT, json.dumps(result), flush=True)
    import multiprocessing

    for child in multiprocessing.active_children():  # end the workers now; skip the interpreter teardown
        child.kill()
        child.join(timeout=5)
    sys.stderr.flush()
    os._exit(0)


def rig_cpu() -> float:
    """CPU seconds so far of every server and proxy process this run started (and their children: nginx's
    workers): what the rig takes from the cores the loader runs on."""
    import psutil

    total = 0.0
    for proc in list(_started):
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(proc.pid)
            for q in [p, *p.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    t = q.cpu_times()
                    total += t.user + t.system
    return total


def excerpt_bytes(index: Path, paths: dict[str, int], seconds: float = 3.0) -> float:
    """The mean encoded bytes of the excerpts taken: per item, its file's bytes times the share of the file's
    duration the excerpt covers (``seconds``, or the whole file if shorter), from the index's ``size`` and
    ``duration`` columns (for a tar member or a Parquet cell, its own bytes)."""
    import pyarrow.parquet as pq

    import re

    table = pq.ParquetFile(index).read(columns=["path", "size", "duration"]).to_pydict()
    # A Parquet cell's row holds its file's size; the cell's own is in its path (``...&size=N::FILE``).
    sizes = [int(m.group(1)) if (m := re.search(r"[?&]size=(\d+)", p.split("::")[0])) else s
             for p, s in zip(table["path"], table["size"])]
    share = {p: s * min(1.0, seconds / d) for p, s, d in zip(table["path"], sizes, table["duration"]) if s and d}
    counted = [(share[p], n) for p, n in paths.items() if p in share]
    if not counted:
        return float("nan")
    return sum(b * n for b, n in counted) / sum(n for _, n in counted)


def cell(index: Path, args, proxy: DelayProxy | None, read_ahead: bool = True) -> dict:
    """Runs one cell in a fresh process (see :func:`_counted_run`), with the excerpts' own encoded bytes."""
    result = _counted_run(["--cell", str(index), "--batches", str(args.batches), "--workers", str(args.workers),
                           "--min-window", str(args.min_window)] + ([] if read_ahead else ["--no-read-ahead"]),
                          f"cell {index}", proxy)
    result["excerpt_kb"] = excerpt_bytes(index, result.pop("paths")) / 1e3
    return result


def render_section(args, work: Path) -> list[str]:
    """The render cells (``--render``): writes or reuses the render, serves it (its own server and delay proxy),
    runs each cell, and returns the section's Markdown lines."""
    folder = Path(args.render_dir or Path(tempfile.gettempdir()) / f"audiotree-remote-render-{args.render}")
    t0 = time.perf_counter()
    nbytes = write_render(folder, args.render)
    out = folder / "render"
    print(f"render: {args.render} items, {nbytes / 1e6:.0f} MB, in {out} ({time.perf_counter() - t0:.0f} s)",
          flush=True)
    (work / "render-server").mkdir()
    server, port = start_server(args.server, folder, work / "render-server")
    proxy = DelayProxy(port, work, "renderproxy", processes=args.proxy_processes)
    print(f"render server: {server} on 127.0.0.1:{port}; delay proxy on :{proxy.port}", flush=True)
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.stat().st_size > (1 << 20))
    names = [str(p.relative_to(folder)) for p in files]
    sizes = [p.stat().st_size for p in files]
    seconds = args.ceiling_seconds or (1.0 if args.quick else 5.0)
    ceilings = {label: ceiling(target, names, sizes, args.ceiling_clients, seconds, 1 << 20)["mb_per_s"]
                for label, target in (("server", port), ("proxy +0 ms", proxy.port))}
    print("render ceilings, MB/s (1 MiB ranges):", ceilings, flush=True)
    workers = [int(x) for x in args.render_workers.split(",") if x.strip()]
    delays = [float(x) for x in args.render_delays.split(",") if x.strip()]
    rows: list[tuple[str, str, int, dict]] = []
    for order in ("item order", "shuffled"):
        kind = "shuffled" if order == "shuffled" else "item"
        for w in workers:
            rows.append(("local", order, w, render_cell(str(out), kind, w, args, None)))
            print("render", rows[-1][:3], rows[-1][3], flush=True)
            for ms in delays:
                proxy.set_delay(ms)
                rows.append((f"http +{ms:g} ms", order, w,
                             render_cell(f"http://127.0.0.1:{proxy.port}/render", kind, w, args, proxy)))
                print("render", rows[-1][:3], rows[-1][3], flush=True)
    item_kb = nbytes / args.render / 1e3
    lines = [f"A `tree` render of {args.render:,} items of 3 s 44.1 kHz mono float32 ({nbytes / 1e6:.0f} MB, "
             f"{item_kb:.0f} KB per item), served by {server}; read as a training job reads it: `open_render(...)` "
             "(its default read-ahead), in item order or `.shuffle(0)`-ed, repeated, ReadOptions(num_threads=8, "
             f"prefetch_buffer_size=16), batch 32; items made while {args.batches} batches are taken and at least "
             f"{args.min_window:g} s pass. The rig serves {ceilings['server']:.0f} MB/s straight and "
             f"{ceilings['proxy +0 ms']:.0f} MB/s through the proxy (1 MiB ranges, {args.ceiling_clients} "
             "concurrent): "
             f"{ceilings['proxy +0 ms'] / item_kb * 1e3:.0f} items/s at most over HTTP.",
             "",
             "| render cell | order | mp_prefetch workers | items/s | × local | MB/s | items/CPU-s | rig CPU ms/item | "
             "first batch s | requests/item | KB/item (× item) | reader wait ms/item | peak RSS MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    local = {(o, w): r for label, o, w, r in rows if label == "local"}
    for label, order, w, r in rows:
        remote = label != "local"
        lines.append(f"| {label} | {order} | {w} | {r['items_per_s']:.0f} | "
                     f"{r['items_per_s'] / local[order, w]['items_per_s']:.2f} | {r['items_per_s'] * item_kb / 1e3:.0f} | "
                     f"{r['items_per_cpu_s']:.0f} | {r['rig_cpu_ms_per_item']:.2f} | {r['first_batch_s']:.1f} | "
                     + (f"{r['requests_per_item']:.3f} | {r['kb_per_item']:.0f} ({r['kb_per_item'] / item_kb:.2f}) | "
                        if remote else " |  | ")
                     + f"{r['wait_ms_per_item']:.1f} | {r['peak_rss_mb']:.0f} |")
    return lines


# --------------------------------------------------------------------------- main


def _index(sources: list[str], out: Path) -> None:
    from audiotree.index import build_index

    build_index(sources, out, executor="process", max_workers=2, show_progress=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short files, 4 batches per cell, 1 s ceilings")
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--min-seconds", type=float, default=None)
    ap.add_argument("--max-seconds", type=float, default=None)
    ap.add_argument("--batches", type=int, default=None, help="timed batches per cell")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--min-window", type=float, default=None, help="seconds each cell's timed window lasts at least")
    ap.add_argument("--delays", default="0,20,50,100", help="ms added per request, comma separated")
    ap.add_argument("--server", choices=("nginx", "aiohttp"), default="nginx")
    ap.add_argument("--s3-delays", default="0,50", help="ms per request for the S3 (moto) cells; '' for none")
    ap.add_argument("--proxy-processes", type=int, default=1, help="processes of each delay proxy")
    ap.add_argument("--ceiling-clients", type=int, default=64)
    ap.add_argument("--ceiling-seconds", type=float, default=None)
    ap.add_argument("--corpus-dir", default=None, help="where the corpus is written (reused when it matches)")
    ap.add_argument("--no-containers", dest="containers", action="store_false",
                    help="skip the tar shard and Parquet cells (the corpus packed, local and at +50 ms)")
    ap.add_argument("--off-delays", default="50", help="ms per request of the HTTP cells also run without read-ahead")
    ap.add_argument("--render", type=int, default=0, metavar="ITEMS",
                    help="also the render cells: a tree render of ITEMS items of 3 s (0: none)")
    ap.add_argument("--render-only", action="store_true", help="only the render cells (no corpus, no other cell)")
    ap.add_argument("--render-delays", default="50", help="ms per request of the render's HTTP cells")
    ap.add_argument("--render-workers", default="0,2", help="mp_prefetch workers of the render cells")
    ap.add_argument("--render-dir", default=None, help="where the render is written (reused when it matches)")
    ap.add_argument("--render-cell", help=argparse.SUPPRESS)
    ap.add_argument("--order", default="item", help=argparse.SUPPRESS)
    ap.add_argument("--no-read-ahead", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cell", help=argparse.SUPPRESS)
    ap.add_argument("--stamps", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cell or args.render_cell:
        return _cell_main(args)
    flags = "".join(f" --{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in vars(args).items()
                    if v != ap.get_default(k))
    lo, hi = (8.0, 20.0) if args.quick else (30.0, 150.0)
    args.min_seconds = lo if args.min_seconds is None else args.min_seconds
    args.max_seconds = hi if args.max_seconds is None else args.max_seconds
    args.batches = args.batches or (4 if args.quick else 20)
    args.min_window = args.min_window if args.min_window is not None else (3.0 if args.quick else 10.0)
    seconds = args.ceiling_seconds or (1.0 if args.quick else 5.0)
    if args.server == "nginx" and shutil.which("nginx") is None:
        print("nginx is not installed (apt-get install -y nginx-light): using the aiohttp server instead; its "
              "ceiling below is the rig's.", file=sys.stderr)
        args.server = "aiohttp"
    if args.render_only:
        if not args.render:
            ap.error("--render-only needs --render ITEMS")
        work = Path(tempfile.mkdtemp(prefix="remote-bench-"))
        os.chmod(work, 0o755)
        try:
            lines = render_section(args, work)
            load = os.getloadavg()[0]
        finally:
            _stop_all()
            shutil.rmtree(work, ignore_errors=True)
        print()
        print(f"## A render over HTTP against local (`python benchmarks/remote.py{flags}`, "
              f"{time.strftime('%Y-%m-%d %H:%M')} UTC, 2 shared cores, load average {load:.1f})")
        print()
        print("\n".join(lines))
        return 0

    tag = f"{args.files}-{args.min_seconds:g}-{args.max_seconds:g}"
    corpus = Path(args.corpus_dir or Path(tempfile.gettempdir()) / f"audiotree-remote-corpus-{tag}")
    t0 = time.perf_counter()
    plan = write_corpus(corpus, args.files, args.min_seconds, args.max_seconds)
    names = [p["name"] for p in plan]
    sizes = [(corpus / n).stat().st_size for n in names]
    print(f"corpus: {len(names)} files, {sum(sizes) / 1e6:.0f} MB, {sum(p['seconds'] for p in plan) / 60:.0f} min, "
          f"in {corpus} ({time.perf_counter() - t0:.0f} s)", flush=True)

    work = Path(tempfile.mkdtemp(prefix="remote-bench-"))
    os.chmod(work, 0o755)
    rows: list[tuple[str, dict]] = []
    try:
        server, port = start_server(args.server, corpus, work)
        proxy = DelayProxy(port, work, processes=args.proxy_processes)
        print(f"server: {server} on 127.0.0.1:{port}; delay proxy on :{proxy.port}", flush=True)
        ceilings: dict[str, tuple[dict, dict]] = {}
        for label, target in (("server", port), ("proxy +0 ms", proxy.port)):
            ceilings[label] = (ceiling(target, names, sizes, args.ceiling_clients, seconds, 65536),
                               ceiling(target, names, sizes, args.ceiling_clients, seconds, 1 << 20))
            small, big = ceilings[label]
            print(f"ceiling, {label}: {small['requests_per_s']:.0f} requests/s (64 KiB ranges), "
                  f"{big['mb_per_s']:.0f} MB/s (1 MiB ranges)", flush=True)

        s3_delays = [float(x) for x in args.s3_delays.split(",") if x.strip()]
        if s3_delays:
            moto_port = start_moto(corpus, names)
            s3_proxy = DelayProxy(moto_port, work, "s3proxy", processes=args.proxy_processes)
            print(f"server: moto S3 on 127.0.0.1:{moto_port}; delay proxy on :{s3_proxy.port}", flush=True)
            keys = [f"bench/corpus/{n}" for n in names]
            ceilings["moto S3"] = (ceiling(moto_port, keys, sizes, args.ceiling_clients, seconds, 65536),
                                   ceiling(moto_port, keys, sizes, args.ceiling_clients, seconds, 1 << 20))
            print("ceiling, moto S3:", ceilings["moto S3"], flush=True)

        local_index, remote_index = work / "local.parquet", work / "http.parquet"
        _index([str(corpus / n) for n in names], local_index)
        proxy.set_delay(0)
        _index([f"http://127.0.0.1:{proxy.port}/{n}" for n in names], remote_index)
        rows.append(("local", cell(local_index, args, None)))
        print("local", rows[-1][1], flush=True)
        off = {float(x) for x in args.off_delays.split(",") if x.strip()}
        for ms in [float(x) for x in args.delays.split(",") if x.strip()]:
            proxy.set_delay(ms)
            if ms in off:
                rows.append((f"http +{ms:g} ms, read-ahead off", cell(remote_index, args, proxy, read_ahead=False)))
                print(rows[-1][0], rows[-1][1], flush=True)
            rows.append((f"http +{ms:g} ms", cell(remote_index, args, proxy)))
            print(rows[-1][0], rows[-1][1], flush=True)
        if args.containers:
            tars, parquets = write_packed(corpus, plan)
            for kind, packed in (("tar", tars), ("parquet", parquets)):
                local_packed, remote_packed = work / f"{kind}-local.parquet", work / f"{kind}-http.parquet"
                _index([str(corpus / n) for n in packed], local_packed)
                proxy.set_delay(0)
                _index([f"http://127.0.0.1:{proxy.port}/{n}" for n in packed], remote_packed)
                rows.append((f"{kind} local", cell(local_packed, args, None)))
                print(rows[-1][0], rows[-1][1], flush=True)
                proxy.set_delay(50)
                rows.append((f"{kind} http +50 ms", cell(remote_packed, args, proxy)))
                print(rows[-1][0], rows[-1][1], flush=True)
        if s3_delays:
            os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret",
                              AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=f"http://127.0.0.1:{s3_proxy.port}")
            s3_index = work / "s3.parquet"
            s3_proxy.set_delay(0)
            _index([f"s3://bench/corpus/{n}" for n in names], s3_index)
            for ms in s3_delays:
                s3_proxy.set_delay(ms)
                rows.append((f"s3 (moto) +{ms:g} ms", cell(s3_index, args, s3_proxy)))
                print(rows[-1][0], rows[-1][1], flush=True)
        render_lines = render_section(args, work) if args.render else []
        load = os.getloadavg()[0]
    finally:
        _stop_all()
        shutil.rmtree(work, ignore_errors=True)

    local = rows[0][1]
    print()
    print(f"## Remote against local (`python benchmarks/remote.py{flags}`, {time.strftime('%Y-%m-%d %H:%M')} UTC, "
          f"2 shared cores, load average {load:.1f})")
    print()
    print(f"Corpus: {len(names)} files (WAV, FLAC, Ogg, MP3; 8-96 kHz), {sum(sizes) / 1e6:.0f} MB. Server: {server}. "
          f"Pipeline: index, random 3 s excerpts at 16 kHz, batch 32, {args.workers} mp_prefetch workers, "
          f"ReadOptions(num_threads=8, prefetch_buffer_size=16), on_stale='trust'; items made while "
          f"{args.batches} batches are taken and at least {args.min_window:g} s pass, per cell.")
    print()
    print("| rig ceiling (no loader, one aiohttp client, "
          f"{args.ceiling_clients} concurrent) | requests/s (64 KiB) | MB/s (1 MiB ranges) |")
    print("|---|---|---|")
    for label, (small, big) in ceilings.items():
        print(f"| {label} | {small['requests_per_s']:.0f} | {big['mb_per_s']:.0f} |")
    print()
    print("| cell | items/s | × local (its own format's) | items/CPU-s | rig CPU ms/item | first batch s | "
          "requests/item | KB/item | × excerpt | in the window: requests/item, × excerpt | reader wait ms/item | "
          "peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, r in rows:
        reqs = "" if label.endswith("local") else f"{r['requests_per_item']:.2f}"
        kb = "" if label.endswith("local") else f"{r['kb_per_item']:.0f}"
        vs_excerpt = "" if label.endswith("local") else f"{r['kb_per_item'] / r['excerpt_kb']:.2f}"
        window = ("" if label.endswith("local") else
                  f"{r['window_requests_per_item']:.2f}, {r['window_kb_per_item'] / r['excerpt_kb']:.2f}")
        base = dict(rows).get(label.split(" http")[0] + " local", local) if " http" in label else local
        print(f"| {label} | {r['items_per_s']:.1f} | {r['items_per_s'] / base['items_per_s']:.2f} | "
              f"{r['items_per_cpu_s']:.1f} | {r['rig_cpu_ms_per_item']:.2f} | {r['first_batch_s']:.1f} | {reqs} | {kb} | "
              f"{vs_excerpt} | {window} | {r['wait_ms_per_item']:.1f} | {r['peak_rss_mb']:.0f} |")
    if render_lines:
        print()
        print("\n".join(render_lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

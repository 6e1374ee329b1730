"""Object-storage figures: bytes on the wire per excerpt, and read threads against latency.

Starts ``--backends`` moto S3 server processes on 127.0.0.1 (default 1; each
holds the same objects) and, in front of them, a small TCP proxy in its own
process that delays every chunk a client sends by ``--latency-ms`` (default
20 ms, so every request pays it at least once), gives each connection its own
threads (the delay never serialises requests), and counts the bytes the
servers send back. Both figures are measured at that proxy, i.e. on the server side of the
connection (HTTP headers included).

1. Bytes: one 3 s excerpt from the middle of a 60 s 44.1 kHz stereo WAV and
   FLAC file, against the excerpt's encoded size (its share of the file).
2. Indexed FLAC: a corpus of ``--flac-files`` FLAC files of 10 s to 10 min at
   mixed rates (8 to 48 kHz), stereo and mono, on S3, indexed (with loudness,
   so each file's seek points are in the index); ``--flac-excerpts`` random 3 s
   excerpts per file read through ``create_audio_dataset(corpus=Corpus(index=...))``, each
   counted at the proxy (requests and bytes), against the goal of at most 2
   requests and 1.5x the excerpt's encoded size + 64 KiB; and the same excerpts
   through the same index without its ``seek_points`` column (format 1.1).
3. Threads: a 3 s random-excerpt dataset over 24 WAV files, iterated with
   ``grain.ReadOptions(num_threads=0)`` and ``num_threads=8`` side by side in
   one run; items/s and their ratio (wall clock; per-core figures do not
   apply, the work is waiting).

    python benchmarks/storage.py            # prints and rewrites its section of BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _sections  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
_OLD_BEGIN = "<!-- storage: written by benchmarks/storage.py -->"
_OLD_END = "<!-- storage: end -->"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LatencyProxy:
    """TCP proxy 127.0.0.1:port -> targets, delaying client chunks and counting server bytes.

    Each client connection gets its own pair of pump threads and its own
    connection to one of ``target_ports`` (round robin), so the delay is paid
    per request without serialising requests, and no single backend's GIL
    bounds the request rate.
    """

    def __init__(self, target_ports: list[int], latency: float) -> None:
        self.latency = latency
        self.targets = [("127.0.0.1", port) for port in target_ports]
        self.bytes_from_server = 0
        self.requests = 0  # request lines seen from clients
        self.lookups = 0  # of which HEADs (metadata lookups)
        self.connections = 0
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            target = self.targets[self.connections % len(self.targets)]
            self.connections += 1
            server = socket.create_connection(target)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream:
                    with self.lock:
                        self.requests += data.count(b" HTTP/1.1\r\n")
                        self.lookups += data.startswith(b"HEAD ") + data.count(b"\r\nHEAD ")
                    time.sleep(self.latency)
                else:
                    with self.lock:
                        self.bytes_from_server += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def stop(self) -> None:
        self.stopped = True
        self.sock.close()


def _serve_moto(ports, stop) -> None:
    """Child process: one moto S3 server (moto answers one request at a time per process: its GIL)."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    ports.put(port)
    try:
        stop.wait()
    finally:
        server.stop()


def _flags(args) -> str:
    """The command-line flags of this run that differ from the defaults, as typed."""
    flags = "" if args.latency_ms == 20.0 else f" --latency-ms {args.latency_ms:g}"
    return flags + ("" if args.backends == 1 else f" --backends {args.backends}")


def _serve_proxy(latency: float, backends: list[int], ports, counter, requests, lookups, stop) -> None:
    """Child process: the latency proxy, so neither the readers nor moto share its GIL."""
    proxy = LatencyProxy(backends, latency)
    ports.put(proxy.port)
    try:
        while not stop.wait(0.02):
            counter.value, requests.value, lookups.value = proxy.bytes_from_server, proxy.requests, proxy.lookups
    finally:
        proxy.stop()


@contextlib.contextmanager
def serving(backends: int, latency_ms: float):
    """``backends`` moto processes and the latency proxy in front of them, stopped on exit.

    Yields ``(backend ports, proxy port, sent_so_far)``; ``sent_so_far()`` is
    ``(bytes the servers have sent through the proxy, requests it forwarded, of which HEADs)``. Sets the AWS
    credential variables (not the endpoint) for this process.
    """
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    ports, stop = ctx.Queue(), ctx.Event()
    counter, requests, lookups = ctx.Value("q", 0), ctx.Value("q", 0), ctx.Value("q", 0)
    children = [ctx.Process(target=_serve_moto, args=(ports, stop), daemon=True) for _ in range(backends)]
    for child in children:
        child.start()

    def sent_so_far() -> tuple[int, int, int]:
        time.sleep(0.1)  # let the proxy publish its counts
        return counter.value, requests.value, lookups.value

    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret", AWS_DEFAULT_REGION="us-east-1")
    try:
        ports_of_backends = [ports.get(timeout=120) for _ in children]
        proxy = ctx.Process(target=_serve_proxy, args=(latency_ms / 1000, ports_of_backends, ports, counter, requests,
                                                          lookups, stop),
                            daemon=True)
        proxy.start()
        children.append(proxy)
        yield ports_of_backends, ports.get(timeout=120), sent_so_far
    finally:
        stop.set()
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.terminate()
                child.join(timeout=10)


def _encode(x: np.ndarray, rate: int, fmt: str) -> bytes:
    import soundfile

    buf = io.BytesIO()
    soundfile.write(buf, x, rate, format=fmt, subtype="PCM_16")
    return buf.getvalue()


# (seconds, rate, channels) of the indexed corpus, cycled: 10 s to 10 min, 8 to 48 kHz, mono and stereo.
_FLAC_SHAPES = [(10, 16000, 1), (600, 44100, 2), (45, 48000, 2), (180, 8000, 1), (30, 22050, 2), (420, 16000, 1),
                (90, 44100, 1), (15, 24000, 2)]


def _music(seconds: float, rate: int, channels: int, seed: int) -> np.ndarray:
    """Tones with vibrato and a little noise: compresses like music does under FLAC (~40-60 % of PCM)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    out = []
    for c in range(channels):
        f = 110 * 2 ** ((seed + c) % 12 / 12)
        x = sum(0.2 / k * np.sin(2 * np.pi * k * f * t + 3 * np.sin(2 * np.pi * 0.2 * t)) for k in (1, 2, 3, 5))
        out.append(x * (0.6 + 0.4 * np.sin(2 * np.pi * 0.05 * t + c)) + 0.01 * rng.standard_normal(t.size))
    return np.stack(out, axis=1).astype(np.float32)


def _indexed_flac(direct, counts, args) -> dict:
    """Per excerpt of the indexed FLAC corpus: (GETs, bytes, excerpt's encoded size, first of its file?, lookups)."""
    import json
    import tempfile

    import pyarrow.parquet as pq

    from audiotree.excerpts.config import ExcerptConfig
    from audiotree.index import build_index, freshness, open_index
    from audiotree.io.flac_indexed import clear_header_cache
    from audiotree.sources import Corpus, Output, create_audio_dataset

    shapes = [_FLAC_SHAPES[k % len(_FLAC_SHAPES)] for k in range(args.flac_files)]
    for k, (seconds, rate, channels) in enumerate(shapes):
        data = _encode(_music(seconds, rate, channels, k), rate, "FLAC")
        for fs in direct:
            fs.pipe(f"bench/flac/f{k:02d}.flac", data)
    tmp = Path(tempfile.mkdtemp(prefix="storage-bench-"))
    out = tmp / "flac.parquet"
    t0 = time.perf_counter()
    build_index(["s3://bench/flac"], out, executor="serial", show_progress=False)
    build_seconds = time.perf_counter() - t0
    rows = {r["path"]: r for r in open_index(out, columns=["path", "size", "duration", "seek_points"]).table.to_pylist()}
    table = pq.read_table(out)  # the same index as format 1.1 wrote it: no seek points
    meta = json.loads(table.schema.metadata[b"audiotree"])
    meta["format_version"] = [1, 1]
    old = tmp / "flac-1.1.parquet"
    pq.write_table(table.drop_columns(["seek_points"]).replace_schema_metadata(
        {b"audiotree": json.dumps(meta).encode()}), old)
    result = {"files": shapes, "build_seconds": build_seconds}
    for name, index in (("table", out), ("none", old)):
        clear_header_cache()
        freshness.clear()
        ds = create_audio_dataset(corpus=Corpus(index=str(index)), output=Output(mono=True), duration=3.0, sample_rate=16000, num_epochs=None,
                                  shuffle_seed=0, excerpt_seed=1, excerpt=ExcerptConfig(strategy="random"))
        seen, excerpts = set(), []
        for i in range(args.flac_excerpts * len(rows)):
            before = counts()
            item = ds[i]
            after = counts()
            path = item.filepath[0]
            row = rows[path]
            header = int(row["seek_points"][1])
            share = (row["size"] - header) * 3 / row["duration"]
            lookups = after[2] - before[2]
            excerpts.append((after[1] - before[1] - lookups, after[0] - before[0], share, path not in seen, lookups))
            seen.add(path)
        result[name] = excerpts
    return result


def _flac_lines(flac: dict, args) -> list[str]:
    goal = lambda e: e[1] <= 1.5 * e[2] + 64 * 1024  # noqa: E731
    shapes = ", ".join(f"{s // 60} min" if s >= 60 else f"{s} s" for s, _, _ in flac["files"])
    rates = sorted({r for _, r, _ in flac["files"]})
    lines = [
        f"Indexed FLAC: {len(flac['files'])} files on S3 ({shapes}; {', '.join(f'{r / 1000:g}' for r in rates)} kHz; "
        "mono and stereo), indexed with loudness (each file fetched in one GET; build "
        f"{flac['build_seconds']:.0f} s), then {args.flac_excerpts} random 3 s excerpts per file through "
        "`create_audio_dataset(corpus=Corpus(index=...))` (default `on_stale=\"raise\"`: one freshness lookup per file and process), "
        "each counted at the proxy. The excerpt's encoded size is its share of the file's audio bytes.",
        "",
        "| indexed FLAC, 3 s excerpts | excerpts | GETs per excerpt (mean / max) | lookups (HEAD) | bytes / excerpt's "
        "encoded size (mean / max) | within 1.5× + 64 KiB in ≤ 2 GETs |",
        "|---|---|---|---|---|---|",
    ]
    for name, what in (("table", "by seek points (format 1.2 index)"),
                       ("none", "without seek points (format 1.1 index: libsndfile's probing seeks)")):
        for first, when in ((True, "first of its file"), (False, "later")):
            group = [e for e in flac[name] if e[3] == first]
            if not group:
                continue
            ok = sum(1 for e in group if e[0] <= 2 and goal(e))
            req = [e[0] for e in group]
            ratio = [e[1] / e[2] for e in group]
            lines.append(f"| {what}, {when} | {len(group)} | {np.mean(req):.2f} / {max(req)} | "
                         f"{sum(e[4] for e in group)} | {np.mean(ratio):.2f}× / {max(ratio):.2f}× | {ok} of {len(group)} |")
    met = all(e[0] <= 2 and goal(e) for e in flac["table"])
    lines += [
        "",
        ("Verdict: goal met. " if met else "Verdict: goal NOT met. ")
        + "By seek points an excerpt is one ranged GET from the seek point before it to the one after it (points "
        "about 1 s apart), plus, once per file and process, a GET of the header (kept in a bounded per-process "
        "cache). The freshness check of `on_stale` costs at most one lookup per file and process (here s3fs's "
        "listing cache from the index build answered it; none with `on_stale=\"trust\"`). Bytes include the HTTP "
        "headers; the goal's bound counts everything the server sent for the excerpt, the header's GET included.",
    ]
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--items", type=int, default=96, help="items per thread setting")
    ap.add_argument("--backends", type=int, default=1, help="moto server processes behind the proxy")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved runs per thread setting (median kept)")
    ap.add_argument("--flac-files", type=int, default=8, help="FLAC files of the indexed corpus (10 s to 10 min)")
    ap.add_argument("--flac-excerpts", type=int, default=6, help="random 3 s excerpts read per indexed FLAC file")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args(argv)

    with serving(args.backends, args.latency_ms) as (backends, proxy_port, counts):
        import grain

        def sent_so_far() -> int:
            return counts()[0]

        import s3fs

        # Every backend holds the same objects (written once each, read only
        # afterwards), so round-robin connections see one consistent store.
        direct = [s3fs.S3FileSystem(endpoint_url=f"http://127.0.0.1:{port}", skip_instance_cache=True)
                  for port in backends]
        for fs in direct:
            fs.mkdir("bench")
        rate = 44100
        rng = np.random.default_rng(0)
        long = (rng.standard_normal((60 * rate, 2)) * 0.1).astype(np.float32)
        sizes = {}
        for fmt in ("WAV", "FLAC"):
            data = _encode(long, rate, fmt)
            sizes[fmt] = len(data)
            if fmt == "FLAC":
                flac_bytes = data
            for fs in direct:
                fs.pipe(f"bench/long/long.{fmt.lower()}", data)
        clip = (rng.standard_normal((10 * rate, 2)) * 0.1).astype(np.float32)
        wav = _encode(clip, rate, "WAV")
        for fs in direct:
            fs.pipe({f"bench/clips/c{i:02d}.wav": wav for i in range(24)})

        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{proxy_port}"
        s3fs.S3FileSystem.clear_instance_cache()
        from audiotree.io import AudioFile
        from audiotree.sources import Output, create_audio_dataset

        rows = []
        for fmt in ("WAV", "FLAC"):
            before = sent_so_far()
            with AudioFile(f"s3://bench/long/long.{fmt.lower()}") as f:
                f.read(30 * rate, 3 * rate)
            sent = sent_so_far() - before
            excerpt = sizes[fmt] * 3 / 60
            rows.append((fmt, sent, excerpt))
        # FLAC through its seek points (audiotree.io.flac_seek_points): the header once, then one GET.
        from audiotree.io.flac_indexed import FlacSeekFile
        from audiotree.io.flac_seek_points import seek_points

        points = seek_points(flac_bytes)
        before = sent_so_far()
        with FlacSeekFile("s3://bench/long/long.flac", points, size=sizes["FLAC"]) as f:
            f.read(20 * rate, 3 * rate)
        header_sent = sent_so_far() - before
        before = sent_so_far()
        with FlacSeekFile("s3://bench/long/long.flac", points, size=sizes["FLAC"]) as f:
            f.read(30 * rate + 12345, 3 * rate)
        rows.append(("FLAC by seek points (one GET; the header is fetched once per file and process)",
                     sent_so_far() - before, sizes["FLAC"] * 3 / 60))
        rows.append(("FLAC by seek points, first excerpt of a file (header + excerpt: two GETs)", header_sent,
                     sizes["FLAC"] * 3 / 60))

        flac = _indexed_flac(direct, counts, args)

        ds = create_audio_dataset("s3://bench/clips", duration=3.0, sample_rate=rate, output=Output(mono=False), num_epochs=None)
        runs: dict[int, list[float]] = {0: [], 8: []}
        for _ in range(args.repeats):  # settings interleaved, so machine load hits both alike
            for threads in (0, 8):
                options = grain.ReadOptions(num_threads=threads, prefetch_buffer_size=2 * threads)
                it = iter(ds.to_iter_dataset(options))
                next(it)  # connections and imports warm
                t0 = time.perf_counter()
                for _ in range(args.items):
                    next(it)
                runs[threads].append(args.items / (time.perf_counter() - t0))
                del it
        rates = {threads: float(np.median(values)) for threads, values in runs.items()}
        load = os.getloadavg()[0]

    lines = [
        "## Object storage (S3)",
        "",
        f"`python benchmarks/storage.py{_flags(args)}` "
        f"({time.strftime('%Y-%m-%d %H:%M')} UTC, 2 shared cores, load average "
        f"{load:.1f}): "
        + ("one moto S3 server process on 127.0.0.1" if args.backends == 1 else
           f"{args.backends} moto S3 server processes on 127.0.0.1 holding the same objects")
        + f", behind a TCP proxy (its own process) that adds {args.latency_ms:g} ms to every request"
        + ("" if args.backends == 1 else " and spreads connections over them round robin")
        + "; bytes counted at the proxy (server side, HTTP headers included).",
        "",
        "| 3 s excerpt of a 60 s 44.1 kHz stereo file | bytes sent by the server | excerpt's encoded size | ratio |",
        "|---|---|---|---|",
    ]
    for fmt, sent, excerpt in rows:
        what = fmt if fmt in ("WAV", "FLAC") else fmt
        lines.append(f"| {what}{' (open + read)' if fmt in ('WAV', 'FLAC') else ''} | {sent:,} | {excerpt:,.0f} | "
                     f"{sent / excerpt:.2f}× |")
    lines += [
        "",
        "The goal is ≤ 2× the excerpt's encoded size plus the header; the first 64 KiB window holds the header. "
        "By seek points (one about every second, from the SEEKTABLE or the frame headers: audiotree.io.flac_seek_points), a "
        "FLAC excerpt is the header (once) plus one GET from the seek point before it to the one after it; the "
        "goal there is ≤ 1.5× the excerpt's encoded size + 64 KiB in ≤ 2 requests.",
        "",
        *_flac_lines(flac, args),
        "",
        f"| random 3 s excerpts of 24 WAV files over S3, {args.items} items, median of {args.repeats} interleaved runs "
        "| items/s |",
        "|---|---|",
        f"| ReadOptions(num_threads=0) | {rates[0]:.1f} |",
        f"| ReadOptions(num_threads=8, prefetch_buffer_size=16) | {rates[8]:.1f} |",
        f"| ratio 8 threads / 0 threads (goal ≥ 4×) | {rates[8] / rates[0]:.2f}× |",
        "",
        "An excerpt costs two requests: one ranged GET for the header (its Content-Range gives the size) and one "
        "for the excerpt's bytes, both outside soundfile's process-wide open lock. What bounds 8 threads here is "
        "the test server and the machine, not the readers: one moto process answers about 120 requests/s whatever "
        "the concurrency (pure Python, one GIL), i.e. at most ~60 excerpts/s, and the readers, moto and the proxy "
        "share 2 cores with other jobs. `--backends N` spreads connections over N moto processes holding the same "
        "objects; with 20 ms per request and one moto process this machine gave 2.6-3.9x, the server's own limit.",
    ]
    text = _sections.wrap("storage", "\n".join(lines))
    print(text)
    if not args.no_write:
        path = REPO / "BENCHMARKS.md"
        old = path.read_text()
        if _OLD_BEGIN in old and _OLD_END in old:  # the section's markers before _sections.py
            old = old[: old.index(_OLD_BEGIN)].rstrip("\n") + "\n" + old[old.index(_OLD_END) + len(_OLD_END):]
            path.write_text(old)
        _sections.replace_section(path, "storage", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

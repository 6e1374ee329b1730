"""Object-storage figures: bytes on the wire per excerpt, and read threads against latency.

Starts a moto S3 server on 127.0.0.1 and, in front of it, a small TCP proxy
that delays every chunk a client sends by ``--latency-ms`` (default 20 ms,
so every request pays it at least once) and counts the bytes the server sends
back. Both figures are measured at that proxy, i.e. on the server side of the
connection (HTTP headers included).

1. Bytes: one 3 s excerpt from the middle of a 60 s 44.1 kHz stereo WAV and
   FLAC file, against the excerpt's encoded size (its share of the file).
2. Threads: a 3 s random-excerpt dataset over 24 WAV files, iterated with
   ``grain.ReadOptions(num_threads=0)`` and ``num_threads=8`` side by side in
   one run; items/s and their ratio (wall clock; per-core figures do not
   apply, the work is waiting).

    python benchmarks/storage.py            # prints and rewrites its section of BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
_BEGIN = "<!-- storage: written by benchmarks/storage.py -->"
_END = "<!-- storage: end -->"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LatencyProxy:
    """TCP proxy 127.0.0.1:port -> target, delaying client chunks and counting server bytes."""

    def __init__(self, target_port: int, latency: float) -> None:
        self.latency = latency
        self.target = ("127.0.0.1", target_port)
        self.bytes_from_server = 0
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
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream:
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


def _serve(latency: float, ports, counter, stop) -> None:
    """Child process: moto S3 plus the latency proxy, so serving never shares the readers' GIL."""
    from moto.server import ThreadedMotoServer

    moto_port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=moto_port, verbose=False)
    server.start()
    proxy = LatencyProxy(moto_port, latency)
    ports.put((moto_port, proxy.port))
    try:
        while not stop.wait(0.05):
            counter.value = proxy.bytes_from_server
    finally:
        proxy.stop()
        server.stop()


def _encode(x: np.ndarray, rate: int, fmt: str) -> bytes:
    import soundfile

    buf = io.BytesIO()
    soundfile.write(buf, x, rate, format=fmt, subtype="PCM_16")
    return buf.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--items", type=int, default=48, help="items per thread setting")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args(argv)

    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    ports, counter, stop = ctx.Queue(), ctx.Value("q", 0), ctx.Event()
    child = ctx.Process(target=_serve, args=(args.latency_ms / 1000, ports, counter, stop), daemon=True)
    child.start()
    moto_port, proxy_port = ports.get(timeout=120)

    def sent_so_far() -> int:
        time.sleep(0.2)  # let the child publish its count
        return counter.value

    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret", AWS_DEFAULT_REGION="us-east-1")
    try:
        import grain
        import s3fs

        direct = s3fs.S3FileSystem(endpoint_url=f"http://127.0.0.1:{moto_port}")
        direct.mkdir("bench")
        rate = 44100
        rng = np.random.default_rng(0)
        long = (rng.standard_normal((60 * rate, 2)) * 0.1).astype(np.float32)
        sizes = {}
        for fmt in ("WAV", "FLAC"):
            data = _encode(long, rate, fmt)
            sizes[fmt] = len(data)
            direct.pipe(f"bench/long/long.{fmt.lower()}", data)
        clip = (rng.standard_normal((10 * rate, 2)) * 0.1).astype(np.float32)
        wav = _encode(clip, rate, "WAV")
        for i in range(24):
            direct.pipe(f"bench/clips/c{i:02d}.wav", wav)

        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{proxy_port}"
        s3fs.S3FileSystem.clear_instance_cache()
        from audiotree.io import AudioFile
        from audiotree.sources import create_audio_dataset

        rows = []
        for fmt in ("WAV", "FLAC"):
            before = sent_so_far()
            with AudioFile(f"s3://bench/long/long.{fmt.lower()}") as f:
                f.read(30 * rate, 3 * rate)
            sent = sent_so_far() - before
            excerpt = sizes[fmt] * 3 / 60
            rows.append((fmt, sent, excerpt))

        ds = create_audio_dataset("s3://bench/clips", duration=3.0, sample_rate=rate, mono=False, num_epochs=None)
        rates = {}
        for threads in (0, 8):
            options = grain.ReadOptions(num_threads=threads, prefetch_buffer_size=2 * threads)
            it = iter(ds.to_iter_dataset(options))
            next(it)  # connections and imports warm
            t0 = time.perf_counter()
            for _ in range(args.items):
                next(it)
            rates[threads] = args.items / (time.perf_counter() - t0)
            del it
    finally:
        stop.set()
        child.join(timeout=30)
        if child.is_alive():
            child.terminate()
            child.join(timeout=10)

    lines = [
        _BEGIN,
        "",
        "## Object storage (S3)",
        "",
        f"`python benchmarks/storage.py` ({time.strftime('%Y-%m-%d %H:%M')}): a moto S3 server on 127.0.0.1 (in its own process) behind a "
        f"TCP proxy adding {args.latency_ms:g} ms to every request; bytes counted at the proxy (server side, HTTP "
        "headers included).",
        "",
        "| 3 s excerpt of a 60 s 44.1 kHz stereo file | bytes sent by the server | excerpt's encoded size | ratio |",
        "|---|---|---|---|",
    ]
    for fmt, sent, excerpt in rows:
        lines.append(f"| {fmt} (open + read) | {sent:,} | {excerpt:,.0f} | {sent / excerpt:.2f}× |")
    lines += [
        "",
        f"The goal is ≤ 2× the excerpt's encoded size plus the header; the first 64 KiB read-ahead window holds the header.",
        "",
        "| random 3 s excerpts of 24 WAV files over S3 | items/s |",
        "|---|---|",
        f"| ReadOptions(num_threads=0) | {rates[0]:.1f} |",
        f"| ReadOptions(num_threads=8, prefetch_buffer_size=16) | {rates[8]:.1f} |",
        f"| ratio 8 threads / 0 threads (goal ≥ 4×) | {rates[8] / rates[0]:.2f}× |",
        "",
        _END,
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        path = REPO / "BENCHMARKS.md"
        old = path.read_text()
        if _BEGIN in old and _END in old:
            new = old[: old.index(_BEGIN)] + text + old[old.index(_END) + len(_END) + 1 :]
        else:
            new = old.rstrip("\n") + "\n\n" + text
        path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())

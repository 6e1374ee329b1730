#!/usr/bin/env python
"""Tar shards and Parquet with embedded audio next to the unpacked folder, in one run (issue 24).

    python benchmarks/containers.py            # prints, rewrites its BENCHMARKS.md section
    python benchmarks/containers.py --quick    # a smaller corpus and fewer items, for a smoke run

The corpus (cached in ``benchmarks/.corpus/containers``): 200 mono 16 kHz FLAC
files of 4 to 12 s; the same files as 100 webdataset tar shards (``KEY.flac`` +
``KEY.json``, 2 per shard) and as Parquet files of ``{bytes, path}`` cells in two
layouts: as Hugging Face ``datasets`` writes them (the audio bytes uncompressed
and PLAIN, a page index, row groups of 100 rows: ``parquet``) and with
pyarrow's ``write_table`` defaults (snappy and a dictionary page, here with row
groups of 10: ``parquet-default``). Three figures:

1. Equality: for ``random`` 1 s excerpts, ``loudest`` 1 s with a corpus index
   and whole utterances, with 0 and 2 Grain workers, read from the local
   files and from a moto S3 server on 127.0.0.1, every item of the shards
   and of both Parquet layouts equals the folder's (``np.array_equal``).
2. Cost of one 3 s excerpt from a remote shard, counted at an HTTP server on
   127.0.0.1 that honours ``Range`` (requests and body bytes it sent), for
   excerpts at random offsets of random members (20 s members); and the
   cost of listing a shard (its headers only).
3. Items per CPU-second, local: random 3 s excerpts from the folder, the
   shards and the two Parquet layouts, read in one process in turns of 25
   items (order rotating, ``time.process_time``), so all four see the same
   load and caches.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import statistics
import sys
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _sections import replace_section, wrap  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RATE = 16_000
SECTION = "containers"
SHAPES = ("shards", "parquet", "parquet-default")
#: Bumped when the corpus's layout changes (a cached corpus of another layout is rebuilt).
LAYOUT = 2


# ---------------------------------------------------------------------------------------------- corpus
def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _flac(seconds: float, rng: np.random.Generator) -> bytes:
    import soundfile

    n = int(seconds * RATE)
    envelope = np.repeat(rng.uniform(0.01, 0.5, size=n // 4000 + 1), 4000)[:n]
    buf = io.BytesIO()
    soundfile.write(buf, (rng.standard_normal(n) * envelope).astype(np.float32), RATE, format="FLAC",
                    subtype="PCM_16")
    return buf.getvalue()


def build_corpus(root: Path, files: int, per_shard: int) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    unpacked, shards, parquet = root / "unpacked", root / "shards", root / "parquet"
    default = root / "parquet-default"
    done = root / "done.json"
    num_shards = (files + per_shard - 1) // per_shard
    if not done.exists() or json.loads(done.read_text()).get("layout") != LAYOUT:
        rng = np.random.default_rng(24)
        for d in (unpacked, shards, parquet, default):
            d.mkdir(parents=True, exist_ok=True)
        keys = [f"utt{i:05d}" for i in range(files)]
        data = {k: _flac(float(rng.uniform(4, 12)), rng) for k in keys}
        for k in keys:
            (unpacked / f"{k}.flac").write_bytes(data[k])
        for s in range(num_shards):
            with tarfile.open(shards / f"train-{s:06d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
                for k in keys[s * per_shard:(s + 1) * per_shard]:
                    _add(tar, f"{k}.flac", data[k])
                    _add(tar, f"{k}.json", json.dumps({"speaker": f"spk{int(k[3:]) % 7}"}).encode())
        struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        half = files // 2
        for part, chunk in enumerate((keys[:half], keys[half:])):
            table = pa.table({"audio": pa.array([{"bytes": data[k], "path": f"{k}.flac"} for k in chunk], type=struct),
                              "speaker": [f"spk{int(k[3:]) % 7}" for k in chunk]})
            pq.write_table(table, default / f"train-{part:05d}.parquet", row_group_size=10)
            # What datasets' to_parquet writes for an Audio column (see tests/data/hf_parquet): the audio
            # bytes uncompressed and PLAIN (no dictionary), the rest snappy, a page index, 100-row groups.
            pq.write_table(table, parquet / f"train-{part:05d}.parquet", row_group_size=100,
                           compression={"audio.bytes": "none", "audio.path": "none", "speaker": "snappy"},
                           use_dictionary=["speaker"], write_page_index=True)
        done.write_text(json.dumps({"files": files, "per_shard": per_shard, "layout": LAYOUT}))
    return {"folder": str(unpacked), "shards": str(shards / f"train-{{000000..{num_shards - 1:06d}}}.tar"),
            "parquet": str(parquet / "train-*.parquet"), "parquet-default": str(default / "train-*.parquet"),
            "root": root, "num_shards": num_shards,
            "bytes": sum(p.stat().st_size for p in unpacked.iterdir())}


# ---------------------------------------------------------------------------------------------- equality
def _items(ds, n: int, workers: int) -> list[np.ndarray]:
    import grain

    sync = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    it = ds.to_iter_dataset(sync)
    if workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    iterator = iter(it)
    try:
        return [np.asarray(next(iterator).waveform) for _ in range(n)]
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


def equality(corpus: dict, where: str, sources: dict, items: int, tmp: Path) -> list[dict]:
    from audiotree import ExcerptConfig
    from audiotree.index import build_index
    from audiotree.sources import Corpus, create_audio_dataset

    indexes = {}
    for shape, source in sources.items():
        indexes[shape] = tmp / f"{where}-{shape}.parquet"
        build_index(source, indexes[shape], executor="serial", show_progress=False)
    modes = {
        "random 1 s": lambda shape: create_audio_dataset(sources=sources[shape], sample_rate=RATE, duration=1.0,
                                                         num_epochs=None, shuffle_seed=1),
        "loudest 1 s, index": lambda shape: create_audio_dataset(
            corpus=Corpus(index=indexes[shape]), sample_rate=RATE, duration=1.0, num_epochs=None, shuffle_seed=2,
            excerpt=ExcerptConfig(strategy="loudest")),
        "whole utterances": lambda shape: create_audio_dataset(sources=sources[shape], sample_rate=RATE,
                                                               duration=None, num_epochs=None, shuffle_seed=3),
    }
    rows = []
    for mode, make in modes.items():
        for workers in (0, 2):
            reference = _items(make("folder"), items, workers)
            for shape in SHAPES:
                got = _items(make(shape), items, workers)
                same = sum(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(got, reference))
                rows.append(dict(where=where, mode=mode, workers=workers, shape=shape, items=items, equal=int(same)))
                print(f"equality {where:5s} {mode:20s} {workers} workers {shape:8s}: {same}/{items}", flush=True)
    return rows


class _Moto:
    def __init__(self) -> None:
        import socket

        from moto.server import ThreadedMotoServer

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)

    def __enter__(self):
        self.server.start()
        os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret",
                           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port}"})
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop()


def s3_sources(corpus: dict) -> dict:
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    fs.mkdir("bench")
    root = corpus["root"]
    for folder in SHAPES:
        for path in sorted((root / folder).iterdir()):
            fs.pipe(f"bench/{folder}/{path.name}", path.read_bytes())
    last = corpus["num_shards"] - 1
    return {"folder": corpus["folder"], "shards": f"s3://bench/shards/train-{{000000..{last:06d}}}.tar",
            "parquet": "s3://bench/parquet/train-*.parquet",
            "parquet-default": "s3://bench/parquet-default/train-*.parquet"}


# ---------------------------------------------------------------------------------------------- remote cost
class _Counting:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.requests = 0
        self.bytes_sent = 0
        self.lock = threading.Lock()


def _handler(state: _Counting):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _serve(self, body: bool) -> None:
            with state.lock:
                state.requests += 1
            data = state.objects.get(self.path.split("?", 1)[0])
            if data is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            rng = self.headers.get("Range")
            if rng and body:
                first, last = rng.split("=", 1)[1].split("-")
                lo, hi = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
                chunk = data[lo:hi + 1]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {lo}-{hi}/{len(data)}")
            else:
                chunk = data
                self.send_response(200)
            self.send_header("Content-Length", str(len(chunk)))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if body:
                # Counted before the write: the client may move on (and the counters be reset) as soon as it
                # has the bytes, before this thread would count them after the write.
                with state.lock:
                    state.bytes_sent += len(chunk)
                self.wfile.write(chunk)

        def do_GET(self) -> None:
            self._serve(True)

        def do_HEAD(self) -> None:
            self._serve(False)

    return Handler


def _hf_parquet(clips: list[bytes], rows_per_group: int) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"audio": pa.array([{"bytes": c, "path": f"utt{i:03d}.flac"} for i, c in enumerate(clips)],
                                        type=struct)})
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=rows_per_group, compression="none", use_dictionary=False,
                   write_page_index=True)
    return out.getvalue()


def _parquet_cost(base: str, state, clips: list[bytes], picks: list[tuple[int, int]]) -> dict:
    """The 3 s excerpts ``picks`` (row, start) of a remote Parquet file in HF's layout (2 row groups of 20)."""
    from audiotree.io import AudioFile
    from audiotree.io.members import parquet_url

    url = f"{base}/audio.parquet"
    locate = []
    for group in (0, 1):  # the first read of a row group in a process locates its rows
        state.requests = state.bytes_sent = 0
        with AudioFile(parquet_url(url, "audio", group, 0)) as f:
            f.read(0, RATE)
        locate.append(dict(requests=state.requests, bytes=state.bytes_sent,
                           group_bytes=sum(len(c) for c in clips[group * 20:(group + 1) * 20])))
    rows = []
    for i, start in picks:
        state.requests = state.bytes_sent = 0
        with AudioFile(parquet_url(url, "audio", i // 20, i % 20)) as f:
            x = f.read(start, 3 * RATE)
        assert x.shape[0] == 3 * RATE
        encoded = len(clips[i]) * 3.0 / 20.0
        rows.append(dict(requests=state.requests, bytes=state.bytes_sent, encoded=encoded,
                         bound=2 * encoded + 64 * 1024))
    # The same first reads through the ranges build_index records (its one read of each group), in a process
    # that has read nothing of the file: no footer, no group.
    from audiotree.io.parquet_audio import forget, group_cells

    cells = [group_cells(url, "audio", group) for group in (0, 1)]
    forget()
    indexed = []
    for group in (0, 1):
        state.requests = state.bytes_sent = 0
        with AudioFile(parquet_url(url, "audio", group, 0, cells[group][0])) as f:
            f.read(0, RATE)
        indexed.append(dict(requests=state.requests, bytes=state.bytes_sent,
                            group_bytes=sum(len(c) for c in clips[group * 20:(group + 1) * 20])))
    return dict(locate=locate, excerpts=rows, indexed=indexed)


def remote_cost(excerpts: int) -> dict:
    from audiotree.io import AudioFile
    from audiotree.io.members import tar_url
    from audiotree.io.tar_shards import list_shard

    rng = np.random.default_rng(5)
    buf = io.BytesIO()
    clips = []
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(40):
            clips.append(_flac(20.0, rng))
            _add(tar, f"utt{i:03d}.flac", clips[-1])
            _add(tar, f"utt{i:03d}.json", b'{"speaker": "s"}')
    state = _Counting()
    state.objects["/shard.tar"] = shard = buf.getvalue()
    state.objects["/audio.parquet"] = _hf_parquet(clips, 20)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/shard.tar"
    try:
        state.requests = state.bytes_sent = 0
        listing = list_shard(url)
        list_cost = dict(requests=state.requests, bytes=state.bytes_sent, shard_bytes=len(shard),
                         members=len(listing.members))
        audio = [m for m in listing.members if m.name.endswith(".flac")]
        # The same excerpts (member or row, start) from the shard and from the Parquet file.
        picks = [(int(rng.integers(len(audio))), int(rng.integers(0, 17 * RATE))) for _ in range(excerpts)]
        rows = []
        for i, start in picks:
            m = audio[i]
            state.requests = state.bytes_sent = 0
            with AudioFile(tar_url(url, m.name, m.offset, m.size)) as f:
                x = f.read(start, 3 * RATE)
            assert x.shape[0] == 3 * RATE
            encoded = m.size * 3.0 / 20.0
            rows.append(dict(requests=state.requests, bytes=state.bytes_sent, encoded=encoded,
                             bound=2 * encoded + 64 * 1024))
        parquet = _parquet_cost(url.rsplit("/", 1)[0], state, clips, picks)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    return dict(listing=list_cost, excerpts=rows, parquet=parquet)


# ---------------------------------------------------------------------------------------------- throughput
def throughput(corpus: dict, turns: int, per: int) -> dict:
    from audiotree.sources import create_audio_dataset

    common = dict(sample_rate=RATE, duration=3.0, num_epochs=None, shuffle_seed=7)
    datasets = {shape: create_audio_dataset(sources=corpus[shape], **common)
                for shape in ("folder", *SHAPES)}
    names = list(datasets)
    for ds in datasets.values():
        for i in range(10):
            ds[i]
    cpu: dict = {n: [] for n in names}
    for t in range(turns):
        order = names[t % len(names):] + names[:t % len(names)]
        for name in order:
            ds, t0 = datasets[name], time.process_time()
            for i in range(10 + t * per, 10 + (t + 1) * per):
                ds[i]
            cpu[name].append(time.process_time() - t0)
    rate = {n: per * turns / sum(v) for n, v in cpu.items()}
    per_turn = {n: [cpu["folder"][t] / cpu[n][t] for t in range(turns)] for n in SHAPES}
    vs_shards = [cpu["shards"][t] / cpu["parquet"][t] for t in range(turns)]
    return dict(items_per_cpu_s=rate, per_turn_ratio=per_turn, parquet_vs_shards=vs_shards, turns=turns, per=per)


# ---------------------------------------------------------------------------------------------- report
def render(data: dict) -> str:
    eq_rows = "\n".join(
        f"| {r['where']} | {r['mode']} | {r['workers']} | {r['shape']} | {r['equal']}/{r['items']} |"
        for r in data["equality"])
    ex = data["remote"]["excerpts"]
    worst_req = max(r["requests"] for r in ex)
    ratio = [r["bytes"] / r["bound"] for r in ex]
    med_bytes = statistics.median(r["bytes"] for r in ex)
    med_enc = statistics.median(r["encoded"] for r in ex)
    lc = data["remote"]["listing"]
    pqc = data["remote"]["parquet"]
    pex = pqc["excerpts"]
    p_ratio = [r["bytes"] / r["bound"] for r in pex]
    p_req = max(r["requests"] for r in pex)
    p_med = statistics.median(r["bytes"] for r in pex)
    p_enc = statistics.median(r["encoded"] for r in pex)
    loc = pqc["locate"]
    loc_ratio = max(r["bytes"] / r["group_bytes"] for r in loc)
    ixd = pqc.get("indexed", [])
    ixd_ratio = max((r["bytes"] / r["group_bytes"] for r in ixd), default=float("nan"))
    same_cost = sum(a["bytes"] == b["bytes"] and a["requests"] == b["requests"] for a, b in zip(ex, pex))
    th = data["throughput"]
    rate = th["items_per_cpu_s"]
    med = {n: statistics.median(v) for n, v in th["per_turn_ratio"].items()}
    verdict = lambda ok: "HOLDS" if ok else "MISSES"  # noqa: E731
    all_equal = all(r["equal"] == r["items"] for r in data["equality"])
    return f"""## Tar shards and Parquet with embedded audio (issue 24)

`python benchmarks/containers.py` ({data['generated']} UTC, 2 shared cores, load average {data['loadavg']:.1f}).
Corpus: {data['files']} mono 16 kHz FLAC files of 4 to 12 s ({data['corpus_mb']:.0f} MB), the same bytes as
{data['num_shards']} webdataset tar shards (`KEY.flac` + `KEY.json`) and as 2 Parquet files of `{{bytes, path}}`
cells in each of two layouts: `parquet` as Hugging Face `datasets` writes an `Audio` column (the audio bytes
uncompressed and PLAIN, a page index, row groups of 100 rows, HF's size for audio) and `parquet-default` with
pyarrow's `write_table` defaults (snappy, the values in a dictionary page; row groups of 10 rows).

**Equality** (items of the shards and of both Parquet layouts against the unpacked folder's, `np.array_equal`,
{data['equality'][0]['items']} items each; S3 is a moto server on 127.0.0.1, the folder stays local):

| storage | items | Grain workers | shape | equal items |
|---|---|---|---|---|
{eq_rows}

**One 3 s excerpt from a remote shard**, counted at an HTTP server on 127.0.0.1 that honours `Range` ({len(ex)}
excerpts at random offsets of random 20 s FLAC members of one shard of {lc['shard_bytes'] / 2**20:.1f} MiB):

| figure | measured | goal | verdict |
|---|---|---|---|
| requests per excerpt (worst) | {worst_req} | <= 3 | {verdict(worst_req <= 3)} |
| bytes per excerpt / (2 x its encoded size + 64 KiB), worst | {max(ratio):.2f} (median bytes {med_bytes:,.0f} for {med_enc:,.0f} encoded) | <= 1 | {verdict(max(ratio) <= 1)} |
| listing the shard ({lc['members']} members): requests, bytes | {lc['requests']} requests, {lc['bytes']:,} bytes ({100 * lc['bytes'] / lc['shard_bytes']:.1f} % of the shard) | headers, not the shard | {verdict(lc['bytes'] < lc['shard_bytes'] / 4)} |

An excerpt costs the member's first 32 KiB (its FLAC header; one request), then one request from 32 KiB before
the decoder's first seek probe to the announced excerpt's end plus an eighth (so the probes' back-steps and the
excerpt come together), and a third only when decoding runs past that. None of it needs the shard's size (the
member's range comes from the listing or the index). A listing costs one HEAD and one ranged read of 8 KiB per
member whose header is not in the previous read.

**One 3 s excerpt from a remote Parquet row** (HF's layout: audio uncompressed and PLAIN), counted at the same
server (the same {len(pex)} excerpts as above, from a Parquet file of the same 40 members, 2 row groups of 20):

| figure | measured | goal | verdict |
|---|---|---|---|
| requests per excerpt (worst) | {p_req} | <= 3 | {verdict(p_req <= 3)} |
| bytes per excerpt / (2 x its encoded size + 64 KiB), worst | {max(p_ratio):.2f} (median bytes {p_med:,.0f} for {p_enc:,.0f} encoded) | <= 1 | {verdict(max(p_ratio) <= 1)} |
| locating a row group's rows (its first read in a process): requests, bytes / the group's audio bytes | {max(r['requests'] for r in loc)} requests, {loc_ratio:.2f} | the group once | {verdict(loc_ratio <= 1.1)} |
| the same first read by the range the index records: requests, bytes / the group's audio bytes | {max((r['requests'] for r in ixd), default=0)} requests, {ixd_ratio:.2f} | no group read | {verdict(ixd_ratio <= 0.1)} |

The "locating" row is the first 1 s read of a row in each group (worst of the two): the group's audio column
chunk (which the location needs) plus that read's own bytes, and for the first group the footer. After it an
excerpt of any row of the group costs what a tar member's does: {same_cost} of the {len(pex)} excerpts cost exactly
the bytes and requests of the same excerpt from the shard. A dataset built from an index skips the locating: the
index records each row's range (`build_index` reads each group once), so the first read of a group in a process
costs what any other read does (the last row).

**Items per CPU-second**, random 3 s excerpts, local, one process, {th['turns']} turns of {th['per']} items each
(order rotating):

| source | items per CPU-second | vs the folder, all turns | vs the folder, median per turn | goal | verdict |
|---|---|---|---|---|---|
| unpacked folder | {rate['folder']:.1f} | 1.00 | 1.00 | | |
| tar shards | {rate['shards']:.1f} | {rate['shards'] / rate['folder']:.2f} | {med['shards']:.2f} | >= 0.9 (median per turn) | {verdict(med['shards'] >= 0.9)} |
| Parquet as HF writes it, row groups of 100 | {rate['parquet']:.1f} | {rate['parquet'] / rate['folder']:.2f} | {med['parquet']:.2f} | >= 0.9 (median per turn) | {verdict(med['parquet'] >= 0.9)} |
| Parquet with pyarrow's defaults (snappy, dictionary), row groups of 10 | {rate['parquet-default']:.1f} | {rate['parquet-default'] / rate['folder']:.2f} | {med['parquet-default']:.2f} | (bound: the row group, see below) | |

Per turn the four sources read the same number of items back to back, so the per-turn ratio is the steadier
figure on this shared machine; the all-turns ratio includes the load swings between turns. What a member costs
over a file is the decoder reading through Python callbacks (one `pread` each, about 17 per 3 s FLAC excerpt)
instead of libsndfile's own file access: about 0.1 ms per item here, a smaller share for longer or
higher-rate excerpts.

A tar member is read like a file: one `open` of the shard and seeks inside `[offset, offset + size)`. So is a
Parquet row whose audio bytes are stored verbatim (uncompressed, as HF writes them): the first read of a row
group in a process reads its audio column chunk once (one ranged read; pyarrow decodes the values from those
bytes) and records where each row's bytes sit; every later row of that group is a ranged read of its own bytes
with partial decodes, like a tar member. Over a run that is the group's bytes once per process plus one
item's bytes per item (a process that reads R random rows of a corpus of G groups pays G group reads once).
A compressed audio chunk has no such location: pyarrow decodes column chunks only whole (it cannot start at
a page, apache/arrow#45284), and pyarrow's defaults put every value of the group in one snappy dictionary
page, so a random row there costs its whole row group (10 rows here, more with bigger groups); the last such
group is kept per process, so sequential reads pay it once per group. Write audio Parquet uncompressed
(`compression={{"audio.bytes": "none"}}`, `use_dictionary=False` for it), as HF does, for random access.
HF-layout Parquet against the tar shards (the same member reads), median per turn:
{statistics.median(th['parquet_vs_shards']):.2f}; what separates both from the folder is the member read above.
Equality overall: {verdict(all_equal)}.
"""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=REPO / "BENCHMARKS.md")
    ap.add_argument("--corpus-dir", type=Path, default=HERE / ".corpus" / "containers")
    args = ap.parse_args(argv)
    files, items, turns, per, excerpts = (40, 8, 4, 10, 5) if args.quick else (200, 48, 40, 25, 20)
    corpus = build_corpus(args.corpus_dir if not args.quick else args.corpus_dir.with_name("containers-quick"),
                          files, 2)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-containers-") as tmp:
        rows = equality(corpus, "local", {k: corpus[k] for k in ("folder", *SHAPES)}, items, Path(tmp))
        with _Moto():
            rows += equality(corpus, "S3", s3_sources(corpus), items, Path(tmp))
    remote = remote_cost(excerpts)
    th = throughput(corpus, turns, per)
    print(json.dumps({"remote": remote["listing"], "throughput": th["items_per_cpu_s"]}, indent=1))
    data = dict(generated=f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}", loadavg=os.getloadavg()[0],
                files=files, num_shards=corpus["num_shards"], corpus_mb=corpus["bytes"] / 2**20, equality=rows,
                remote=remote, throughput=th)
    text = render(data)
    print(text)
    if not args.quick:
        replace_section(args.out, SECTION, wrap(SECTION, text))


if __name__ == "__main__":
    main()

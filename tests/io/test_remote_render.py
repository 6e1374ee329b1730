"""Renders and writer outputs read from S3 in place: ranged requests, a bounded cache, host shares.

Against moto's S3 server on 127.0.0.1, behind a counting HTTP proxy (also on
127.0.0.1) that records every request's method, path and Range and the body
bytes the server sent, so requests and bytes are measured at the server side.
"""

from __future__ import annotations

import contextlib
import os

import grain
import numpy as np
import pytest

from audiotree.sources import create_audio_dataset

from servers import moto_s3
from test_storage import _FaultProxy


class CountingProxy(_FaultProxy):
    """A proxy 127.0.0.1 -> moto that injects no fault and records every request (see ``_FaultProxy``)."""

    def __init__(self, target_port: int) -> None:
        super().__init__(target_port, every=0)

    def reset(self) -> None:
        with self.lock:
            self.log.clear()

    def seen(self) -> list[tuple[str, str, str, int]]:
        with self.lock:
            return list(self.log)


@contextlib.contextmanager
def counted_s3():
    """moto on 127.0.0.1 behind a CountingProxy, the AWS variables pointing at the proxy: ``(fs, proxy)``.

    Both servers are stopped on exit, also when the caller's set-up fails.
    """
    with moto_s3(proxy=CountingProxy) as server:
        yield server.fs, server.proxy


@pytest.fixture(scope="module")
def s3proxy(tmp_path_factory):
    """moto on 127.0.0.1 behind a CountingProxy; the AWS variables point at the proxy."""
    with counted_s3() as (fs, proxy):
        fs.mkdir("renders")
        yield {"fs": fs, "proxy": proxy, "tmp": tmp_path_factory.mktemp("remote-render")}


def _corpus(root):
    import soundfile

    rng = np.random.default_rng(0)
    root.mkdir(exist_ok=True)
    for i in range(4):
        soundfile.write(root / f"f{i}.wav", rng.standard_normal((16000, 2)).astype(np.float32) * 0.1, 8000)
    return root


def _render(out, corpus, n, *extra, duration="1.0", rate="8000"):
    from click.testing import CliRunner

    from audiotree.cli import cli

    result = CliRunner().invoke(cli, ["render", str(corpus), "--out", str(out), "-n", str(n), "--part-size", "8",
                                      "--duration", duration, "--sample-rate", rate, *map(str, extra)])
    assert result.exit_code == 0, result.output + repr(result.exception)


@pytest.fixture(scope="module")
def rendered(s3proxy):
    """One render (tree, 20 items in parts of 8) on local disk and uploaded unchanged to s3://renders/tree."""
    tmp = s3proxy["tmp"]
    corpus = _corpus(tmp / "corpus")
    _render(tmp / "local", corpus, 20)
    s3proxy["fs"].put(str(tmp / "local"), "renders/tree", recursive=True)
    return {"local": tmp / "local", "url": "s3://renders/tree", "corpus": corpus}


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(a.waveform), np.asarray(b.waveform))
    assert a.filepath == b.filepath and a.source == b.source
    np.testing.assert_array_equal(np.asarray(a.offset), np.asarray(b.offset))
    np.testing.assert_array_equal(a.extras["key"], b.extras["key"])  # stored as text, read back as code-point rows


def _gets(log):
    return [entry for entry in log if entry[0] == "GET"]


def test_remote_render_reads_items_in_place_with_few_requests(s3proxy, rendered):
    from audiotree.sources import open_render

    proxy = s3proxy["proxy"]
    proxy.reset()
    remote = open_render(rendered["url"])  # the record, then part 0's manifest (sized from it: no item read)
    opened = proxy.seen()
    local = open_render(rendered["local"])
    assert len(remote) == len(local) == 20
    names = [path.rsplit("/", 1)[-1] for _, path, _, _ in opened]
    assert names == ["render.json", "manifest.json"] and all(m == "GET" for m, *_ in opened), opened
    # Item 0: one ranged GET of its waveform row; the small leaves came inline with the manifest.
    remote[0]
    opened = proxy.seen()
    waveform = [e for e in opened if e[1].endswith("waveform.bin")]
    row = np.asarray(local[0].waveform).nbytes
    assert row == 8000 * 4  # 1 s of mono float32
    assert len(waveform) == 1 and waveform[0][2] == f"bytes=0-{row - 1}" and waveform[0][3] == row
    assert not any(e[1].endswith("/renders/tree") or e[1].endswith("/renders/tree/") for e in opened), "no listing"
    proxy.reset()
    for i in (5, 13, 19, 0):
        _same(remote[i], local[i])
    log = proxy.seen()
    # 5: part 0 row (1); 13 and 19: part 1 manifest + its small leaves once, then a row each; 0: one row again.
    rows = [e for e in log if e[1].endswith("waveform.bin")]
    assert len(rows) == 4 and all(e[3] == row for e in rows), log
    # manifests, offsets, names and the items' keys (a string leaf: one path per item, 8 per part)
    assert sum(e[3] for e in log if not e[1].endswith("waveform.bin")) < 6144, log


def test_remote_render_cache_serves_repeats_and_stays_bounded(s3proxy, rendered, tmp_path):
    from audiotree.sources import open_render

    proxy = s3proxy["proxy"]
    cache_dir = tmp_path / "cache"
    # (Without read-ahead: these reads are one request each, so the cache's saving shows in the counts.)
    ds = open_render(rendered["url"], cache_limit="1MB", cache_dir=cache_dir, read_ahead=None)
    for i in range(8):
        ds[i]
    proxy.reset()
    again = open_render(rendered["url"], cache_limit="1MB", cache_dir=cache_dir,  # as another process would
                        read_ahead=None)
    for i in range(2, 8):
        _same(ds[i], again[i])
    log = proxy.seen()
    # The record and the manifest are always asked for (they say what is current); rows came from disk.
    assert [e[1].rsplit("/", 1)[-1] for e in log] == ["render.json", "manifest.json"], log
    small = tmp_path / "small"
    bounded = open_render(rendered["url"], cache_limit="100kB", cache_dir=small, read_ahead=None)
    for i in range(20):
        bounded[i]
    used = sum(p.stat().st_size for p in small.rglob("*") if p.is_file())
    assert 32_000 <= used <= 100_000, used  # 20 rows of 32 kB would be 640 kB
    proxy.reset()
    bounded[19]  # the most recently used rows are the ones kept
    assert not any(e[1].endswith("waveform.bin") for e in proxy.seen())


def test_remote_render_host_shares_are_disjoint_complete_and_touch_only_their_parts(s3proxy, rendered):
    from audiotree.sources import open_render

    proxy = s3proxy["proxy"]
    local = open_render(rendered["local"])
    seen, rows = [], []
    for host in range(2):
        proxy.reset()
        share = open_render(rendered["url"], shard_options=grain.sharding.ShardOptions(host, 2),
                            read_ahead=None)  # one GET per row: the rows read show each host's share
        items = [share[i] for i in range(len(share))]
        parts = {e[1].split("/")[3] for e in proxy.seen() if e[1].count("/") > 3}
        rows.append({(e[1], e[2]) for e in proxy.seen() if e[1].endswith("waveform.bin")})
        seen.append(len(items))
        assert parts == ({"part-00000", "part-00001"} if host == 0 else {"part-00001", "part-00002"}), parts
        for k, item in enumerate(items):
            _same(item, local[host * 10 + k])
    assert seen == [10, 10]
    # The hosts' waveform reads (one ranged GET per row) are disjoint and together every row of the render.
    assert not rows[0] & rows[1] and len(rows[0] | rows[1]) == 20, rows


def test_tree_and_audio_sources_read_urls(s3proxy, tmp_path):
    from audiotree.core import AudioTree
    from audiotree.sources import AudioDataSource, TreeDataSource
    from audiotree.writers import AudioWriter, TreeWriter

    ds = create_audio_dataset(str(_corpus(tmp_path / "c")), duration=0.25, sample_rate=8000, shuffle=False)
    batch = AudioTree.batch([ds[i] for i in range(4)])
    for kind, make, read in (("tree", lambda d: TreeWriter(d).open(), TreeDataSource),
                             ("audio", AudioWriter, AudioDataSource)):
        writer = make(tmp_path / kind)
        writer.write(batch)
        writer.close()
        s3proxy["fs"].put(str(tmp_path / kind), f"renders/src-{kind}", recursive=True)
        remote, local = read(f"s3://renders/src-{kind}"), read(tmp_path / kind)
        assert len(remote) == len(local) == 4
        for i in range(4):
            np.testing.assert_array_equal(np.asarray(remote[i].waveform), np.asarray(local[i].waveform))
        import pickle

        np.testing.assert_array_equal(np.asarray(pickle.loads(pickle.dumps(remote))[3].waveform),
                                      np.asarray(local[3].waveform))


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------


def test_record_naming_a_missing_part_is_named_and_other_parts_stay_readable(s3proxy, rendered):
    from audiotree.sources import open_render

    fs = s3proxy["fs"]
    fs.put(str(rendered["local"]), "renders/broken-missing", recursive=True)
    fs.rm("renders/broken-missing/part-00001", recursive=True)
    ds = open_render("s3://renders/broken-missing")
    _same(ds[3], open_render(rendered["local"])[3])
    with pytest.raises(FileNotFoundError, match=r"names the finished part part-00001.*s3://renders/broken-missing/"
                                                r"part-00001/manifest\.json"):
        ds[9]
    assert fs.exists("renders/broken-missing/render.json") and fs.exists("renders/broken-missing/part-00002")


def test_truncated_remote_part_is_an_error_naming_the_object(s3proxy, rendered):
    from audiotree.sources import open_render

    fs = s3proxy["fs"]
    fs.put(str(rendered["local"]), "renders/broken-short", recursive=True)
    key = "renders/broken-short/part-00002/waveform.bin"
    fs.pipe(key, fs.cat_file(key)[:-100])
    ds = open_render("s3://renders/broken-short")
    _same(ds[0], open_render(rendered["local"])[0])
    with pytest.raises(ValueError, match=r"s3://renders/broken-short/part-00002/waveform\.bin: it is \d+ bytes, but "
                                         r"the manifest needs exactly \d+; the remote part is truncated"):
        ds[16]
    fs.pipe(key, fs.cat_file(key)[:10])  # shorter than the row's start
    with pytest.raises(ValueError, match=r"part-00002/waveform\.bin: it is 10 bytes"):
        open_render("s3://renders/broken-short")[19]


def test_unwritable_cache_folder_is_named(s3proxy, rendered, tmp_path):
    from audiotree.sources import open_render

    blocked = tmp_path / "ro"
    blocked.mkdir()
    blocked.chmod(0o500)
    try:
        if os.access(blocked / "x", os.W_OK) or os.geteuid() == 0:
            blocked = tmp_path / "file-in-the-way"  # root writes anywhere: a file where the folder should be
            blocked.write_text("")
        with pytest.raises(PermissionError, match=rf"read cache folder {blocked}.* not writable"):
            open_render(rendered["url"], cache_limit="1GB", cache_dir=blocked / "cache")
    finally:
        (tmp_path / "ro").chmod(0o700)
    with pytest.raises(ValueError, match="cache_dir= needs cache_limit="):
        open_render(rendered["url"], cache_dir=tmp_path / "c")
    with pytest.raises(ValueError, match="Cannot read '20 parsecs' as a size"):
        open_render(rendered["url"], cache_limit="20 parsecs")


def test_arrayrecord_render_on_s3_stages_one_shard_at_a_time(s3proxy, tmp_path):
    from audiotree.sources import open_render

    corpus = _corpus(tmp_path / "corpus")
    _render(tmp_path / "ar", corpus, 20, "--format", "arrayrecord")
    s3proxy["fs"].put(str(tmp_path / "ar"), "renders/ar", recursive=True)
    local = open_render(tmp_path / "ar")
    proxy = s3proxy["proxy"]
    for host in range(3):
        proxy.reset()
        share = open_render("s3://renders/ar", shard_options=grain.sharding.ShardOptions(host, 3))
        assert len(share) == len(local[host * 8:(host + 1) * 8])
        for k in range(len(share)):
            _same(share[k], local[host * 8 + k])
        shards = {e[1] for e in proxy.seen() if e[1].endswith(".array_record") and e[0] == "GET"}
        assert shards == {f"/renders/ar/part-{host:05d}/items-00000.array_record"}, proxy.seen()
    whole = open_render("s3://renders/ar", cache_limit="1MB", cache_dir=tmp_path / "cache")
    for i in (19, 0, 9):
        _same(whole[i], local[i])
    staged = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert len(staged) == 3  # every shard read so far, within the limit


def test_remote_index_build_resumes_from_the_parts_it_uploaded(s3proxy, tmp_path, monkeypatch):
    from audiotree.index import _work, build_index, open_index

    fs = s3proxy["fs"]
    corpus = _corpus(tmp_path / "corpus")
    for f in sorted(corpus.iterdir()):
        fs.pipe(f"renders/ixsrc/{f.name}", f.read_bytes())
    real = _work.index_chunk
    calls = []

    def dies_on_the_third_chunk(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # the build is interrupted after committing two parts
        return real(*args, **kwargs)

    monkeypatch.setattr(_work, "index_chunk", dies_on_the_third_chunk)
    with pytest.raises(KeyboardInterrupt):
        build_index(["s3://renders/ixsrc"], "s3://renders/ix/corpus.parquet", executor="serial", chunk_size=1,
                    show_progress=False)
    uploaded = sorted(p.rsplit("/", 1)[-1] for p in fs.ls("renders/ix/.corpus.parquet.parts", refresh=True))
    assert uploaded == ["part-00000000.parquet", "part-00000001.parquet", "settings.json"]
    assert not fs.exists("renders/ix/corpus.parquet")  # nothing half-built is visible
    monkeypatch.setattr(_work, "index_chunk", real)
    report = build_index(["s3://renders/ixsrc"], "s3://renders/ix/corpus.parquet", executor="serial", chunk_size=1,
                         show_progress=False)
    assert (report.rows, report.resumed, report.read) == (4, 2, 2)
    assert not fs.exists("renders/ix/.corpus.parquet.parts")
    clean = build_index(["s3://renders/ixsrc"], "s3://renders/ix/clean.parquet", executor="serial",
                        show_progress=False)
    assert clean.read == 4
    a, b = open_index("s3://renders/ix/corpus.parquet"), open_index("s3://renders/ix/clean.parquet")
    assert a.paths() == b.paths()
    for name in ("size", "duration", "readable"):
        np.testing.assert_array_equal(np.asarray(a.column(name)), np.asarray(b.column(name)))


def test_flac_excerpt_by_seek_points_is_two_requests_and_exact(s3proxy, tmp_path):
    import io

    import soundfile

    from audiotree.io.flac_indexed import FlacSeekFile, clear_header_cache
    from audiotree.io.flac_seek_points import seek_points

    fs, proxy = s3proxy["fs"], s3proxy["proxy"]
    rng = np.random.default_rng(5)
    ratios = []
    clear_header_cache()
    for k, (seconds, rate, channels, subtype) in enumerate([(10, 16000, 1, "PCM_16"), (75, 44100, 2, "PCM_16"),
                                                              (40, 48000, 2, "PCM_24"), (130, 22050, 1, "PCM_16")]):
        t = np.arange(seconds * rate) / rate
        tone = 0.3 * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * np.sin(2 * np.pi * 0.3 * t))
        audio = np.stack([tone + 0.01 * rng.standard_normal(t.size) for _ in range(channels)], axis=1)
        buf = io.BytesIO()
        soundfile.write(buf, audio.astype(np.float32), rate, format="FLAC", subtype=subtype)
        data = buf.getvalue()
        fs.pipe(f"renders/flac/{k}.flac", data)
        points = seek_points(data)
        assert points[0, 0] == 0 and np.all(np.diff(points[:, 0]) > 0)
        assert np.all(np.diff(points[:, 0]) <= 1.2 * rate)  # about a second apart
        local = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)[0]
        frames = 3 * rate
        for trial in range(4):
            start = int(rng.integers(0, seconds * rate - frames))
            proxy.reset()
            with FlacSeekFile(f"s3://renders/flac/{k}.flac", points, size=len(data)) as f:
                got = f.read(start, frames)
            log = proxy.seen()
            np.testing.assert_array_equal(got, local[start:start + frames])
            assert len(log) == (2 if trial == 0 else 1), log  # the header once per file and process
            share = (len(data) - points[0, 1]) * frames / (seconds * rate)
            body = sum(e[3] for e in log if not e[2].startswith("bytes=0-"))
            ratios.append(body / share)
            assert body <= 1.5 * share + 64 * 1024, (body, share)
    assert np.mean(ratios) < 1.5, ratios


def test_first_item_of_a_remote_tree_render_costs_three_requests(s3proxy, rendered):
    """The record, the part's manifest (carrying the small leaves inline) and the item's waveform row."""
    from audiotree.sources import TreeDataSource, open_render

    proxy = s3proxy["proxy"]
    local = open_render(rendered["local"])
    for shard in (None, grain.sharding.ShardOptions(1, 2)):
        proxy.reset()
        remote = open_render(rendered["url"], shard_options=shard)
        first = remote[0]
        log = proxy.seen()
        names = [e[1].rsplit("/", 1)[-1] for e in log]
        assert names == ["render.json", "manifest.json", "waveform.bin"], log
        assert all(e[0] == "GET" for e in log), log
        _same(first, local[0 if shard is None else 10])
    proxy.reset()
    part = TreeDataSource(f"{rendered['url']}/part-00001")
    np.testing.assert_array_equal(np.asarray(part[2].waveform), np.asarray(local[10].waveform))
    assert [e[1].rsplit("/", 1)[-1] for e in proxy.seen()] == ["manifest.json", "waveform.bin"], proxy.seen()


def _rewrite_manifest(fs, key, edit):
    import json

    manifest = json.loads(fs.cat_file(key))
    edit(manifest)
    fs.pipe(key, json.dumps(manifest).encode())


def test_tree_manifest_without_inline_leaves_still_reads_and_bad_inline_is_named(s3proxy, rendered):
    from audiotree.sources import open_render

    fs, proxy = s3proxy["fs"], s3proxy["proxy"]
    local = open_render(rendered["local"])
    fs.put(str(rendered["local"]), "renders/tree-1.0", recursive=True)

    def as_version_1_0(manifest):  # what audiotree wrote before format 1.1
        manifest.pop("inline")
        manifest["format_version"] = [1, 0]

    for k in range(3):
        _rewrite_manifest(fs, f"renders/tree-1.0/part-{k:05d}/manifest.json", as_version_1_0)
    proxy.reset()
    old = open_render("s3://renders/tree-1.0")
    _same(old[0], local[0])
    names = [e[1].rsplit("/", 1)[-1] for e in proxy.seen()]
    assert names[:2] == ["render.json", "manifest.json"] and "metadata.filepath.utf8" in names, names
    for i in (7, 12, 19):
        _same(old[i], local[i])

    fs.put(str(rendered["local"]), "renders/tree-bad-inline", recursive=True)
    key = "renders/tree-bad-inline/part-00000/manifest.json"
    original = fs.cat_file(key)
    for edit, message in (
        (lambda m: m["inline"].update({"metadata.offset.bin": "AAAA"}),
         r"part-00000/manifest\.json: inline\['metadata\.offset\.bin'\] holds 3 bytes, but the manifest needs "
         r"exactly 64"),
        (lambda m: m["inline"].update({"metadata.offset.bin": "not base64!"}),
         r"inline\['metadata\.offset\.bin'\] is not valid base64"),
        (lambda m: m["inline"].update({"../elsewhere": ""}), r"inline names '\.\./elsewhere', which is no leaf file"),
        (lambda m: m.update(complete=False), r"inlines leaf files but is not complete"),
    ):
        fs.pipe(key, original)
        _rewrite_manifest(fs, key, edit)
        with pytest.raises(ValueError, match=message):
            open_render("s3://renders/tree-bad-inline")[0]


def test_first_item_of_a_remote_audio_render_costs_three_requests(s3proxy, tmp_path):
    """The record, the part's manifest.npz and the item's whole file in one GET (it is over 64 KiB)."""
    from audiotree.sources import open_render

    corpus = _corpus(tmp_path / "corpus")
    _render(tmp_path / "audio", corpus, 12, "--format", "audio", duration="2.0", rate="16000")
    s3proxy["fs"].put(str(tmp_path / "audio"), "renders/audio3", recursive=True)
    local = open_render(tmp_path / "audio")
    proxy = s3proxy["proxy"]
    size = (tmp_path / "audio" / "part-00001" / "audio_000002.wav").stat().st_size
    assert size > 64 * 1024  # the opening window alone would not hold it
    for shard, item in ((None, 0), (grain.sharding.ShardOptions(1, 2), 6)):
        proxy.reset()
        remote = open_render("s3://renders/audio3", shard_options=shard)
        first = remote[0]
        log = proxy.seen()
        assert [e[1].rsplit("/", 1)[-1] for e in log] == ["render.json", "manifest.npz",
                                                          f"audio_{item % 8:06d}.wav"], log
        assert all(e[0] == "GET" for e in log) and log[-1][3] == size, log
        _same(first, local[item])


def _rewrite_record(fs, key, edit):
    import json

    record = json.loads(fs.cat_file(key))
    for part in record["parts"]:
        edit(part)
    fs.pipe(key, json.dumps(record).encode())


def test_first_item_of_a_remote_arrayrecord_render_costs_two_requests(s3proxy, tmp_path):
    """The record (listing each part's shards with size and SHA-256), then the shard's one staging GET."""
    from audiotree.sources import open_render

    fs, proxy = s3proxy["fs"], s3proxy["proxy"]
    corpus = _corpus(tmp_path / "corpus")
    _render(tmp_path / "ar", corpus, 20, "--format", "arrayrecord")
    fs.put(str(tmp_path / "ar"), "renders/ar-open", recursive=True)
    local = open_render(tmp_path / "ar")
    for options, k, item, part in ((None, 0, 0, 0), (grain.sharding.ShardOptions(1, 3), 0, 8, 1), (None, 19, 19, 2)):
        proxy.reset()
        remote = open_render("s3://renders/ar-open", shard_options=options)
        assert [e[1].rsplit("/", 1)[-1] for e in proxy.seen()] == ["render.json"]  # sized from the record
        _same(remote[k], local[item])
        log = proxy.seen()
        assert [(e[0], e[1].split("/renders/ar-open/")[1]) for e in log] == [
            ("GET", "render.json"), ("GET", f"part-{part:05d}/items-00000.array_record")], log
        shard = (tmp_path / "ar" / f"part-{part:05d}" / "items-00000.array_record").stat().st_size
        assert log[1][3] == shard  # one shard, whole, nothing more
    cached = open_render("s3://renders/ar-open", cache_limit="10MB", cache_dir=tmp_path / "cache")
    _same(cached[9], local[9])
    proxy.reset()
    again = open_render("s3://renders/ar-open", cache_limit="10MB", cache_dir=tmp_path / "cache")
    _same(again[10], local[10])  # named by content: the staged shard is used without asking the storage
    assert [e[1].rsplit("/", 1)[-1] for e in proxy.seen()] == ["render.json"], proxy.seen()


def test_arrayrecord_record_without_shards_reads_each_part_index_on_first_use(s3proxy, tmp_path):
    """What render wrote before records listed shards: the part's index, the shard's version, then the shard."""
    from audiotree.sources import open_render

    fs, proxy = s3proxy["fs"], s3proxy["proxy"]
    corpus = _corpus(tmp_path / "corpus")
    _render(tmp_path / "ar", corpus, 20, "--format", "arrayrecord")
    fs.put(str(tmp_path / "ar"), "renders/ar-old", recursive=True)
    _rewrite_record(fs, "renders/ar-old/render.json", lambda part: part.pop("shards"))
    local = open_render(tmp_path / "ar")
    proxy.reset()
    remote = open_render("s3://renders/ar-old")
    _same(remote[0], local[0])
    log = proxy.seen()
    assert [(e[0], e[1].split("/renders/ar-old/")[1]) for e in log] == [
        ("GET", "render.json"), ("GET", "part-00000/arrayrecord.json"),
        ("HEAD", "part-00000/items-00000.array_record"), ("GET", "part-00000/items-00000.array_record")], log
    _rewrite_manifest(fs, "renders/ar-old/part-00002/arrayrecord.json",
                      lambda index: index["shards"][0].update(num_records=3))
    fs.rm("renders/ar-old/part-00001/arrayrecord.json")
    damaged = open_render("s3://renders/ar-old")
    _same(damaged[7], local[7])
    with pytest.raises(FileNotFoundError, match=r"part-00001, but it holds no arrayrecord\.json"):
        damaged[8]
    with pytest.raises(ValueError, match=r"part-00002/arrayrecord\.json.*(lists the shards|num_records)"):
        damaged[16]


def test_arrayrecord_render_with_a_missing_truncated_or_replaced_shard_names_it(s3proxy, tmp_path):
    from audiotree.sources import open_render

    fs = s3proxy["fs"]
    corpus = _corpus(tmp_path / "corpus")
    _render(tmp_path / "ar", corpus, 20, "--format", "arrayrecord")
    fs.put(str(tmp_path / "ar"), "renders/ar-bad", recursive=True)
    local = open_render(tmp_path / "ar")
    fs.rm("renders/ar-bad/part-00001", recursive=True)
    key = "renders/ar-bad/part-00002/items-00000.array_record"
    whole = fs.cat_file(key)
    fs.pipe(key, whole[:-100])
    cache = tmp_path / "cache"
    ds = open_render("s3://renders/ar-bad", cache_limit="10MB", cache_dir=cache)
    _same(ds[7], local[7])
    with pytest.raises(FileNotFoundError, match=r"names the finished part s3://renders/ar-bad/part-00001, but it "
                                                r"holds no items-00000\.array_record; the part was deleted"):
        ds[8]
    with pytest.raises(ValueError, match=rf"s3://{key}: it is {len(whole) - 100} bytes, but the render record says "
                                         rf"{len(whole)}; the remote part is truncated or was replaced"):
        ds[16]
    fs.pipe(key, whole[:-1] + bytes([whole[-1] ^ 1]))  # same size, other bytes
    with pytest.raises(ValueError, match=rf"s3://{key}: its SHA-256 differs from the render record's"):
        open_render("s3://renders/ar-bad", cache_limit="10MB", cache_dir=cache)[19]
    # Nothing bad was kept in the cache, and nothing committed was touched.
    staged = sorted(p for p in cache.rglob("*") if p.is_file())
    assert len(staged) == 1 and not any(p.name.startswith(".") for p in staged), staged
    assert fs.exists("renders/ar-bad/render.json") and fs.exists("renders/ar-bad/part-00000/items-00000.array_record")
    fs.pipe(key, whole)  # put back: the same reader now reads it
    _same(ds[16], local[16])


def test_arrayrecord_record_with_damaged_shard_entries_is_named_at_open(s3proxy, tmp_path):
    from audiotree.sources import open_render

    fs = s3proxy["fs"]
    corpus = _corpus(tmp_path / "corpus")
    _render(tmp_path / "ar", corpus, 12, "--format", "arrayrecord")
    for k, (edit, message) in enumerate((
        (lambda part: part["shards"][0].update(sha256="nothex"), r"part part-0000\d: shard entry .* is not"),
        (lambda part: part["shards"][0].update(file="../x"), r"shard entry .* plain file name"),
        (lambda part: part["shards"][0].update(num_records=1), r"its shards hold 1 records, but the part counts 8"),
    )):
        fs.put(str(tmp_path / "ar"), f"renders/ar-rec{k}", recursive=True)
        _rewrite_record(fs, f"renders/ar-rec{k}/render.json", edit)
        with pytest.raises(ValueError, match=message):
            open_render(f"s3://renders/ar-rec{k}")


def test_arrayrecord_render_with_an_unwritable_cache_folder_is_named_at_open(s3proxy, tmp_path):
    from audiotree.sources import open_arrayrecord, open_render

    corpus = _corpus(tmp_path / "corpus")
    _render(tmp_path / "ar", corpus, 12, "--format", "arrayrecord")
    s3proxy["fs"].put(str(tmp_path / "ar"), "renders/ar-cache", recursive=True)
    blocked = tmp_path / "file-in-the-way"  # a file where the folder should be: unwritable even for root
    blocked.write_text("")
    for opener in (open_render, open_arrayrecord):
        with pytest.raises(PermissionError, match=rf"read cache folder {blocked}/cache is not writable"):
            opener("s3://renders/ar-cache", cache_limit="1GB", cache_dir=blocked / "cache")
    assert s3proxy["fs"].exists("renders/ar-cache/part-00001/items-00000.array_record")


def test_webdataset_render_is_refused_by_open_render_with_the_way_to_read_it(s3proxy, tmp_path):
    from audiotree.sources import create_audio_dataset, open_render

    corpus = _corpus(tmp_path / "corpus")
    _render(tmp_path / "wds", corpus, 4, "--format", "webdataset")
    s3proxy["fs"].put(str(tmp_path / "wds"), "renders/wds", recursive=True)
    for where in (tmp_path / "wds", "s3://renders/wds"):
        with pytest.raises(ValueError, match=r"is a --format webdataset render.*create_audio_dataset"):
            open_render(where)
    ds = create_audio_dataset(sources=["s3://renders/wds/part-00000/shard-000000.tar"], sample_rate=8000,
                              duration=None, shuffle=False)
    assert len(ds) == 4


def test_audio_render_with_a_missing_part_or_a_truncated_item_file_names_the_object(s3proxy, tmp_path):
    from audiotree.sources import open_render

    fs = s3proxy["fs"]
    corpus = _corpus(tmp_path / "corpus")
    _render(tmp_path / "audio", corpus, 20, "--format", "audio")
    fs.put(str(tmp_path / "audio"), "renders/audio-bad", recursive=True)
    local = open_render(tmp_path / "audio")
    fs.rm("renders/audio-bad/part-00001", recursive=True)
    key = "renders/audio-bad/part-00002/audio_000001.wav"
    whole = fs.cat_file(key)
    fs.pipe(key, whole[:-100])
    ds = open_render("s3://renders/audio-bad")
    _same(ds[3], local[3])
    with pytest.raises(FileNotFoundError, match=r"names the finished part part-00001.*part-00001/manifest\.npz"):
        ds[9]
    from audiotree.errors import AudioReadError

    with pytest.raises(AudioReadError, match=rf"s3://{key}'?: the file is truncated"):
        ds[17]
    _same(ds[16], local[16])  # the part's other items stay readable
    assert fs.exists("renders/audio-bad/render.json") and fs.exists("renders/audio-bad/part-00002/manifest.npz")


def test_resuming_a_remote_render_whose_record_names_a_missing_part_is_refused_and_changes_nothing(s3proxy, tmp_path):
    import audiotree

    fs = s3proxy["fs"]
    ds = create_audio_dataset(str(_corpus(tmp_path / "corpus")), duration=0.25, sample_rate=8000, num_epochs=None)
    url = "s3://renders/resume-hole"
    audiotree.render(ds, url, 6, part_size=2)
    fs.rm("renders/resume-hole/part-00001", recursive=True)
    fs.invalidate_cache()
    before = {k: fs.cat_file(k) for k in fs.find("renders/resume-hole")}
    with pytest.raises(FileNotFoundError, match=r"s3://renders/resume-hole/render\.json names the finished part\(s\) "
                                                r"part-00001, but s3://renders/resume-hole lacks it; nothing was changed"):
        audiotree.render(ds, url, 10, part_size=2)
    fs.invalidate_cache()
    assert {k: fs.cat_file(k) for k in fs.find("renders/resume-hole")} == before
    more = audiotree.render(ds, "s3://renders/resume-ok", 4, part_size=2)
    assert audiotree.render(ds, "s3://renders/resume-ok", 6, part_size=2).resumed_from == more.total == 4


def test_open_arrayrecord_reads_a_dataset_and_a_render_on_s3_hosts_disjoint_and_complete(s3proxy, tmp_path):
    from audiotree.core import AudioTree
    from audiotree.sources import open_arrayrecord
    from audiotree.writers import ArrayRecordWriter

    fs, proxy = s3proxy["fs"], s3proxy["proxy"]
    ds = create_audio_dataset(str(_corpus(tmp_path / "c")), duration=0.25, sample_rate=8000, shuffle=False)
    batch = AudioTree.batch([ds[i] for i in range(7)])
    with ArrayRecordWriter("s3://renders/ar-dataset", records_per_shard=2) as writer:  # 4 shards: 2+2+2+1
        writer.write(batch)
    with ArrayRecordWriter(tmp_path / "ar-local", records_per_shard=2) as writer:
        writer.write(batch)
    local = open_arrayrecord(tmp_path / "ar-local")
    shards, offsets = [], []
    for host in range(2):
        proxy.reset()
        share = open_arrayrecord("s3://renders/ar-dataset", shard_options=grain.sharding.ShardOptions(host, 2))
        got = [share[k] for k in range(len(share))]
        offsets.append([float(item.offset[0]) for item in got])
        shards.append({e[1] for e in proxy.seen() if e[0] == "GET" and e[1].endswith(".array_record")})
    assert shards == [{"/renders/ar-dataset/items-00000.array_record", "/renders/ar-dataset/items-00002.array_record"},
                      {"/renders/ar-dataset/items-00001.array_record", "/renders/ar-dataset/items-00003.array_record"}]
    assert sorted(offsets[0] + offsets[1]) == sorted(float(local[i].offset[0]) for i in range(7))
    remote = open_arrayrecord("s3://renders/ar-dataset")
    for i in (6, 0, 3):
        _same(remote[i], local[i])
    _render(tmp_path / "ar", tmp_path / "c", 20, "--format", "arrayrecord")
    fs.put(str(tmp_path / "ar"), "renders/ar-via-open", recursive=True)
    proxy.reset()
    from audiotree.sources import open_render

    _same(open_arrayrecord("s3://renders/ar-via-open")[19], open_render(tmp_path / "ar")[19])
    # No dataset index at the render's root (one request), then the record and the last part's shard.
    assert [e[1].rsplit("/", 1)[-1] for e in proxy.seen()] == ["arrayrecord.json", "render.json",
                                                              "items-00000.array_record"], proxy.seen()

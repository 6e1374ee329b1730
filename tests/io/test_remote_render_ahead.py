"""A tree render read back from S3 with read-ahead along the order it is read in (issue 39).

moto on 127.0.0.1 behind the counting proxy of ``test_remote_render``: requests are counted at the server side.
Every dataset is compared item for item with the same render read without read-ahead (``read_ahead=None``).
"""

from __future__ import annotations

import grain
import numpy as np
import pytest

from audiotree.io import read_ahead
from audiotree.sources import ReadAhead, open_render

from test_remote_render import _corpus, _render, _same, counted_s3

SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
ITEMS = 40  # in parts of 8: five parts


@pytest.fixture(scope="module")
def render(tmp_path_factory):
    """A tree render of 40 items of 0.5 s (rows of 16,000 bytes) on local disk and at ``s3://renders-ahead/tree``."""
    tmp = tmp_path_factory.mktemp("render-ahead")
    with counted_s3() as (fs, proxy):
        fs.mkdir("renders-ahead")  # (moto keeps one store per process: a bucket of our own)
        _render(tmp / "local", _corpus(tmp / "corpus"), ITEMS, duration="0.5")
        fs.put(str(tmp / "local"), "renders-ahead/tree", recursive=True)
        yield {"fs": fs, "proxy": proxy, "local": tmp / "local", "url": "s3://renders-ahead/tree"}


def _read(ds, options=SYNC, workers: int = 0, start_state=None, count: int | None = None):
    it = ds.to_iter_dataset(options)
    if workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    it = iter(it)
    if start_state is not None:
        it.set_state(start_state)
    try:
        return [next(it) for _ in range(count)] if count is not None else list(it)
    finally:
        del it


def _all_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        _same(x, y)


def test_items_equal_without_read_ahead_with_fewer_requests_than_items(render):
    proxy = render["proxy"]
    proxy.reset()
    plain = _read(open_render(render["url"], read_ahead=None))
    plain_gets = [e for e in proxy.seen() if e[0] == "GET"]
    read_ahead.close_stores()
    proxy.reset()
    ahead = _read(open_render(render["url"]))
    log = proxy.seen()
    gets = [e for e in log if e[0] == "GET"]
    _all_same(plain, ahead)
    _all_same(ahead, _read(open_render(render["local"])))
    # Without: the record, 5 manifests and one row each. With: the first 3 rows (before the order is known) alone,
    # then 8 items a plan, their rows merged (two requests where the 8 span two parts), and nothing else (no HEAD
    # for an object's size: the plan's GET checked it). Measured: 12 row requests for 40 items.
    assert len(plain_gets) == 1 + 5 + ITEMS, plain_gets
    rows = [e for e in gets if e[1].endswith("waveform.bin")]
    assert len(rows) <= 3 + 2 * 5, rows
    assert len(gets) <= ITEMS / 2 and all(e[0] == "GET" for e in log), log
    # Every byte of every row was read once: the merged requests cover the rows and no more.
    assert sum(e[3] for e in rows) == ITEMS * 16000


@pytest.mark.slow
def test_two_grain_workers_and_reader_threads_give_the_same_items(render):
    proxy = render["proxy"]
    plain = _read(open_render(render["url"], read_ahead=None))
    read_ahead.close_stores()
    proxy.reset()
    workers = _read(open_render(render["url"]), grain.ReadOptions(num_threads=4, prefetch_buffer_size=8), workers=2)
    gets = [e for e in proxy.seen() if e[0] == "GET"]
    _all_same(plain, workers)
    # Each worker reads every other item: its rows are 16 kB apart, close enough to be merged too. Measured: 32
    # GETs for 40 items (20 of rows; the rest the record and each process's manifests).
    assert len(gets) <= ITEMS, gets
    threads = _read(open_render(render["url"]), grain.ReadOptions(num_threads=8, prefetch_buffer_size=16))
    _all_same(plain, threads)


def test_a_checkpoint_mid_epoch_resumes_exactly(render):
    ds = open_render(render["url"]).repeat(2)
    it = iter(ds.to_iter_dataset(SYNC))
    for _ in range(ITEMS - 7):  # into the last part, with the next epoch's first items already planned
        next(it)
    state = it.get_state()
    rest = [next(it) for _ in range(14)]
    read_ahead.close_stores()
    resumed = _read(open_render(render["url"]).repeat(2), start_state=state, count=14)
    _all_same(rest, resumed)
    local = open_render(render["local"])
    _all_same(rest, [local[(ITEMS - 7 + k) % ITEMS] for k in range(14)])


def test_a_replaced_part_is_not_read_from_bytes_fetched_ahead(render):
    """A plan's GET that finds an object of another size than the manifest's keeps no block; the item's own read
    names the object."""
    fs = render["fs"]
    fs.put(str(render["local"]), "renders-ahead/replaced", recursive=True)
    ds = open_render("s3://renders-ahead/replaced", read_ahead=ReadAhead(items=16))
    for i in range(8):  # part 0; parts 1 and 2 are planned ahead as read from here on
        _same(ds[i], open_render(render["local"])[i])
    key = "renders-ahead/replaced/part-00003/waveform.bin"
    fs.pipe(key, fs.cat_file(key) + b"\0" * 64)  # longer: its rows would still be where they were
    for i in range(8, 24):
        ds[i]
    with pytest.raises(ValueError, match=r"part-00003/waveform\.bin: it is \d+ bytes, but the manifest needs "
                                         r"exactly \d+; the remote part is truncated or was replaced"):
        ds[24]


def test_a_shuffled_render_still_reads_ahead_and_gives_the_same_items(render):
    """``shuffle`` (and ``map``) after ``open_render`` go below the read-ahead, which sees the order items are read in."""
    from audiotree.io.byte_counters import byte_counters, reset_byte_counters

    local = _read(open_render(render["local"]).shuffle(seed=3).map(lambda t: t))
    reset_byte_counters()
    remote = open_render(render["url"]).shuffle(seed=3).map(lambda t: t)
    got = _read(remote)
    _all_same(local, got)
    hits = byte_counters()["by_cache"].get("read_ahead", {}).get("hits", 0)
    assert hits >= ITEMS - 3, byte_counters()  # every row but the first three came from bytes fetched ahead
    batched = _read(open_render(render["url"]).shuffle(seed=3).batch(4))
    assert len(batched) == ITEMS // 4
    np.testing.assert_array_equal(np.asarray(batched[1].waveform[2]), np.asarray(local[6].waveform))


def test_bad_read_ahead_is_refused_by_name(render):
    with pytest.raises(TypeError, match="read_ahead must be a ReadAhead"):
        open_render(render["url"], read_ahead=64)
    local = open_render(render["local"], read_ahead=ReadAhead(items=4))  # a local render reads as always
    assert np.asarray(local[0].waveform).shape == (1, 1, 4000)


def test_a_read_ahead_short_of_room_fetches_each_row_once(render):
    """With a cache_limit of a few rows, the plans stop at the limit and some rows are read without one (their own
    GET). Those reads are not a decoder reading on from the object's start: the part's later plans must not be
    widened to start at byte 0 (they were: each plan then fetched the part from its first row, twice the bytes and
    more)."""
    proxy = render["proxy"]
    read_ahead.close_stores()
    proxy.reset()
    options = ReadAhead(items=16, cache_limit=40_000)  # two and a half rows of 16,000 bytes
    ahead = _read(open_render(render["url"], read_ahead=options), grain.ReadOptions(num_threads=4))
    rows = [e for e in proxy.seen() if e[0] == "GET" and e[1].endswith("waveform.bin")]
    read_ahead.close_stores()
    _all_same(ahead, _read(open_render(render["local"])))
    # Rows taken as views of the fetched blocks are copied into each item: its arrays are its own, writable.
    waveform = np.asarray(ahead[0].waveform)
    assert waveform.flags.writeable and waveform.flags.owndata
    assert sum(e[3] for e in rows) <= 1.25 * ITEMS * 16000, " ".join(f"{e[1][-17:-13]}:{e[2][6:]}" for e in rows)


def test_open_render_reads_further_ahead_than_a_corpus(render):
    """A render's default read-ahead plans 128 items with 64 requests in flight (a corpus's: 64 and 32): rows are
    whole items, so fewer come per second and, shuffled, each is a request (measured: +30 % items/s at +50 ms)."""
    import inspect

    default = inspect.signature(open_render).parameters["read_ahead"].default
    assert (default.items, default.max_in_flight) == (128, 64)
    assert default.cache_limit == ReadAhead().cache_limit
    read_ahead.close_stores()
    ds = open_render(render["url"])
    items = _read(ds, count=3)
    assert [store.options for store in read_ahead.active_stores()] == [default]
    _all_same(items, _read(open_render(render["local"]), count=3))
    read_ahead.close_stores()

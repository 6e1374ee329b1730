"""A resumed index build writes the same bytes as an uninterrupted one."""

from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest
import soundfile

from audiotree.index import build_index


class _StopsAfter(concurrent.futures.ThreadPoolExecutor):
    """A real thread pool that refuses new work after ``n`` chunks: the build stops part-way, as if killed."""

    def __init__(self, n: int) -> None:
        super().__init__(max_workers=1)
        self.left = n

    def submit(self, fn, *args, **kwargs):
        if self.left == 0:
            raise KeyboardInterrupt("interrupted")
        self.left -= 1
        return super().submit(fn, *args, **kwargs)


def test_a_resumed_build_is_byte_identical_to_an_uninterrupted_one(tmp_path):
    rng = np.random.default_rng(0)
    for i in range(6):
        path = tmp_path / "audio" / f"f{i}.wav"
        path.parent.mkdir(parents=True, exist_ok=True)
        soundfile.write(path, (0.1 * rng.standard_normal(8_000 + 1_000 * i)).astype(np.float32), 8_000)
    out, fresh = tmp_path / "resumed.parquet", tmp_path / "fresh.parquet"
    stopper = _StopsAfter(5)  # more than the runner keeps in flight, so some chunks finish first
    with pytest.raises(KeyboardInterrupt):
        build_index(str(tmp_path / "audio"), out, executor=stopper, chunk_size=1, show_progress=False)
    stopper.shutdown()
    parts = list((tmp_path / ".resumed.parquet.parts").glob("part-*.parquet"))
    assert 1 <= len(parts) < 6 and not out.exists()
    report = build_index(str(tmp_path / "audio"), out, executor="serial", chunk_size=1, show_progress=False)
    assert report.resumed == len(parts) and report.rows == 6
    build_index(str(tmp_path / "audio"), fresh, executor="serial", chunk_size=1, show_progress=False)
    assert out.read_bytes() == fresh.read_bytes()


def test_an_index_without_the_error_kind_column_still_opens_and_updates(tmp_path):
    import pyarrow.parquet as pq

    from audiotree.index import open_index

    rng = np.random.default_rng(1)
    (tmp_path / "audio").mkdir()
    for i in range(2):
        soundfile.write(tmp_path / "audio" / f"f{i}.wav", (0.1 * rng.standard_normal(8_000)).astype(np.float32), 8_000)
    out = tmp_path / "old.parquet"
    build_index(str(tmp_path / "audio"), out, executor="serial", show_progress=False)
    pq.write_table(pq.read_table(out).drop_columns(["error_kind"]), out)  # as written before error_kind existed
    ix = open_index(out, columns="all")
    assert len(ix) == 2 and ix.table.column("error_kind").null_count == 2
    report = build_index(str(tmp_path / "audio"), out, executor="serial", show_progress=False)
    assert (report.read, report.reused) == (0, 2)
    assert "error_kind" in pq.read_schema(out).names

"""executor=: serial, threads, a process pool give the same results; bad executors; missing Ray."""

from __future__ import annotations

import concurrent.futures
import doctest
import importlib
import os
import textwrap

import numpy as np
import pytest

from helpers import run_script


@pytest.mark.parametrize("module", [
    "audiotree.parallel.chunks", "audiotree.parallel.executors", "audiotree.parallel.staging",
    "audiotree.formats.arrayrecord_codec", "audiotree.writers.arrayrecord_writer", "audiotree.sources.readers.arrayrecord_source",
])
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_chunks_cover_everything_once():
    from audiotree.parallel import auto_chunk_size, chunk_ranges

    for n, workers in [(0, 4), (1, 1), (17, 2), (10_000, 3), (12_345, 64)]:
        size = auto_chunk_size(n, workers)
        ranges = chunk_ranges(n, size, start=0)
        assert [i for r in ranges for i in r] == list(range(n))
        assert all(len(r) <= size for r in ranges)
    assert chunk_ranges(10, 4, start=3) == [range(3, 7), range(7, 10)]
    with pytest.raises(ValueError, match="chunk_size"):
        chunk_ranges(10, 0)
    with pytest.raises(ValueError, match="workers"):
        auto_chunk_size(10, 0)


def _square_and_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def test_every_executor_gives_the_same_ordered_results():
    from audiotree.parallel import map_items

    items = list(range(103))
    expected = [x * x for x in items]
    seen = []
    serial = map_items(_square_and_pid, items, progress=seen.append)
    assert [r for r, _ in serial] == expected and sum(seen) == len(items)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        threads = map_items(_square_and_pid, items, executor=pool, chunk_size=5)
    assert [r for r, _ in threads] == expected
    progress = []
    processes = map_items(_square_and_pid, items, executor="process", chunk_size=7, progress=progress.append)
    assert [r for r, _ in processes] == expected
    assert sorted(progress) == sorted([7] * 14 + [5])  # one call per chunk, sized by the chunk
    assert os.getpid() not in {pid for _, pid in processes}  # the work really ran elsewhere


def test_bad_executors_are_refused():
    from audiotree.parallel import map_items

    with pytest.raises(ValueError, match="Unknown executor 'dask'"):
        map_items(abs, [1], executor="dask")
    with pytest.raises(TypeError, match="concurrent.futures.Executor"):
        map_items(abs, [1], executor=4)
    with pytest.raises(ValueError, match="needs executor='ray'"):
        map_items(abs, [1], executor="process", ray_address="auto")


def test_an_error_in_the_work_reaches_the_caller_naming_the_file(tmp_path):
    from audiotree.errors import AudioReadError
    from audiotree.sources import scan_durations

    bad = tmp_path / "broken.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really")
    with pytest.raises(AudioReadError, match="broken.wav"):
        scan_durations([bad], executor="process")


@pytest.mark.slow
def test_scan_and_window_lufs_cache_are_identical_on_a_process_pool(corpus, tmp_path):
    from audiotree.parallel import open_executor
    from audiotree.sources import build_window_lufs_cache, find_audio_files, load_window_lufs, scan_durations

    files = sorted(str(p) for group in ("speech", "music") for p in find_audio_files(corpus[group]))
    serial = scan_durations(files)
    a = load_window_lufs(build_window_lufs_cache(files, 0.4, tmp_path / "serial"))
    with open_executor("process") as pool:  # one pool for every job (workers start once)
        pooled = scan_durations(files, executor=pool)
        b = load_window_lufs(build_window_lufs_cache(files, 0.4, tmp_path / "process", executor=pool))
    assert list(pooled) == files and pooled == serial
    assert a.durations == b.durations and list(a.lufs) == list(b.lufs)
    for path in files:
        assert a.lufs[path].size and a.lufs[path].tobytes() == b.lufs[path].tobytes()
    with np.load(tmp_path / "serial" / "window_lufs.npz") as x, np.load(tmp_path / "process" / "window_lufs.npz") as y:
        assert sorted(x.files) == sorted(y.files)
        for key in x.files:
            assert x[key].tobytes() == y[key].tobytes(), key


def test_missing_ray_names_the_extra(tmp_path):
    code = textwrap.dedent("""
        import sys
        sys.modules["ray"] = None  # as if Ray were not installed
        from audiotree.sources import scan_durations
        try:
            scan_durations([], executor="ray")
        except ImportError as exc:
            print("ERROR:", exc)
    """)
    result = run_script(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "pip install 'audiotree[ray]'" in result.stdout


def test_cli_refuses_contradictory_executor_options(corpus, tmp_path, capsys):
    from audiotree.cli import main

    base = ["render", str(corpus["speech"]), "-n", "2", "--out", str(tmp_path / "out")]
    assert main([*base, "--executor", "process", "--workers", "2"]) == 2
    assert "--workers (mp_prefetch) and --executor are alternatives" in capsys.readouterr().err
    assert main([*base, "--ray-address", "auto"]) == 2
    assert "--ray-address needs --executor ray" in capsys.readouterr().err
    assert main(["scan", str(corpus["speech"]), "--executor", "process", "--ray-address", "auto"]) == 2
    assert "--ray-address needs --executor ray" in capsys.readouterr().err
    assert main(["scan", str(corpus["speech"]), "--executor", "dask"]) == 2
    assert "'dask' is not one of 'process', 'ray'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_scan_report_is_the_same_on_a_process_pool(corpus, capsys):
    import json

    from audiotree.cli import main

    args = ["scan", str(corpus["effects"]), "--loudness", "--json"]
    assert main(args) == 0
    threads = capsys.readouterr().out
    assert main([*args, "--executor", "process"]) == 0
    pooled = capsys.readouterr().out
    assert pooled == threads and json.loads(pooled)["loudness"]["measured"] == 8

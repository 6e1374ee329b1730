"""executor="ray" on a real local cluster: same results as serial, faults survived through retries.

One cluster (``ray.init(num_cpus=2)`` on 127.0.0.1) serves the whole module; the
fixture shuts it down, checks that every process it started has exited, and
that nothing was written under the home folder. Ray's session files go to a
temporary folder, and its auth token comes from the environment (Ray would
otherwise save a new one to ``~/.ray/auth_token``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import assert_same_render

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'audiotree[ray]')")
psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.slow


def _home_state() -> dict:
    home = Path.home()
    return {name: sorted(os.listdir(home / name)) if (home / name).is_dir() else None for name in (".ray", ".config")}


def _exited(proc) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE  # dead, only not yet reaped by its parent
    except psutil.NoSuchProcess:
        return True


@pytest.fixture(scope="module")
def cluster():
    before = _home_state()
    # Children of this process that other tests left: not the cluster's, so not checked here.
    earlier = {p.pid for p in psutil.Process().children(recursive=True)}
    # A short folder: Ray's Unix sockets live under it and their paths have a length limit.
    temp_dir = tempfile.mkdtemp(prefix="atray", dir="/tmp")
    # The auth token comes from the environment (tests/conftest.py sets it before Ray is imported).
    assert os.environ.get("RAY_AUTH_TOKEN") and os.environ.get("RAY_AUTH_MODE") == "token"
    # The cluster's workers inherit this process's environment: named now, their read counters go to this
    # session's board (audiotree.io.read_stats), not to boards of their own that a killed worker would leave.
    from audiotree.io import read_board

    read_board.reserve()
    ray.init(num_cpus=2, _temp_dir=temp_dir, _node_ip_address="127.0.0.1", include_dashboard=False,
             log_to_driver=False)
    started = [p for p in psutil.Process().children(recursive=True) if p.pid not in earlier]
    try:
        yield {"address": ray.get_runtime_context().gcs_address, "processes": started}
    finally:
        # Taken before the shutdown: a worker orphaned by a dying raylet would no longer be our descendant.
        ours = started + [p for p in psutil.Process().children(recursive=True) if p.pid not in earlier]
        ray.shutdown()
        _, alive = psutil.wait_procs(ours, timeout=60)
        alive = [p for p in alive if not _exited(p)]
        for proc in alive:  # only what the cluster started; reported below as a failure
            proc.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert not alive, f"Ray processes left behind: {alive}"
    assert _home_state() == before, "the Ray run wrote under the home folder"


def _task_workers() -> list:
    from audiotree.parallel._ray import TASK_NAME

    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.name().startswith(f"ray::{TASK_NAME}") or " ".join(proc.cmdline()).startswith(f"ray::{TASK_NAME}"):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _kill_busy_worker(done: threading.Event, busy_pids, *, timeout: float = 120) -> int | None:
    """SIGKILLs a Ray worker running an audiotree task whose pid ``busy_pids()`` names; returns the pid."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done.is_set():
        busy = set(busy_pids())
        for proc in _task_workers():
            if proc.pid in busy:
                try:
                    proc.send_signal(signal.SIGKILL)
                    return proc.pid
                except psutil.Error:
                    continue
        time.sleep(0.01)
    return None


def _log_lines(log: Path) -> list[list[str]]:
    return [line.split(" ", 2) for line in log.read_text().splitlines()] if log.exists() else []


def _inside_the_work(log: Path) -> set[int]:
    """Pids that logged the start of an item and not yet its end."""
    open_items: dict[tuple[int, str], int] = {}
    for kind, pid, path in _log_lines(log):
        key = (int(pid), path)
        open_items[key] = open_items.get(key, 0) + (1 if kind == "start" else -1)
    return {pid for (pid, _), n in open_items.items() if n > 0}


def _writing_a_part(staging: Path) -> set[int]:
    """Pids whose render attempt folder (``part-N.<pid>-<random>``) exists under ``staging``."""
    try:
        names = os.listdir(staging)
    except OSError:
        return set()
    # Dot names (the driver's .visible token) are not attempts.
    return {int(name.split(".", 1)[1].split("-", 1)[0]) for name in names if "." in name and not name.startswith(".")}


def test_cluster_is_on_loopback(cluster):
    assert cluster["address"].startswith("127.0.0.1:")


def test_ray_map_equals_serial_in_order(cluster):
    from audiotree.parallel import map_items, open_executor

    items = list(range(-50, 51))
    progress = []
    with open_executor("ray") as runner:
        assert runner.name == "ray" and runner.workers == 2
        got = map_items(abs, items, executor=runner, chunk_size=9, progress=progress.append)
    assert got == [abs(x) for x in items] and sum(progress) == len(items) and len(progress) == 12
    assert ray.is_initialized()  # a cluster joined, not started, is left running


def test_scan_and_lufs_cache_on_ray_equal_serial(cluster, corpus, tmp_path):
    from audiotree.errors import AudioReadError
    from audiotree.sources import build_window_lufs_cache, find_audio_files, load_window_lufs, scan_durations

    files = sorted(str(p) for p in find_audio_files(corpus["speech"]))
    assert scan_durations(files, executor="ray") == scan_durations(files)
    a = load_window_lufs(build_window_lufs_cache(files, 0.4, tmp_path / "serial"))
    b = load_window_lufs(build_window_lufs_cache(files, 0.4, tmp_path / "ray", executor="ray"))
    assert a.durations == b.durations
    assert all(a.lufs[p].size and a.lufs[p].tobytes() == b.lufs[p].tobytes() for p in files)

    bad = tmp_path / "broken.flac"
    bad.write_bytes(b"fLaC" + b"\0" * 40)
    with pytest.raises(AudioReadError, match="broken.flac"):  # the work's own error, not retried, as itself
        scan_durations([*files, str(bad)], executor="ray")


def test_index_on_ray_equals_serial(cluster, corpus, tmp_path):
    from audiotree.index import build_index
    from helpers import run_cli_subprocess

    sources = {"speech": corpus["speech"], "music": corpus["music"]}
    build_index(sources, tmp_path / "serial.parquet", executor="serial", show_progress=False)
    report = build_index(sources, tmp_path / "ray.parquet", executor="ray", chunk_size=2, show_progress=False)
    assert report.rows > 4
    assert (tmp_path / "ray.parquet").read_bytes() == (tmp_path / "serial.parquet").read_bytes()
    # A separate driver joining the cluster by address, as on a real cluster.
    result = run_cli_subprocess(["index", f"speech={corpus['speech']}", f"music={corpus['music']}", "--out",
                                 tmp_path / "cli.parquet", "--executor", "ray", "--ray-address", cluster["address"],
                                 "--no-progress"])
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "cli.parquet").read_bytes() == (tmp_path / "serial.parquet").read_bytes()


def _slow_duration(path: str, log: str) -> float:
    """A real header probe that takes long enough to be caught mid-task; logs each attempt."""
    from audiotree.sources.datasets.windowed import _header_duration

    with open(log, "a") as f:
        f.write(f"start {os.getpid()} {path}\n")
    time.sleep(0.3)
    duration = _header_duration(path)
    with open(log, "a") as f:
        f.write(f"end {os.getpid()} {path}\n")
    return duration


def test_scan_survives_a_killed_worker(cluster, corpus, tmp_path):
    import functools

    from audiotree.parallel import map_items
    from audiotree.sources import find_audio_files, scan_durations

    # Ray's workers cannot import this test module: ship _slow_duration by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    files = sorted(str(p) for g in ("music", "effects") for p in find_audio_files(corpus[g]))
    expected = list(scan_durations(files).values())
    log = tmp_path / "attempts.log"
    out, done = {}, threading.Event()

    def job():
        try:
            out["result"] = map_items(functools.partial(_slow_duration, log=str(log)), files, executor="ray",
                                      chunk_size=2)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            out["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=job)
    thread.start()
    killed = _kill_busy_worker(done, lambda: _inside_the_work(log))
    thread.join(timeout=300)
    assert not thread.is_alive() and "error" not in out, out.get("error")
    assert killed is not None, "no worker was caught running a task"
    assert out["result"] == expected
    lines = _log_lines(log)
    started_by_killed = {p for kind, pid, p in lines if kind == "start" and int(pid) == killed}
    ended_by_killed = {p for kind, pid, p in lines if kind == "end" and int(pid) == killed}
    unfinished = started_by_killed - ended_by_killed
    assert unfinished, "the killed worker had finished its work: the kill came too late to test a retry"
    for path in unfinished:  # re-run by another worker and finished there
        assert any(kind == "end" and int(pid) != killed and p == path for kind, pid, p in lines)


def _render_args(corpus, out: Path, *extra: str) -> list[str]:
    # Batches of one item: a part's attempt folder exists from its first item to its last, which
    # gives the fault test a wide window to find a worker inside the work.
    return ["render", str(corpus["speech"]), str(corpus["music"]), "-n", "24", "--part-size", "6", "--batch-size",
            "1", "--duration", "0.5", "--sample-rate", "16000", "--out", str(out), *extra]


@pytest.fixture(scope="module")
def local_render(corpus, tmp_path_factory):
    from audiotree.cli import main

    out = tmp_path_factory.mktemp("local") / "render"
    assert main(_render_args(corpus, out)) == 0
    return out


def test_render_on_ray_equals_the_local_render(cluster, corpus, tmp_path, local_render):
    from helpers import run_cli_subprocess

    # A separate driver joining the cluster by address, as on a real cluster.
    result = run_cli_subprocess(_render_args(corpus, tmp_path / "ray", "--executor", "ray",
                                             "--ray-address", cluster["address"]))
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "ray" / ".staging").exists()
    assert_same_render(local_render, tmp_path / "ray")


def test_render_survives_a_killed_worker(cluster, corpus, tmp_path, local_render):
    from audiotree.cli import main

    out, done = {}, threading.Event()
    target = tmp_path / "ray"

    def job():
        try:
            out["code"] = main(_render_args(corpus, target, "--executor", "ray"))
        finally:
            done.set()

    thread = threading.Thread(target=job)
    thread.start()
    killed = _kill_busy_worker(done, lambda: _writing_a_part(target / ".staging"))
    thread.join(timeout=300)
    assert not thread.is_alive() and out.get("code") == 0
    assert killed is not None, "no worker was caught running a render task"
    record = json.loads((target / "render.json").read_text())
    assert record["complete"] and [p["dir"] for p in record["parts"]] == [f"part-{i:05d}" for i in range(4)]
    assert sorted(p.name for p in target.iterdir()) == sorted(["render.json", *(f"part-{i:05d}" for i in range(4))])
    assert_same_render(local_render, target)  # nothing written twice, nothing lost

    from audiotree.sources import open_render

    rendered = open_render(target)
    assert len(rendered) == 24 and np.isfinite(np.asarray(rendered[23].waveform)).all()


def test_scan_command_on_ray_prints_the_same_report(cluster, corpus, capsys):
    from audiotree.cli import main

    args = ["scan", str(corpus["music"]), "--loudness", "--json"]
    assert main(args) == 0
    threads = capsys.readouterr().out
    assert main([*args, "--executor", "ray"]) == 0
    assert capsys.readouterr().out == threads and json.loads(threads)["readable"] == 8


def test_arrayrecord_render_on_ray_equals_the_local_one(cluster, corpus, tmp_path):
    from audiotree.cli import main

    common = ["render", str(corpus["effects"]), "-n", "10", "--part-size", "4", "--duration", "0.3",
              "--sample-rate", "16000", "--format", "arrayrecord"]
    assert main([*common, "--out", str(tmp_path / "local")]) == 0
    assert main([*common, "--out", str(tmp_path / "ray"), "--executor", "ray"]) == 0
    assert_same_render(tmp_path / "local", tmp_path / "ray")

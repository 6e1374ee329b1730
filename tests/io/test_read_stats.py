"""Read counters summed over a process tree (``audiotree.io.read_stats()``, in ``io/read_totals.py``), against a
real HTTP server.

The server (``counted_http.py``) counts every request it answers, HEADs
included, and the body bytes it sends; what ``read_stats()`` says in the
parent must be exactly that: the audio is read by Grain ``mp_prefetch``
workers (spawned) or PyTorch ``DataLoader`` workers (forked, spawned), never by
the parent. Pipelines with workers run in a fresh interpreter (forking from the
threaded pytest process can hang), with the server in a process of its own, and
without the pytest process's board: each script is the owner of its own tree's
board, which must be gone when the script has exited.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
import soundfile
from counted_http import CountedHttp
from helpers import run_script

from audiotree.io import AudioFile, read_board, read_stats, reset_read_stats
from audiotree.io.byte_counters import byte_counters, count_wait, reset_byte_counters

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


def _wav(seed: int, seconds: float = 1.0, rate: int = 8000) -> bytes:
    audio = (0.1 * np.random.default_rng(seed).standard_normal((int(seconds * rate), 1))).astype(np.float32)
    buf = io.BytesIO()
    soundfile.write(buf, audio, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _script_env() -> dict[str, str]:
    """The variables of a script that owns its own board: our sources and the server module first on the path."""
    env = {k: v for k, v in os.environ.items() if k != read_board.ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(HERE), str(HERE.parent), env.get("PYTHONPATH", "")])
    return env


def _run(code: str, tmp_path: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(code)
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=timeout, env=_script_env())


def _board_gone(out: subprocess.CompletedProcess) -> None:
    boards = [line.split(" ", 1)[1] for line in out.stdout.splitlines() if line.startswith("BOARD ")]
    assert boards and all(b.startswith("/") for b in boards), out.stdout
    assert not any(os.path.exists(b) for b in boards), f"left behind: {boards}"


# ------------------------------------------------------------------ in this process
def test_reads_of_this_process_equal_the_server_and_the_wait_is_counted():
    server = CountedHttp({"/a.wav": _wav(1)})
    try:
        reset_read_stats()
        with AudioFile(f"{server.base}/a.wav") as f:
            assert f.read(1000, 2000).shape == (2000, 1)
        stats = read_stats()
        assert (stats.requests, stats.bytes) == server.counts() and stats.requests >= 2
        assert set(stats.by_backend) == {"http"} and stats.by_backend["http"].requests == stats.requests
        assert stats.wait_seconds > 0 and stats.by_backend["http"].wait_seconds == pytest.approx(stats.wait_seconds)
        count_wait("http", 2.5)  # a read-ahead's wait: no request of its own
        later = read_stats()
        assert later.requests == stats.requests and later.wait_seconds - stats.wait_seconds == pytest.approx(2.5)
        assert (later - stats).wait_seconds == pytest.approx(2.5) and (later - stats).requests == 0
        reset_read_stats()
        assert read_stats().requests == 0 and read_stats().by_backend == {}
    finally:
        server.stop()


def test_byte_counters_stay_per_process_and_keep_their_own_reset():
    reset_byte_counters()
    reset_read_stats()
    server = CountedHttp({"/b.wav": _wav(2)})
    try:
        with AudioFile(f"{server.base}/b.wav") as f:
            f.read(0, 100)
        reset_byte_counters()  # byte_counters() starts again; read_stats() does not
        assert byte_counters()["requests"] == 0 and byte_counters()["wait_seconds"] == 0
        assert read_stats().requests == server.counts()[0] > 0
    finally:
        server.stop()


def test_the_public_names_are_the_functions_whatever_was_imported_first():
    import audiotree.io
    import audiotree.io.read_totals as totals

    assert audiotree.io.read_stats is totals.read_stats and audiotree.io.ReadStats is totals.ReadStats
    assert audiotree.io.reset_read_stats is totals.reset_read_stats


# ------------------------------------------------------------------ a tree of processes
_BOARD_SCRIPT = textwrap.dedent(
    """
    import multiprocessing, os, signal

    from audiotree.io import read_board, read_stats
    from audiotree.io.byte_counters import count_cache, count_request


    def child(n, die):
        for _ in range(n):
            count_request("s3", 1000)
        count_cache("c", hit=True)
        if die:
            os.kill(os.getpid(), signal.SIGKILL)  # no exit handler, no flush: the counts are already shared


    def middle():
        # A worker that reads nothing itself but starts one that does: its read_stats() is what it started.
        assert not read_board.owns_board()
        p = multiprocessing.get_context("spawn").Process(target=child, args=(2, False))
        p.start()
        p.join()
        stats = read_stats()
        raise SystemExit(0 if (stats.requests, stats.processes) == (2, 1) else 1)


    if __name__ == "__main__":
        print("BOARD", read_board.reserve())  # a script that starts its own processes names the board first
        # Nothing counted yet here, and no board file: spawned children still find the name in the environment.
        assert not os.path.exists(read_board.board_path())
        for method, die in (("spawn", False), ("spawn", True), ("forkserver", False), ("fork", True)):
            p = multiprocessing.get_context(method).Process(target=child, args=(3, die))
            p.start()
            p.join()
            assert p.exitcode == (-signal.SIGKILL if die else 0), (method, p.exitcode)
        stats = read_stats()
        assert (stats.requests, stats.bytes, stats.cache_hits) == (12, 12000, 4), stats
        assert stats.by_backend["s3"].requests == 12 and stats.processes == 4, stats
        p = multiprocessing.get_context("spawn").Process(target=middle)
        p.start()
        p.join()
        assert p.exitcode == 0 and read_stats().requests == 14, (p.exitcode, read_stats())
        pid = os.fork()  # a bare fork that exits normally runs the inherited exit handlers: the board stays
        if pid == 0:
            count_request("gcs", 5)
            raise SystemExit(0)
        os.waitpid(pid, 0)
        assert os.path.exists(read_board.board_path())
        assert read_stats().by_backend["gcs"].bytes == 5
        print("OK")
    """
)


def test_every_start_method_and_a_killed_child_reach_the_parent_and_nothing_is_left(tmp_path):
    out = _run(_BOARD_SCRIPT, tmp_path)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
    _board_gone(out)


_FULL_BOARD_SCRIPT = textwrap.dedent(
    """
    import os

    from audiotree.io import read_board, read_stats
    from audiotree.io.byte_counters import count_request

    if __name__ == "__main__":
        print("BOARD", read_board.reserve())  # a script that starts its own processes names the board first
        count_request("http", 10)  # makes the board and claims row 2
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)  # a pid no process has any more
        cells, fields = read_board._state.cells, read_board.FIELDS
        requests = read_board.backend_cell("http", read_board.REQUESTS)
        for row in range(3, read_board.ROWS):  # every other row: a dead process that made one request
            cells[row * fields + read_board.PID] = pid
            cells[row * fields + requests] = 1
        before = read_stats()
        assert before.requests == read_board.ROWS - 2 and before.processes == read_board.ROWS - 2, before
        child = os.fork()
        if child == 0:  # no free row: a dead one is folded into the retired row and reused
            count_request("http", 5)
            os._exit(0 if read_board._state.row >= 0 else 1)
        _, status = os.waitpid(child, 0)
        assert status == 0, status
        after = read_stats()
        assert (after.requests, after.bytes) == (before.requests + 1, before.bytes + 5), (before, after)
        print("OK")
    """
)


def test_a_full_board_reuses_the_rows_of_dead_processes_and_keeps_their_counts(tmp_path):
    out = _run(_FULL_BOARD_SCRIPT, tmp_path)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
    _board_gone(out)


_PIPELINES_SCRIPT = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time

    import grain
    import torch.utils.data

    from audiotree.io import read_board, read_stats, reset_read_stats
    from audiotree.io.byte_counters import byte_counters, reset_byte_counters
    from counted_http import counts_of

    TMP = os.getcwd()
    N = 12
    SEEN = [0]


    def check(label, base, items):
        stats = read_stats()
        requests, sent, heads = counts_of(base)
        assert (stats.requests, stats.bytes) == (requests, sent), (label, stats, requests, sent)
        assert byte_counters()["requests"] == 0, (label, "the parent read", byte_counters())
        assert stats.requests >= items > 0, (label, stats)
        print(label, stats.summary(items=items), f"({heads} HEADs)")


    def fresh(base):
        reset_read_stats()
        reset_byte_counters()
        counts_of(base, reset=True)


    class KillOrPark(torch.utils.data.Dataset):
        # Each worker is given two indices at once (prefetch_factor 2). At its second item, after reading it, the
        # first worker there waits for the other to stop (between requests), then dies.

        def __init__(self, inner):
            self.inner = inner

        def __len__(self):
            return len(self.inner)

        def __getitem__(self, i):
            item = self.inner[i]
            SEEN[0] += 1
            if SEEN[0] == 2:
                try:
                    os.close(os.open(os.path.join(TMP, "killer"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    open(os.path.join(TMP, "parked"), "w").close()
                    wait_for("release")
                else:
                    wait_for("parked")
                    os.kill(os.getpid(), signal.SIGKILL)
            return item


    def wait_for(name):
        while not os.path.exists(os.path.join(TMP, name)):
            time.sleep(0.05)


    if __name__ == "__main__":
        import audiotree.torch as att
        from audiotree.sources import create_audio_dataset

        print("BOARD", read_board.reserve())  # a script that starts its own processes names the board first
        server = subprocess.Popen([sys.executable, "-m", "counted_http", FOLDER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            base = server.stdout.readline().strip()
            urls = [f"{base}/{name}" for name in sorted(os.listdir(FOLDER))]
            ds = create_audio_dataset(filepaths=urls, duration=0.25, sample_rate=8000, num_epochs=None)
            sync = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)

            fresh(base)  # two epochs of the 6 files: the workers read those 12 items and stop
            two_epochs = create_audio_dataset(filepaths=urls, duration=0.25, sample_rate=8000, num_epochs=2)
            got = list(two_epochs.to_iter_dataset(sync).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
            assert len(got) == N
            check("grain 2 workers", base, N)

            for method in ("fork", "spawn"):
                fresh(base)
                loader = att.create_dataloader(att.TorchMapDataset(ds, epoch_size=N), batch_size=3, num_workers=2,
                                               multiprocessing_context=method)
                assert sum(b.batch_size for b in loader) == N
                del loader
                check(f"torch 2 workers {method}", base, N)

            fresh(base)  # map-style torch workers read one item at a time, in the order of their indices
            loader = torch.utils.data.DataLoader(KillOrPark(att.TorchMapDataset(ds, epoch_size=N)), batch_size=1,
                                                 num_workers=2, prefetch_factor=2, collate_fn=att.collate,
                                                 multiprocessing_context="fork")
            try:
                for _ in loader:
                    pass
                raise AssertionError("the killed worker went unnoticed")
            except RuntimeError as exc:
                print("worker death:", str(exc)[:80])
            check("torch, a worker killed", base, 4)
            open(os.path.join(TMP, "release"), "w").close()
            del loader
        finally:
            server.stdin.close()
            server.wait(30)
        print("OK")
    """
)


@pytest.mark.slow
def test_grain_and_torch_workers_reads_equal_the_servers_count_also_of_a_killed_worker(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(6):
        (folder / f"f{i}.wav").write_bytes(_wav(i, seconds=2.0))
    out = _run(_PIPELINES_SCRIPT.replace("FOLDER", repr(str(folder))), tmp_path, timeout=400)
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout[-2000:] + out.stderr[-4000:]
    for label in ("grain 2 workers", "torch 2 workers fork", "torch 2 workers spawn", "torch, a worker killed"):
        assert label in out.stdout, out.stdout
    _board_gone(out)


# ------------------------------------------------------------------ audiotree bench
def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "audiotree.cli", "bench", *args, "--threads", "0", "--buffers", "1",
                           "--batches", "2", "--batch-size", "4", "--duration", "0.25", "--sample-rate", "8000"],
                          capture_output=True, text=True, timeout=300, env=_script_env())


@pytest.mark.slow
def test_bench_reports_the_reads_of_each_setting_workers_included():
    server = CountedHttp({f"/f{i}.wav": _wav(i) for i in range(4)})
    try:
        urls = [f"{server.base}/f{i}.wav" for i in range(4)]
        out = _bench(*urls, "--workers", "0,1", "--json")
        assert out.returncode == 0, out.stderr[-3000:]
        measured = json.loads(out.stdout)["measurements"]
        assert [m["num_workers"] for m in measured] == [0, 1]
        for m in measured:
            reads = m["reads"]
            assert reads["requests"] > 0 and reads["bytes"] > 0 and reads["wait_seconds"] > 0, m
            assert set(reads["by_backend"]) == {"http"} and m["items_delivered"] >= 8
        # The worker's reads are in (it reads every item of its setting); the rest of the server's requests are
        # the building and the warm-up batch, in the bench's own process.
        assert sum(m["reads"]["requests"] for m in measured) < server.counts()[0]
        assert sum(m["reads"]["bytes"] for m in measured) < server.counts()[1]

        table = _bench(*urls, "--workers", "0")
        assert table.returncode == 0, table.stderr[-3000:]
        assert "Reads from storage per setting, workers included" in table.stdout
        for column in ("requests", "req/item", "KB/item", "hits", "wait s"):
            assert column in table.stdout, table.stdout
    finally:
        server.stop()


def test_off_keeps_the_counts_per_process_and_makes_no_board(tmp_path):
    code = textwrap.dedent(
        """
        import os
        from audiotree.io import read_board, read_stats
        from audiotree.io.byte_counters import count_request, count_wait

        assert read_board.board_path() is None and os.environ["AUDIOTREE_READ_STATS"] == "off"
        count_request("s3", 100, wait_seconds=0.25)
        count_wait("s3", 0.5)
        pid = os.fork()
        if pid == 0:
            count_request("s3", 1)  # counted in the child only
            os._exit(0)
        os.waitpid(pid, 0)
        stats = read_stats()
        assert (stats.requests, stats.bytes, stats.wait_seconds) == (1, 100, 0.75), stats
        print("OK", os.getpid())
        """
    )
    env = dict(_script_env(), AUDIOTREE_READ_STATS="off")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
    pid = out.stdout.split()[-1]
    for folder in {"/dev/shm", tempfile.gettempdir()}:
        if os.path.isdir(folder):
            assert not [n for n in os.listdir(folder) if n.startswith(f"audiotree-reads-{pid}-")]

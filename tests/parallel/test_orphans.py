"""No worker outlives its parent: SIGKILL a training/indexing script, its workers are gone within 2 s.

Each test runs a plain script (``if __name__ == "__main__":``, no absl) that
starts workers through audiotree, waits until they run, kills the script with
SIGKILL (what the OOM killer and a scheduler's hard stop do), and checks with
psutil that every process the script started, the resource tracker included,
is gone within a bounded time, and that no shared-memory block it made is left.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL of a parent is a POSIX test")

#: The promise: workers exit within 2 s of their parent's death (plus scheduling slack on a loaded machine).
EXIT_WITHIN = 2.0
SLACK = 1.5

GRAIN = """
import time
import grain
from audiotree.sources import create_audio_dataset

def main():
    ds = create_audio_dataset({folder!r}, duration=0.2, sample_rate=8000, num_epochs=None)
    it = iter(ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    next(it)
    print("READY", flush=True)
    while True:
        next(it)
        time.sleep(0.01)

if __name__ == "__main__":
    main()
"""

TORCH = """
import time
from audiotree.sources import create_audio_dataset
from audiotree.torch import create_dataloader

def main():
    ds = create_audio_dataset({folder!r}, duration=0.2, sample_rate=8000, num_epochs=None)
    loader = create_dataloader(ds, batch_size=2, num_workers=2, multiprocessing_context={context!r})
    it = iter(loader)
    next(it)
    print("READY", flush=True)
    while True:
        next(it)
        time.sleep(0.01)

if __name__ == "__main__":
    main()
"""

POOL = """
import time
from audiotree.parallel import open_executor

def work(chunk):
    time.sleep(600)
    return chunk

def main():
    with open_executor("process", workers=2) as runner:
        print("READY", flush=True)
        for _ in runner.run(work, [[1], [2]]):
            pass

if __name__ == "__main__":
    main()
"""

def _mapped_blocks(pids) -> set[str]:
    """Names of the shared-memory blocks (Grain's ``/dev/shm/psm_*``, audiotree's batch slots
    ``/dev/shm/audiotree_*``) these processes have mapped.

    Other processes on a shared machine make blocks of their own, so the test
    follows only the blocks its script's processes hold.
    """
    names = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        names.update(m.group(1) for m in re.finditer(r"/dev/shm/((?:psm|audiotree)_\w+)", maps))
    return names


def _kill_and_watch(code: str, tmp_path: Path, *, workers: int, timeout: float = 120) -> None:
    script = tmp_path / "parent.py"
    script.write_text(code)
    # What the killed processes cannot remove (multiprocessing's pymp-* folders, ours) stays in this test's folder.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, TMPDIR=str(tmp)))
    children: list = []
    try:
        parent = psutil.Process(proc.pid)
        line = proc.stdout.readline()
        assert "READY" in line, proc.stderr.read()[-3000:] if proc.poll() is not None else line
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # wait until the workers run
            children = parent.children(recursive=True)
            if sum(1 for c in children if "resource_tracker" not in " ".join(c.cmdline())) >= workers:
                break
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            time.sleep(0.1)
        else:
            pytest.fail(f"the script did not start {workers} workers within {timeout} s: {children}")
        time.sleep(1.0)  # let them settle into their work (imports done, buffers filling)
        children = parent.children(recursive=True)
        blocks = _mapped_blocks([proc.pid, *(c.pid for c in children)])
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        killed_at = time.monotonic()
        alive = children
        while alive and time.monotonic() < killed_at + EXIT_WITHIN + SLACK:
            alive = [c for c in alive if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
            time.sleep(0.05)
        took = time.monotonic() - killed_at
        described = [(c.pid, " ".join(c.cmdline())[:120]) for c in alive if c.is_running()]
        assert not alive, f"{len(alive)} of {len(children)} children alive {took:.1f} s after SIGKILL: {described}"
        time.sleep(0.2)
        leaked = {name for name in blocks if Path("/dev/shm", name).exists()}
        assert not leaked, f"{len(leaked)} of the {len(blocks)} blocks the script's processes held are left: {leaked}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for child in children:  # nothing this test started may survive its failure
            try:
                child.kill()
            except psutil.Error:
                pass
        # A board owner killed by a signal leaves its read board (audiotree.io.read_board: the next board made
        # removes it); this test removes it at once.
        for board in Path("/dev/shm").glob(f"audiotree-reads-{proc.pid}-*"):
            board.unlink(missing_ok=True)
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.slow
def test_grain_workers_exit_with_a_killed_parent(corpus, tmp_path):
    _kill_and_watch(GRAIN.format(folder=str(corpus["music"])), tmp_path, workers=2)


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_torch_workers_exit_with_a_killed_parent(corpus, tmp_path, context):
    pytest.importorskip("torch")
    _kill_and_watch(TORCH.format(folder=str(corpus["music"]), context=context), tmp_path, workers=2)


@pytest.mark.slow
def test_process_pool_workers_exit_with_a_killed_parent(tmp_path):
    """The pool behind ``executor="process"`` (renders, scans, the window-LUFS cache)."""
    _kill_and_watch(POOL, tmp_path, workers=2)


PLAIN_READER = """
import time
import grain
from audiotree.sources import {cls}

def main():
    source = {cls}({path!r})
    ds = grain.MapDataset.source(source).repeat()
    it = iter(ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    next(it)
    print("READY", flush=True)
    while True:
        next(it)
        time.sleep(0.01)

if __name__ == "__main__":
    main()
"""


@pytest.fixture(scope="module")
def renders(corpus, tmp_path_factory) -> dict[str, Path]:
    """The music group rendered in each written format: a TreeWriter part, an AudioWriter part, ArrayRecord."""
    import audiotree
    from audiotree.sources import create_audio_dataset

    root = tmp_path_factory.mktemp("orphan-renders")
    ds = create_audio_dataset(str(corpus["music"]), duration=0.2, sample_rate=8000, num_epochs=None)
    out = {}
    for fmt in ("tree", "audio", "arrayrecord"):
        audiotree.render(ds, root / fmt, 6, format=fmt, part_size=100)
        out[fmt] = root / fmt / "part-00000" if fmt != "arrayrecord" else root / fmt
    return out


@pytest.mark.slow
@pytest.mark.parametrize("fmt,cls", [("tree", "TreeDataSource"), ("audio", "AudioDataSource"),
                                     ("arrayrecord", "ArrayRecordAudioSource")])
def test_a_reader_in_a_plain_grain_pipeline_exits_with_a_killed_parent(renders, tmp_path, fmt, cls):
    """The reader alone, the way Grain's docs use any data source: no audiotree builder starts the workers."""
    _kill_and_watch(PLAIN_READER.format(cls=cls, path=str(renders[fmt])), tmp_path, workers=2)

"""Temporary folders the library makes are gone when the process that made them ends.

A remote ArrayRecord dataset read with ``cache_limit=None`` stages its shards in a private folder per process
(the main one, each Grain ``mp_prefetch`` worker, each torch ``DataLoader`` worker). Each script below reads
such a dataset from a server on 127.0.0.1 in a process of its own with ``TMPDIR`` set to a folder of the test,
prints the folders that exist while the readers are still alive, and exits; the test then finds none left.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from audiotree import AudioTree
from counted_http import CountedHttp

ROOT = Path(__file__).resolve().parents[2]

#: The start of each script: reads the dataset at argv[1]; ``report(reader)`` prints the staging folders.
PRELUDE = '''
import json, os, sys
from audiotree.sources import ArrayRecordAudioSource, open_arrayrecord

URL = sys.argv[1]


def offset(item):
    return float(item.offset[0])


def staging():
    return sorted(n for n in os.listdir(os.environ["TMPDIR"]) if n.startswith("audiotree-shards-"))


def report(values):
    print(json.dumps({"values": sorted(values), "during": staging(), "main": os.getpid()}))
'''

SCRIPTS = {
    "main": '''
source = ArrayRecordAudioSource(URL)
report([offset(source[i]) for i in range(len(source))])
''',
    "grain": '''
import grain

if __name__ == "__main__":
    ds = open_arrayrecord(URL)
    it = iter(ds.map(offset).to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    values = [next(it) for _ in range(len(ds))]
    report(values)
    del it
''',
    "torch-fork": '''
import torch

if __name__ == "__main__":
    source = ArrayRecordAudioSource(URL)
    offset(source[4])  # the main process stages a shard before the workers start (and fork its reader)
    loader = torch.utils.data.DataLoader(source, batch_size=None, num_workers=2, collate_fn=offset,
                                         multiprocessing_context="fork")
    it = iter(loader)
    values = [next(it) for _ in range(len(source))]
    report(values)
    del it
''',
}
SCRIPTS["torch-spawn"] = SCRIPTS["torch-fork"].replace('"fork"', '"spawn"')
# Our loader keeps its workers (persistent_workers): the script ends with them alive, and tensors went back
# through pymp-* folders.
SCRIPTS["audio-loader-fork"] = '''
from audiotree.torch import AudioDataLoader

if __name__ == "__main__":
    loader = AudioDataLoader(open_arrayrecord(URL), batch_size=2, num_workers=2, multiprocessing_context="fork")
    report([float(x) for batch in loader for x in batch.offset])
'''
SCRIPTS["audio-loader-spawn"] = SCRIPTS["audio-loader-fork"].replace('"fork"', '"spawn"')

#: How many worker processes stage shards in each script.
WORKERS = {"main": 0, "grain": 2, "torch-fork": 2, "torch-spawn": 2, "audio-loader-fork": 2, "audio-loader-spawn": 2}
#: Whether the main process stages a shard too.
MAIN_STAGES = {"main", "torch-fork", "torch-spawn"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A 5-item ArrayRecord dataset of 3 shards, served at ``base/ar``."""
    from audiotree.writers import ArrayRecordWriter

    folder = tmp_path_factory.mktemp("served") / "ar"
    with ArrayRecordWriter(folder, records_per_shard=2) as writer:
        writer.write(AudioTree.create(np.zeros((5, 1, 4), np.float32), 8_000, offset=np.arange(5.0)))
    server = CountedHttp({f"/ar/{p.name}": p.read_bytes() for p in folder.iterdir()})
    yield f"{server.base}/ar"
    server.stop()


def _run(script: str, tmp_path: Path, *args: str, returncode: int = 0) -> subprocess.CompletedProcess:
    """Runs ``script`` in a process of its own with ``TMPDIR`` at ``tmp_path/tmp``."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    path = tmp_path / "script.py"
    path.write_text(script)
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get(
        "PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, str(path), *args], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == returncode, result.stderr[-3000:]
    return result


@pytest.mark.slow
@pytest.mark.parametrize("how", list(SCRIPTS))
def test_shard_staging_folders_are_gone_when_the_readers_exit(served, tmp_path, how):
    if how.startswith(("torch", "audio-loader")):
        pytest.importorskip("torch")
    result = _run(textwrap.dedent(PRELUDE) + textwrap.dedent(SCRIPTS[how]), tmp_path, served)
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["during"], "nothing was staged"
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == []  # nor the workers' pymp-* folders
    assert seen["values"] == [0.0, 1.0, 2.0, 3.0, 4.0]
    # While reading, each staging process had its own folder, named with its pid (Grain's main process may read
    # one item too).
    pids = [int(name.split("-")[3]) for name in seen["during"]]
    assert len(set(pids)) == len(pids), seen
    assert len(set(pids) - {seen["main"]}) == WORKERS[how], seen
    if how in MAIN_STAGES:
        assert seen["main"] in pids, seen


def test_a_folder_is_removed_with_its_owner(tmp_path, monkeypatch):
    from audiotree.fs import private_temp_folder

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))

    class Owner:
        pass

    owner = Owner()
    folder = private_temp_folder("audiotree-owned-", owner=owner)
    (folder / "shard").write_bytes(b"x" * 100)
    assert folder.parent == tmp_path
    del owner
    gc.collect()
    assert not folder.exists()


def test_a_forked_child_ending_normally_leaves_its_parents_folder(tmp_path):
    script = textwrap.dedent('''
        import os
        from audiotree.fs import private_temp_folder
        folder = private_temp_folder("audiotree-forked-")
        (folder / "shard").write_bytes(b"x")
        pid = os.fork()
        if pid:  # the child inherits the finaliser and runs it at its normal exit (atexit)
            os.waitpid(pid, 0)
            print((folder / "shard").is_file())
    ''')
    assert _run(script, tmp_path).stdout.split() == ["True"]
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_killed_process_folder_is_removed_by_the_next_one(tmp_path):
    """A SIGKILLed process cannot remove its folder; the next process making one of the same prefix does."""
    script = textwrap.dedent('''
        import os, signal, sys
        from audiotree.fs import private_temp_folder
        folder = private_temp_folder("audiotree-swept-")
        (folder / "shard").write_bytes(b"x")
        print(folder.name, flush=True)
        if sys.argv[1] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
    ''')
    killed = _run(script, tmp_path, "kill", returncode=-signal.SIGKILL)
    tmp = tmp_path / "tmp"
    left = tmp / killed.stdout.strip()
    other = tmp / "audiotree-swept-not-ours"  # a name of another shape is never touched
    other.mkdir()
    host = left.name.split("-")[2]
    live = tmp / f"audiotree-swept-{host}-{os.getpid()}-live"  # a live process's folder (this one's) stays
    live.mkdir()
    assert (left / "shard").is_file()
    after = _run(script, tmp_path, "exit")
    assert after.stdout.strip().startswith("audiotree-swept-")
    assert not left.exists() and other.is_dir() and live.is_dir()
    assert sorted(p.name for p in tmp.iterdir()) == sorted([other.name, live.name])


# ------------------------------------------------------------------ writers' staging folders (audiotree-out-*)
WRITER_SCRIPT = '''
import os, sys
import numpy as np
from audiotree import AudioTree
from audiotree.writers import ArrayRecordWriter, AudioWriter


def staging():
    return sorted(n for n in os.listdir(os.environ["TMPDIR"]) if n.startswith("audiotree-out-"))


if sys.argv[1] == "unclosed":  # written, never closed: the process ends with the writer open
    writer = ArrayRecordWriter("memory://bucket/ar", records_per_shard=2)
    writer.write(AudioTree.create(np.zeros((3, 1, 4), np.float32), 8_000))
    print(len(staging()))
else:  # a refused argument, found after the staging folder was made
    try:
        AudioWriter("memory://bucket/audio", manifest_every=-1)
    except ValueError:
        pass
    import gc
    gc.collect()
    print(len(staging()))
'''


@pytest.mark.parametrize("how, during", [("unclosed", 1), ("refused", 0)])
def test_a_writer_to_a_url_leaves_no_staging_folder(tmp_path, how, during):
    result = _run(WRITER_SCRIPT, tmp_path, how)
    assert result.stdout.split() == [str(during)]  # refused: gone with the half-made writer, before the exit
    assert list((tmp_path / "tmp").iterdir()) == []


class _RefusingPuts(BaseHTTPRequestHandler):
    """Nothing to read (404) and every upload refused (403)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _answer(self, status: int) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._answer(404)

    do_HEAD = do_GET

    def do_PUT(self) -> None:
        self._answer(403)

    do_POST = do_PUT


def test_a_failed_upload_removes_the_staging_folder(tmp_path, monkeypatch):
    from audiotree.writers import ArrayRecordWriter

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RefusingPuts)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        writer = ArrayRecordWriter(f"http://127.0.0.1:{server.server_address[1]}/ar", records_per_shard=2)
        writer.write(AudioTree.create(np.zeros((3, 1, 4), np.float32), 8_000))
        assert [p.name[:14] for p in tmp_path.iterdir()] == ["audiotree-out-"]
        with pytest.raises(Exception, match="127.0.0.1"):
            writer.close()
        assert list(tmp_path.iterdir()) == []  # now, while the writer is still referenced
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)

"""Writers killed with SIGKILL mid-write leave a readable, consistent prefix (or a clear refusal).

Each trial starts a real writer process that writes deterministic content per
sample index as fast as it can, kills it with ``kill -9`` after a random delay,
then opens the folder with the reader and checks every readable sample against
what the writer wrote for that index.
"""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from audiotree.sources import AudioDataSource, TreeDataSource

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")

CONTENT = '''
import numpy as np
from audiotree import AudioTree

RATE = 16000


def batch_size(j):
    return 1 + (j * 7) % 4


def sample(k):
    rng = np.random.default_rng(k)
    return rng.uniform(-0.9, 0.9, (1, 2, 48)).astype(np.float32), f"#{k}:" + "\\u00fc" * (k % 11)


def audio_tree(start, n):
    waves, texts = zip(*(sample(k) for k in range(start, start + n)))
    ks = np.arange(start, start + n)
    return AudioTree.create(
        np.concatenate(waves), RATE, pitch=ks.astype(np.int32),
        extras={"text": list(texts), "vec": np.repeat(ks[:, None], 5, axis=1)},
        filepath=[f"/src/{k}.wav" for k in ks], offset=ks * 0.5,
    )


def tree_batch(start, n):
    return {"audio": audio_tree(start, n), "index": np.arange(start, start + n, dtype=np.int64)}
'''

TREE_WRITER = '''
import sys
from crash_content import batch_size, tree_batch
from audiotree.writers import TreeWriter

writer = TreeWriter(sys.argv[1], 8, manifest_interval=0.003).open()
k = j = 0
while k < 100000:
    n = batch_size(j)
    writer.write(tree_batch(k, n))
    k += n
    j += 1
    if j == 1:
        print("started", flush=True)
    if j % 13 == 0:
        writer.flush()
writer.close()
print("done", flush=True)
'''

AUDIO_WRITER = '''
import sys
from crash_content import audio_tree, batch_size
from audiotree.writers import AudioWriter

writer = AudioWriter(sys.argv[1], manifest_every=2)
k = j = 0
while k < 100000:
    n = batch_size(j)
    writer.write(audio_tree(k, n), tags={"batch": j})
    k += n
    j += 1
    if j == 1:
        print("started", flush=True)
writer.close()
print("done", flush=True)
'''


@pytest.fixture()
def content(tmp_path):
    (tmp_path / "crash_content.py").write_text(CONTENT)
    (tmp_path / "tree_writer.py").write_text(TREE_WRITER)
    (tmp_path / "audio_writer.py").write_text(AUDIO_WRITER)
    spec = importlib.util.spec_from_file_location("crash_content", tmp_path / "crash_content.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kill_after(script: Path, out: Path, delay: float | None) -> None:
    """Runs ``script out``; kills it with SIGKILL ``delay`` s after it reports its first write.

    ``delay=None`` kills it right away, before it has written anything.
    """
    proc = subprocess.Popen(
        [sys.executable, str(script), str(out)], cwd=script.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if delay is not None:
            line = proc.stdout.readline()
            assert line.strip() == "started", proc.stderr.read()
            time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:  # pragma: no cover
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, "the writer finished before it could be killed"


def _delays(seed: int) -> list[float | None]:
    rng = random.Random(seed)
    return [None, 0.0] + [rng.uniform(0.02, 0.6) for _ in range(3)]


@pytest.mark.slow
def test_sigkilled_tree_writer_leaves_consistent_prefix(tmp_path, content):
    lengths = []
    for trial, delay in enumerate(_delays(20240607)):
        out = tmp_path / f"tree{trial}"
        _kill_after(tmp_path / "tree_writer.py", out, delay)
        if delay is None and not (out / "manifest.json").exists():
            with pytest.raises(FileNotFoundError, match="Manifest not found"):
                TreeDataSource(out)
            lengths.append(None)
            continue
        src = TreeDataSource(out)  # the schema was committed by the first write
        lengths.append(len(src))
        for k in range(len(src)):
            item = src[k]
            wave, text = content.sample(k)
            assert int(item["index"][0]) == k
            np.testing.assert_array_equal(item["audio"].waveform, wave)
            assert item["audio"].extras["text"] == text
            assert item["audio"].extras["vec"].tolist() == [[k] * 5]
            assert item["audio"].pitch.tolist() == [k]
            assert item["audio"].filepath == [f"/src/{k}.wav"]
            assert item["audio"].offset.tolist() == [k * 0.5]
        # A crashed dataset can be replaced in place.
        from audiotree.writers import TreeWriter

        with TreeWriter(out, 1, exist_ok=True) as writer:
            writer.write(content.tree_batch(0, 2))
        assert len(TreeDataSource(out)) == 2
    assert any(n for n in lengths if n), f"no trial committed any sample: {lengths}"


@pytest.mark.slow
def test_sigkilled_audio_writer_leaves_consistent_prefix(tmp_path, content):
    lengths = []
    for trial, delay in enumerate(_delays(99)):
        out = tmp_path / f"audio{trial}"
        _kill_after(tmp_path / "audio_writer.py", out, delay)
        if not (out / "manifest.npz").exists():
            with pytest.raises(FileNotFoundError, match="Manifest not found"):
                AudioDataSource(out)
            lengths.append(None)
            continue
        src = AudioDataSource(out)
        lengths.append(len(src))
        for k in range(len(src)):
            item = src[k]
            wave, text = content.sample(k)
            assert src.get_entry(k)["index"] == k
            np.testing.assert_array_equal(item.waveform, wave)
            assert item.extras["text"] == text and item.pitch.tolist() == [k]
            assert item.filepath == [f"/src/{k}.wav"]
        # No temporary files are mistaken for data: every listed file is complete.
        assert all(not p.name.endswith(".partial") or p.name.startswith(".") for p in out.iterdir())
    assert any(n for n in lengths if n), f"no trial saved a manifest: {lengths}"

"""Writers on a real full disk: a small tmpfs mounted for the test (needs root and mount).

Both writers must raise ``OSError`` with ``errno.ENOSPC`` naming the file, and what
they committed before must stay readable.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytest

from audiotree import AudioTree, AudioWriter, TreeWriter
from audiotree.sources import AudioDataSource, TreeDataSource

RATE = 8000


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs mounted on a fresh folder, unmounted (and removed) at teardown."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; the full-disk tests cannot run here")
    if shutil.which("mount") is None or shutil.which("umount") is None:
        pytest.skip("no mount/umount command; the full-disk tests cannot run here")
    mountpoint = tmp_path / f"disk-{uuid.uuid4().hex[:8]}"
    mountpoint.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(mountpoint)],
                            capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not allowed here ({result.stderr.strip() or result.returncode})")
    try:
        yield mountpoint
    finally:
        done = subprocess.run(["umount", str(mountpoint)], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:  # something still holds a file open: detach it anyway
            subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, timeout=30)


def _fill(disk: Path) -> Path:
    """Writes a filler file until the disk has no free block left."""
    filler = disk / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (1 << 16, 4096, 1):
            block = b"\xff" * chunk
            while True:
                try:
                    os.write(fd, block)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)
    return filler


def _tree(batch: int, start: int, samples: int = 4000) -> AudioTree:
    rng = np.random.default_rng(start)
    wave = rng.uniform(-0.5, 0.5, (batch, 1, samples)).astype(np.float32)
    return AudioTree.create(wave, RATE, pitch=np.arange(start, start + batch, dtype=np.int32))


def _check_enospc(exc: OSError, folder: Path) -> None:
    assert type(exc) is OSError, type(exc)  # not soundfile's LibsndfileError ("System error")
    assert exc.errno == errno.ENOSPC, exc
    assert exc.filename is not None and Path(exc.filename).parent == folder, exc
    assert str(folder) in str(exc) and "No space left" in str(exc) and "free space" in str(exc)


@pytest.mark.parametrize("pattern", ["audio_{index:04d}.wav", "audio_{index:04d}.flac"])
def test_audio_writer_full_disk_raises_enospc_and_keeps_what_was_saved(small_disk, pattern):
    folder = small_disk / "audio"
    writer = AudioWriter(folder, pattern=pattern, manifest_every=0)
    saved = [_tree(3, 0), _tree(2, 3)]
    for tree in saved:
        writer.write(tree)
    writer.save_manifest()
    _fill(small_disk)
    with pytest.raises(OSError) as info:
        writer.write(_tree(4, 5))
    _check_enospc(info.value, folder)
    assert info.value.filename.endswith(pattern.format(index=5)), info.value.filename
    # The failed call removed its own files and left no temporary file behind.
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(["manifest.npz", *(pattern.format(index=i) for i in range(5))]), names
    writer.close()  # nothing unsaved: close writes nothing

    source = AudioDataSource(folder)
    assert len(source) == 5
    items = [tree[i] for tree in saved for i in range(tree.batch_size)]
    for k, want in enumerate(items):
        got = source[k]
        if pattern.endswith(".wav"):
            np.testing.assert_array_equal(got.waveform, want.waveform)
        else:  # FLAC stores 24-bit integers
            np.testing.assert_allclose(got.waveform, want.waveform, atol=2 ** -22)
        np.testing.assert_array_equal(got.pitch, want.pitch)


def test_audio_writer_manifest_on_full_disk_keeps_the_previous_one(small_disk):
    folder = small_disk / "audio"
    writer = AudioWriter(folder, manifest_every=0)
    writer.write(_tree(2, 0))
    writer.save_manifest()
    writer.write(_tree(2, 2))  # written, not yet listed by a manifest
    filler = _fill(small_disk)
    with pytest.raises(OSError) as info:
        writer.save_manifest()
    _check_enospc(info.value, folder)
    assert Path(info.value.filename).name.startswith((".manifest.npz", "manifest.npz"))
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # no temporary manifest left
    assert len(AudioDataSource(folder)) == 2  # the previous manifest still reads

    filler.unlink()  # with space again, closing lists everything
    writer.close()
    assert len(AudioDataSource(folder)) == 4


def test_tree_writer_full_disk_raises_enospc_and_keeps_what_was_committed(small_disk):
    folder = small_disk / "tree"
    first = _tree(3, 0)
    with pytest.raises(OSError) as info:
        with TreeWriter(folder, expected_samples=64, manifest_interval=0) as writer:
            writer.write(first)
            writer.flush()
            _fill(small_disk)
            writer.write(_tree(8, 3))
    # The write's error propagates; close() (run by the with block) could not write
    # its final manifest on the full disk either, and says so in a note.
    _check_enospc(info.value, folder)
    assert Path(info.value.filename).name == "waveform.bin", info.value.filename
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1 and "close() failed too" in notes[0] and "manifest.json" in notes[0], notes
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # no temporary manifest left

    source = TreeDataSource(folder)
    assert len(source) == 3
    for i in range(3):
        np.testing.assert_array_equal(source[i].waveform, first[i].waveform)
        np.testing.assert_array_equal(source[i].pitch, first[i].pitch)


def test_tree_writer_flush_on_full_disk_names_the_manifest(small_disk):
    folder = small_disk / "tree"
    writer = TreeWriter(folder, expected_samples=8, manifest_interval=0).open()
    writer.write(_tree(2, 0))
    writer.flush()
    writer.write(_tree(2, 2))
    filler = _fill(small_disk)
    with pytest.raises(OSError) as info:
        writer.flush()
    _check_enospc(info.value, folder)
    assert len(TreeDataSource(folder)) == 2
    filler.unlink()
    writer.close()
    assert len(TreeDataSource(folder)) == 4

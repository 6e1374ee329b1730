"""Loader workers keep the memory they free (issue 27): ``audiotree.parallel.worker_memory``.

Checked by its effect: after :func:`keep_freed_memory`, a 24 MB block that is
allocated, written and freed again and again is served from memory the process
already has (no new page faults), where glibc's defaults fault in fresh pages
again after the first block. Each check runs in a fresh interpreter, since the setting is per process.
The pipeline tests check that audiotree's workers (Grain ``mp_prefetch`` and
``audiotree.torch``) set it, and that the trainer's process is left alone.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from helpers import run_script

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")

_FAULTS = textwrap.dedent(
    """
    import ctypes
    import resource
    import sys

    from audiotree.parallel.worker_memory import keep_freed_memory

    if sys.argv[-1] == "keep":
        assert keep_freed_memory() is True
        assert keep_freed_memory() is True  # idempotent
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size = 24 << 20
    def round_trip():
        p = libc.malloc(size)
        ctypes.memset(p, 1, size)  # touch every page
        libc.free(p)
    round_trip()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        round_trip()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 5)
    """
)


def _faults_per_round(tmp_path, mode: str, env: dict | None = None) -> int:
    script = _FAULTS.replace('sys.argv[-1] == "keep"', repr(mode) + ' == "keep"')
    out = run_script(script, tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1])


def test_freed_blocks_are_reused_instead_of_fresh_pages(tmp_path):
    pages = (24 << 20) // 4096
    # glibc's defaults: the first block is a fresh mmap, freed to the kernel; the next one faults in fresh
    # heap pages (about a fifth of a block per round over 5 rounds).
    assert _faults_per_round(tmp_path, "default") > pages // 10
    # Kept: every round after the first writes the pages it already has.
    assert _faults_per_round(tmp_path, "keep") < pages // 50


def test_opt_out_leaves_the_allocator_alone(tmp_path):
    code = "from audiotree.parallel.worker_memory import keep_freed_memory\nprint(keep_freed_memory())\n"
    out = run_script(code, tmp_path, env={"AUDIOTREE_WORKER_MALLOC": "0"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


_PIPELINES = textwrap.dedent(
    """
    import os
    import sys

    import grain
    import numpy as np
    import soundfile

    from audiotree.sources import create_audio_dataset


    def kept():
        module = sys.modules.get("audiotree.parallel.worker_memory")
        return bool(module is not None and module._done)


    class Probe:
        def __call__(self, item):
            return (os.getpid(), kept())


    if __name__ == "__main__":
        os.makedirs("files", exist_ok=True)
        for k in range(2):
            soundfile.write(f"files/f{k}.wav", np.zeros(16000 * 2, np.float32), 16000)
        ds = create_audio_dataset("files", num_epochs=None, sample_rate=16000, duration=0.5)
        it = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)).map(Probe())
        it = iter(it.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
        rows = [next(it) for _ in range(6)]
        it.close()
        assert len({pid for pid, _ in rows} - {os.getpid()}) == 2, rows
        assert all(flag for _, flag in rows) == (os.environ.get("AUDIOTREE_WORKER_MALLOC") != "0"), rows
        assert not kept(), "the trainer's allocator was changed"

        import torch.utils.data

        from audiotree.torch import create_dataloader

        class TorchProbe(torch.utils.data.Dataset):
            def __len__(self):
                return 4

            def __getitem__(self, i):
                return torch.tensor([os.getpid(), int(kept())])

        loader = create_dataloader(TorchProbe(), batch_size=1, num_workers=2, collate_fn=None)
        rows = [tuple(int(v) for v in batch.reshape(-1)) for batch in loader]
        assert len({pid for pid, _ in rows} - {os.getpid()}) == 2, rows
        assert all(flag for _, flag in rows) == (os.environ.get("AUDIOTREE_WORKER_MALLOC") != "0"), rows
        assert not kept()
        print("ok")
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("opt_out", [False, True])
def test_audiotree_workers_keep_freed_memory(tmp_path, opt_out):
    pytest.importorskip("torch")
    out = run_script(_PIPELINES, tmp_path, timeout=600, env={"AUDIOTREE_WORKER_MALLOC": "0"} if opt_out else None)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok")

"""Quiet and clean exits over S3 (issue 39): no rc 134 at exit, no asyncio tracebacks from forked or spawned workers.

Against moto's S3 server on 127.0.0.1 (started and stopped here), each case in
fresh interpreters, since what is checked happens at interpreter exit and at fork.
"""

from __future__ import annotations

import io
import os
import sys
import textwrap

import numpy as np
import pytest
import soundfile
from servers import aws_env, start_moto

from helpers import run_script


@pytest.fixture(scope="module")
def bucket():
    """moto S3 on 127.0.0.1 with a Parquet table and 8 short FLAC/WAV files; yields the environment to reach it."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import s3fs

    server, port = start_moto()
    env = aws_env(f"http://127.0.0.1:{port}")
    try:
        fs = s3fs.S3FileSystem(endpoint_url=env["AWS_ENDPOINT_URL"], key=env["AWS_ACCESS_KEY_ID"],
                               secret=env["AWS_SECRET_ACCESS_KEY"], skip_instance_cache=True)
        fs.mkdir("exits")
        out = io.BytesIO()
        pq.write_table(pa.table({"x": np.arange(5000)}), out)
        fs.pipe("exits/table.parquet", out.getvalue())
        for i in range(8):
            x = (np.random.default_rng(i).standard_normal(16000) * 0.1).astype(np.float32)
            buf = io.BytesIO()
            fmt = "FLAC" if i % 2 else "WAV"
            soundfile.write(buf, x, 16000, format=fmt, subtype="PCM_16")
            fs.pipe(f"exits/audio/f{i}.{fmt.lower()}", buf.getvalue())
        yield env
    finally:
        server.stop()


# Open an object with audiotree's storage layer, read it with pyarrow as audiotree's index and Parquet readers do
# (``ParquetFile``, which reads on the calling thread), decode an excerpt from S3, exit: the case that died with rc 134.
_PYARROW_READ = """
import pyarrow.parquet as pq
from audiotree.io import storage
from audiotree.sources import create_audio_dataset
fs = storage.filesystem("s3://exits/table.parquet")
with fs.open("exits/table.parquet") as f:
    table = pq.ParquetFile(f).read()
ds = create_audio_dataset(["s3://exits/audio"], duration=0.5, sample_rate=8000, num_epochs=1)
assert ds[0].waveform.shape[-1] == 4000
print(table.num_rows)
"""


@pytest.mark.slow
def test_s3_and_pyarrow_exit_cleanly_20_times(bucket, tmp_path):
    """Before the fix, 1 to 4 of every 12 runs were killed by SIGABRT at exit ("terminate called without an active
    exception", rc 134): fsspec's IO thread was still inside its loop while the interpreter finalized.

    ``pq.read_table`` on a Python file object still dies that way about once in 30 runs with the loop stopped
    (pyarrow's pre-buffered reads call into Python from its own IO threads; ``ParquetFile``, which audiotree uses,
    and ``use_threads=False`` did not, 0 of 80 each): docs/storage.md tells users, and this test runs what
    audiotree itself does."""
    from concurrent.futures import ThreadPoolExecutor

    folders = [tmp_path / f"run{run}" for run in range(20)]
    for folder in folders:
        folder.mkdir()
    with ThreadPoolExecutor(2) as pool:  # two interpreters at a time: one per core
        runs = list(pool.map(lambda folder: run_script(_PYARROW_READ, folder, env=bucket, timeout=120), folders))
    for run, done in enumerate(runs):
        assert (done.returncode, done.stderr, done.stdout.strip()) == (0, "", "5000"), f"run {run + 1} of 20"


def test_exit_stops_the_io_thread(bucket, tmp_path):
    """At exit the fsspec IO thread is stopped and joined before the interpreter finalizes."""
    code = _PYARROW_READ + textwrap.dedent("""
        import atexit, threading
        from audiotree.io import loop_shutdown
        def report():  # registered after our handler, so it runs before it: stop now and report what is left
            print("stopped", loop_shutdown.stop_io_loop(), [t.name for t in threading.enumerate() if t.name == "fsspecIO"])
        atexit.register(report)
    """)
    done = run_script(code, tmp_path, env=bucket, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[1] == "stopped True []"


def test_forked_child_does_not_use_the_parents_loop(bucket, tmp_path):
    """A filesystem a forked child inherits must not see its parent's loop as running (the child has no thread for
    it): otherwise its session is closed by a task bound to that loop, which fails in the child's own loop."""
    code = textwrap.dedent("""
        import os
        from audiotree.io import storage
        fs = storage.filesystem("s3://exits/table.parquet")
        fs.cat("exits/table.parquet")
        parent_loop = fs._loop
        assert parent_loop.is_running()
        pid = os.fork()
        if pid == 0:
            os._exit(1 if parent_loop.is_running() else 0)
        _, status = os.waitpid(pid, 0)
        print("child saw a running loop" if os.waitstatus_to_exitcode(status) else "child saw a stopped loop")
        print("parent", parent_loop.is_running())
    """)
    done = run_script(code, tmp_path, env=bucket, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["child saw a stopped loop", "parent True"]


_TORCH_RUN = """
import sys
from audiotree.sources import create_audio_dataset
import audiotree.torch as att

if __name__ == "__main__":
    ds = create_audio_dataset(["s3://exits/audio"], duration=0.5, sample_rate=8000, num_epochs=1)
    ds[0]  # the parent has a session on its own loop before the workers start
    loader = att.create_dataloader(ds, batch_size=2, num_workers=2, multiprocessing_context=sys.argv[1])
    for epoch in range(2):
        loader.set_epoch(epoch) if hasattr(loader, "set_epoch") else None
        print(sum(len(batch.filepath) for batch in loader))
"""


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_torch_workers_over_s3_print_no_asyncio_traceback(bucket, tmp_path, context):
    pytest.importorskip("torch")
    script = tmp_path / "run.py"
    script.write_text(_TORCH_RUN)
    import subprocess

    done = subprocess.run([sys.executable, str(script), context], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **bucket), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["8", "8"]
    assert "Traceback" not in done.stderr and "Task exception" not in done.stderr and "loop" not in done.stderr, \
        done.stderr

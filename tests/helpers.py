"""Helpers shared by test modules (import as ``from helpers import ...``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def run_script(code: str, tmp_path: Path, *, timeout: float = 300, env: dict | None = None):
    """Runs ``code`` as ``python script.py`` in a fresh interpreter; returns the CompletedProcess."""
    import subprocess

    script = tmp_path / "script.py"
    script.write_text(code)
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=full_env
    )


def run_benchmark(script: str, *args: str, timeout: float = 600):
    """Runs ``benchmarks/<script> args...`` with this checkout's ``src`` first on the path; returns the
    CompletedProcess (output captured as text)."""
    import subprocess

    repo = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(repo / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, str(repo / "benchmarks" / script), *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def run_code(code: str, *, timeout: float = 120) -> str:
    """Runs ``python -c code`` in a fresh interpreter; asserts it succeeds and returns its stdout."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return out.stdout
def assert_same_render(a: Path, b: Path) -> None:
    """Two render folders hold the same files with the same bytes.

    The only difference allowed is the ``created_at`` timestamp a TreeWriter
    writes into each part's ``manifest.json``; every other byte must match.
    """
    import json

    def files(root: Path) -> list[str]:
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())

    names = files(a)
    assert names == files(b), (names, files(b))
    assert names, f"{a} is empty"
    for name in names:
        x, y = (a / name).read_bytes(), (b / name).read_bytes()
        if name.endswith("manifest.json"):
            x, y = json.loads(x), json.loads(y)
            assert x.pop("created_at", None) and y.pop("created_at", None)
        assert x == y, f"{name} differs between {a} and {b}"


def run_cli_subprocess(args, *, timeout: float = 300, env: dict | None = None):
    """``python -m audiotree.cli ARGS`` in a fresh interpreter; returns the CompletedProcess."""
    import subprocess

    return subprocess.run([sys.executable, "-m", "audiotree.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def index_as_format_1_0(src: Path, dst: Path, *, profiles: list | None = None) -> Path:
    """Writes the index ``src`` to ``dst`` as audiotree's format 1.0 did: ``profile`` as ``list<float32>``
    K-weighted mean squares (each readable row's ``file_profile``, measured again from its file, or ``profiles``
    when given) and a 1.0 header. For plain (not segment) indexes."""
    import json

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from audiotree.index import open_index
    from audiotree.index.profile import profile_of_path

    ix = open_index(src, columns="all")
    assert not ix.has_segments, "index_as_format_1_0 writes plain indexes only"
    table = pq.read_table(src)
    meta = json.loads(table.schema.metadata[b"audiotree"])
    if profiles is None:
        stored = table.column("profile").to_pylist()
        profiles = [None if p is None else profile_of_path(path, mono=ix.mono).tolist()
                    for p, path in zip(stored, ix.paths())]
    column = pa.array([None if p is None else np.asarray(p, dtype=np.float32) for p in profiles],
                      type=pa.list_(pa.float32()))
    table = table.set_column(table.column_names.index("profile"), pa.field("profile", column.type), column)
    if "seek_points" in table.column_names:  # (from format 1.2)
        table = table.drop_columns(["seek_points"])
    from audiotree.index.quality import QUALITY_COLUMNS

    table = table.drop_columns([c for c in QUALITY_COLUMNS if c in table.column_names])  # (from format 1.3)
    meta.update(format_version=[1, 0], min_reader_version=[1, 0])
    metadata = dict(table.schema.metadata)
    metadata[b"audiotree"] = json.dumps(meta, sort_keys=True).encode()
    pq.write_table(table.replace_schema_metadata(metadata), dst, compression="zstd")
    return dst


def write_utterances(root: Path, *, count: int, seed: int, seconds: tuple[float, float], rate: int = 8000) -> list[str]:
    """``count`` short tones of ``seconds`` (low, high) each, alternately WAV and FLAC, named ``uNN``; their paths."""
    import numpy as np
    import soundfile

    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        n = int(rng.uniform(*seconds) * rate)
        path = Path(root) / f"u{i:02d}.{('wav', 'flac')[i % 2]}"
        soundfile.write(path, (0.1 * np.sin(np.arange(n) * rng.uniform(0.05, 0.2))).astype(np.float32), rate)
        paths.append(str(path))
    return paths


def run_together(commands: list[list[str]], *, timeout: float = 300) -> list[str]:
    """Starts every command at once (e.g. the hosts of one ``jax.distributed`` job), waits for all, and returns
    their standard outputs; a process still running after ``timeout`` (a host waiting for a peer that died) is
    killed, never left behind, and a non-zero exit fails with that process's standard error."""
    import subprocess

    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cmd in commands]
    try:
        results = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, results):
        assert p.returncode == 0, err[-3000:]
    return [out for out, _ in results]


def member_after_junk(shard: Path, name: str, body: bytes) -> str:
    """Writes a USTAR shard holding a text file, then ``body`` as member ``name``; returns the member's URL with
    its recorded byte range (``tar://NAME?offset=O&size=N::SHARD``): a member that does not start the shard."""
    import io
    import tarfile

    from audiotree.io.members import tar_url

    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        for member, data in (("junk.txt", b"x" * 3000), (name, body)):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with tarfile.open(shard) as tar:
        found = tar.getmember(name)
    return tar_url(str(shard), name, found.offset_data, found.size)


def read_ahead_counts(ds, *, warm: int, upto: int) -> dict:
    """Reads ``ds[0:warm]`` (the order's shape is known after the first few), then ``ds[warm:upto]`` with the
    byte counters reset: the read-ahead's ``{"hits", "misses"}`` over the latter. Closes the stores after."""
    from audiotree.io import byte_counters, read_ahead

    for i in range(warm):
        ds[i]
    byte_counters.reset_byte_counters()
    for i in range(warm, upto):
        ds[i]
    counts = byte_counters.byte_counters()["by_cache"]["read_ahead"]
    read_ahead.close_stores()
    return counts

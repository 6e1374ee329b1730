"""The CLI's failure paths: one ``Error:`` line and exit 2, AUDIOTREE_DEBUG, SIGTERM, interrupted renders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import run_script
from audiotree.sources import Corpus, Output

SRC = str(Path(__file__).resolve().parents[2] / "src")


def run_cli(*args, env=None, timeout: float = 180, shim: Path | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "AUDIOTREE_DEBUG"}
    if shim is not None:
        full_env["PYTHONPATH"] = os.pathsep.join([str(shim), full_env.get("PYTHONPATH", SRC)])
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "audiotree.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=full_env)


@pytest.fixture(scope="module")
def no_ray(tmp_path_factory) -> Path:
    """A folder that, first on PYTHONPATH, makes ``import ray`` fail as it does where Ray is not installed."""
    shim = tmp_path_factory.mktemp("no_ray")
    (shim / "ray").mkdir()
    (shim / "ray" / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    return shim


def _commands(corpus, tmp_path):
    folder = corpus["music"]
    return {
        "scan": ["scan", folder, "--executor", "ray"],
        "index": ["index", folder, "--out", tmp_path / "index.parquet", "--executor", "ray"],
        "render": ["render", folder, "--out", tmp_path / "render", "-n", "2", "--duration", "0.2",
                   "--sample-rate", "8000", "--executor", "ray"],
    }


@pytest.mark.slow
@pytest.mark.parametrize("command", ["scan", "index", "render"])
def test_executor_ray_without_ray_is_one_error_line(corpus, tmp_path, no_ray, command):
    args = _commands(corpus, tmp_path)[command]
    result = run_cli(*args, shim=no_ray)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(f"Error: audiotree {command}: ") and "audiotree[ray]" in lines[0], lines
    if command != "index":
        return  # the debug switch is the CLI's one error handler, the same for every command: checked once
    # AUDIOTREE_DEBUG=1: the traceback behind the same line, same exit code.
    debug = run_cli(*args, shim=no_ray, env={"AUDIOTREE_DEBUG": "1"})
    assert debug.returncode == 2, debug.stderr[-3000:]
    assert "Traceback (most recent call last)" in debug.stderr and "MissingExtraError" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1] == lines[0]


def test_debug_prints_the_traceback_behind_a_usage_error(tmp_path):
    plain = run_cli("preview", tmp_path / "nope")
    debug = run_cli("preview", tmp_path / "nope", env={"AUDIOTREE_DEBUG": "1"})
    assert plain.returncode == debug.returncode == 2
    assert plain.stderr.count("\n") == 1 and plain.stderr.startswith("Error: audiotree preview: ")
    assert "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1] == plain.stderr.strip()


@pytest.fixture(scope="module")
def mixed_channels(tmp_path_factory) -> Path:
    import soundfile as sf

    folder = tmp_path_factory.mktemp("mixed")
    for name, channels in (("a", 1), ("b", 2), ("c", 1), ("d", 2)):
        sf.write(folder / f"{name}.wav", np.full((8000, channels), 0.1, np.float32), 8000)
    return folder


def test_channel_mismatch_from_the_cli_names_mono_and_the_command(mixed_channels, tmp_path):
    result = run_cli("preview", mixed_channels, "--stereo", "--no-shuffle", "--out", tmp_path / "pv", "-n", "4",
                     "--duration", "0.2", "--sample-rate", "8000")
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: audiotree preview: "), lines
    assert "--mono" in lines[0] and "mono=True" not in lines[0] and "b.wav" in lines[0], lines


def test_channel_mismatch_found_up_front_from_the_index(mixed_channels, tmp_path):
    from audiotree.errors import ChannelMismatchError
    from audiotree.index import build_index
    from audiotree.sources import create_audio_dataset

    index = tmp_path / "index.parquet"
    build_index(mixed_channels, index, loudness=False, executor="serial", show_progress=False)
    for build in (lambda: create_audio_dataset(corpus=Corpus(index=index), output=Output(mono=False), duration=0.2, sample_rate=8000),
                  lambda: create_audio_dataset(corpus=Corpus(index=index), output=Output(mono=False, channels=2), duration=0.2, sample_rate=8000)):
        with pytest.raises(ChannelMismatchError) as info:
            build()  # before any item is read
        assert info.value.count == 2 and "mono=True" in str(info.value)
    assert len(create_audio_dataset(corpus=Corpus(index=index), output=Output(mono=True), duration=0.2, sample_rate=8000)) == 4


SIGTERM_IN_FINALISER = """
import os, signal
from audiotree.cli import main

assert main(["--version"]) == 0  # installs the CLI's SIGTERM handler

class Finaliser:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        total = sum(range(300_000))  # the handler runs in here
        print("FINALISED", total > 0, flush=True)

item = Finaliser()
del item
import time
time.sleep(5)
print("NOT STOPPED", flush=True)
"""


def test_sigterm_during_a_finaliser_is_not_swallowed(tmp_path):
    result = run_script(SIGTERM_IN_FINALISER, tmp_path, timeout=120)
    assert "FINALISED True" in result.stdout, result.stderr[-3000:]
    assert "NOT STOPPED" not in result.stdout
    assert result.returncode == 128 + signal.SIGTERM, (result.returncode, result.stderr[-3000:])
    assert "Exception ignored" not in result.stderr, result.stderr[-3000:]


@pytest.mark.slow
def test_interrupted_render_says_rerunning_resumes(corpus, tmp_path):
    out = tmp_path / "render"
    args = [sys.executable, "-m", "audiotree.cli", "render", str(corpus["speech"]), str(corpus["music"]),
            "-n", "400", "--part-size", "8", "--batch-size", "4", "--duration", "0.2", "--sample-rate", "8000",
            "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k != "AUDIOTREE_DEBUG"}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:  # until the first part is committed
            record = out / "render.json"
            if record.is_file():
                try:
                    if any(part["count"] for part in json.loads(record.read_text())["parts"]):
                        break
                except (ValueError, KeyError):
                    pass
            time.sleep(0.1)
        assert proc.poll() is None, "the render finished before it could be interrupted"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "Rerun the same command to resume" in err, err[-3000:]
    for noise in ("Exception ignored", "leaked shared_memory", "Traceback"):
        assert noise not in err, err[-3000:]


@pytest.fixture(scope="module")
def truncated_corpus(tmp_path_factory) -> Path:
    """4 FLACs of 3 s: one cut to its first 3,000 bytes, one with garbage in the middle (its header and end read)."""
    import soundfile as sf

    folder = tmp_path_factory.mktemp("truncated")
    t = np.arange(8000 * 3) / 8000
    x = (0.3 * np.sin(2 * np.pi * 440 * t) + 0.01 * np.random.default_rng(0).standard_normal(t.size)).astype(np.float32)
    for name in ("a", "b", "cut", "garbled"):
        sf.write(folder / f"{name}.flac", x, 8000)
    (folder / "cut.flac").write_bytes((folder / "cut.flac").read_bytes()[:3000])
    garbled = bytearray((folder / "garbled.flac").read_bytes())
    garbled[4000:12000] = bytes(8000)
    (folder / "garbled.flac").write_bytes(bytes(garbled))
    return folder


@pytest.mark.parametrize("loudness", [False, True])
def test_scan_counts_a_truncated_flac_as_unreadable(truncated_corpus, loudness):
    result = run_cli("scan", truncated_corpus, "--json", *(["--loudness"] if loudness else []))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    bad = {Path(entry["path"]).name for entry in report["unreadable"]}
    assert "cut.flac" in bad
    assert report["files"] == 4 == report["readable"] + len(report["unreadable"]), report
    assert sum(g["readable"] for g in report["groups"].values()) == report["readable"]
    good = 4 - len(bad)
    assert report["total_seconds"] == pytest.approx(3.0 * good, abs=1e-3)  # the cut file's claimed 3 s are not counted
    assert sum(g["seconds"] for g in report["groups"].values()) == pytest.approx(3.0 * good, abs=1e-3)
    table = run_cli("scan", truncated_corpus, *(["--loudness"] if loudness else []))
    assert f"{report['readable']} readable" in table.stdout and f"{len(bad)} unreadable" in table.stdout
    row = next(line for line in table.stdout.splitlines() if "(all)" in line)
    assert row.split("│")[3].strip() == str(len(bad)), row  # the groups table agrees

"""The ``audiotree`` command, end to end in subprocesses (``python -m audiotree.cli``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest


def run_cli(*args, cwd=None, env=None, timeout: float = 180) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.pop("AUDIOTREE_DEBUG", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "audiotree.cli", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env,
    )


def groups(corpus, *names) -> list[str]:
    return [f"{name}={corpus[name]}" for name in (names or corpus)]


TINY = ["--duration", "0.25", "--sample-rate", "8000"]


# ------------------------------------------------------------------ the group and bad arguments
def test_help_lists_every_command():
    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    for command in ("demo", "scan", "preview", "bench", "render"):
        assert command in result.stdout
    sub = run_cli("preview", "--help")
    for option in ("--sample-rate", "--duration", "--strategy", "--lufs-cutoff", "--num-tries", "--weights",
                   "--mono / --stereo", "--seed", "--out", "-n"):
        assert option in sub.stdout, option


_SHARED_OPTIONS = ("--sample-rate", "--duration", "--strategy", "--lufs-cutoff", "--num-tries", "--weights",
                   "--mono / --stereo", "--seed", "--shuffle / --no-shuffle", "--on-read-error")
_HELP_OPTIONS = {
    "demo": ("--out", "--workers", "--batches", "--batch-size", "-n, --num-excerpts"),
    "scan": ("--duration", "--loudness", "--loudness-seconds", "--lufs-cutoff", "--json", "--all", "--jobs", "--plot"),
    "preview": ("--out", "-n, --num-excerpts", "--image-format", "--group-by", "--sort-by", "--where",
                *_SHARED_OPTIONS),
    "index": ("--out", "--labels", "--labels-key", "--labels-match", "--root", "--segments", "--executor", "--jobs",
              "--chunk-size"),
    "bench": ("--workers", "--threads", "--buffers", "--read-buffer", "--batch-size", "--batches", "--ram-budget",
              "--tolerance", "--plot", "--json", "--where", *_SHARED_OPTIONS),
    "render": ("--out", "-n, --num-items", "--epoch", "--format", "--workers", "--batch-size", "--part-size",
               "--overwrite", "--where", *_SHARED_OPTIONS),
    "import": ("kaldi", "lhotse"),
    "export": ("lhotse",),
}


def _console_script() -> str | None:
    # The `audiotree` script installed beside this interpreter (it calls audiotree.cli:main).
    script = Path(sys.executable).with_name("audiotree")
    return str(script) if script.exists() else None


@pytest.mark.parametrize("command", sorted(_HELP_OPTIONS))
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_subcommand_help_exits_0_with_its_options(command, flag):
    runs = [run_cli(command, flag)]
    script = _console_script()
    if script is not None:
        runs.append(subprocess.run([script, command, flag], capture_output=True, text=True, timeout=120,
                                   env={k: v for k, v in os.environ.items() if k != "AUDIOTREE_DEBUG"}))
    for result in runs:
        assert result.returncode == 0, (result.args, result.returncode, result.stderr)
        assert result.stderr == "", result.stderr
        assert result.stdout.startswith(f"Usage: audiotree {command} [OPTIONS]"), result.stdout[:200]
        assert "Error" not in result.stdout
        for option in (*_HELP_OPTIONS[command], "-h, --help"):
            assert option in result.stdout, (command, option)


def test_every_subcommand_is_covered_by_the_help_test():
    from audiotree.cli import cli

    assert sorted(cli.list_commands(None)) == sorted(_HELP_OPTIONS)


def test_bare_command_prints_multi_line_usage():
    result = run_cli()
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == "Usage: audiotree [OPTIONS] COMMAND [ARGS]..."
    assert not any(line.startswith("Error") for line in lines)
    assert "Commands:" in lines
    commands = [line.split()[0] for line in lines[lines.index("Commands:") + 1:] if line.startswith("  ") and not line.startswith("   ")]
    assert commands == ["demo", "scan", "preview", "bench", "render", "index", "import", "export"]


def test_version_exits_0():
    result = run_cli("--version")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith("audiotree ")


def test_missing_sources_is_still_one_line():
    result = run_cli("scan")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["Error: audiotree scan: Missing argument 'SOURCES...'."]


def _bad_cases(corpus, tmp_path):
    speech, music = f"speech={corpus['speech']}", f"music={corpus['music']}"
    out = ["--out", str(tmp_path / "out")]
    return {
        "unknown group in --weights": (["preview", speech, music, "--weights", "speech=1,noise=2", *out], "noise"),
        "negative weight": (["preview", speech, music, "--weights", "speech=-1", *out], "> 0"),
        "weight not a number": (["bench", speech, music, "--weights", "speech=abc"], "is not a number"),
        "weight without name": (["render", speech, "--weights", "=3", "-n", "2", *out], "GROUP=WEIGHT"),
        "missing folder": (["preview", f"speech={tmp_path / 'nope'}", *out], "does not exist"),
        "missing folder (scan)": (["scan", str(tmp_path / "nope")], "does not exist"),
        "zero duration": (["preview", speech, "--duration", "0", *out], "--duration"),
        "duration not a number": (["bench", speech, "--duration", "abc"], "--duration"),
        "negative duration (scan)": (["scan", speech, "--duration", "-1"], "--duration"),
        "loudest-only option with random": (["preview", speech, "--lufs-cutoff", "-30", *out], "lufs_cutoff"),
        "bad workers list": (["bench", speech, "--workers", "0,x"], "'x' is not an integer"),
        "render needs -n or --epoch": (["render", speech, *out], "--epoch"),
        "unknown strategy": (["preview", speech, "--strategy", "loud", *out], "loud"),
    }


@pytest.mark.slow
def test_bad_arguments_give_one_line_and_exit_2(corpus, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    cases = _bad_cases(corpus, tmp_path)
    with ThreadPoolExecutor(2) as pool:  # two interpreters at a time: one per core
        results = list(pool.map(lambda args: run_cli(*args, cwd=tmp_path), [args for args, _ in cases.values()]))
    for (name, (args, needle)), result in zip(cases.items(), results):
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (name, result.returncode, result.stderr)
        assert len(lines) == 1, (name, result.stderr)
        assert lines[0].startswith("Error: "), (name, lines)
        assert needle in lines[0], (name, lines[0])
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # nothing was written by a refused command


def test_unreadable_file_during_preview_is_one_line(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "noise.wav").write_bytes(b"RIFF this is not audio")
    result = run_cli("preview", folder, "--out", tmp_path / "out", "-n", "1", *TINY)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "noise.wav" in result.stderr and "Traceback" not in result.stderr


# ------------------------------------------------------------------ scan
@pytest.fixture()
def scan_corpus(corpus, tmp_path) -> dict[str, Path]:
    """Two real files per group, plus an unreadable file and a 50 ms file."""
    import soundfile

    out = {}
    for name, folder in corpus.items():
        dest = tmp_path / "scan" / name
        dest.mkdir(parents=True)
        for path in sorted(folder.iterdir())[:2]:
            shutil.copy(path, dest / path.name)
        out[name] = dest
    (out["effects"] / "broken.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    soundfile.write(out["music"] / "blip.wav", np.zeros(400, np.float32), 8000)
    return out


def test_scan_json_report(scan_corpus):
    result = run_cli("scan", *groups(scan_corpus), "--duration", "0.5", "--loudness", "--loudness-seconds", "2",
                     "--lufs-cutoff", "-40", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["version"] == 1
    stable_keys = {"files", "readable", "total_seconds", "total_hours", "groups", "formats", "sample_rates",
                   "channels", "duration_histogram", "unreadable", "short", "loudness"}
    assert set(report) >= stable_keys
    assert report["files"] == 8 and report["readable"] == 7
    assert list(report["groups"]) == ["speech", "music", "effects"]
    effects = report["groups"]["effects"]
    effects_keys = {"files", "readable", "seconds"}
    assert (effects["files"], effects["readable"], set(effects)) == (3, 2, effects_keys)
    assert sum(report["formats"].values()) == 7 and sum(report["channels"].values()) == 7
    assert sum(b["count"] for b in report["duration_histogram"]) == 7
    hours_vs_total = report["total_hours"] * 3600 - report["total_seconds"]  # the two totals agree
    assert abs(hours_vs_total) < 1
    [bad] = report["unreadable"]
    assert bad["path"].endswith("broken.wav") and bad["reason"]
    assert [Path(f["path"]).name for f in report["short"]["files"]] == ["blip.wav"]
    loud = report["loudness"]
    assert loud["measured"] == 7 and loud["silent"] == 1 and loud["below_cutoff"] == 1
    assert -40 < loud["min_lufs"] <= loud["median_lufs"] <= loud["max_lufs"] < 0
    assert sum(b["count"] for b in loud["histogram"]) == 6


def test_scan_plot(scan_corpus, tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    plot = tmp_path / "out" / "scan.png"
    result = run_cli("scan", *groups(scan_corpus), "--duration", "0.5", "--loudness-seconds", "2", "--lufs-cutoff",
                     "-40", "--plot", plot)
    assert result.returncode == 0, result.stderr
    assert f"Plot: {plot}" in result.stdout and "Loudness (first 2 s" in result.stdout  # --plot measures loudness
    with Image.open(plot) as img:
        img.load()
        assert img.size == (960, 400)
        rgb = np.asarray(img.convert("RGB")).astype(int)
    # The 50 ms blip (shorter than --duration, and silent) is drawn as a red bar in the duration panel.
    red = (np.abs(rgb - (0xC0, 0x39, 0x2B)).sum(axis=-1) < 12)
    assert red[:, :480].sum() > 100


def test_scan_table_report(scan_corpus):
    result = run_cli("scan", *[str(p) for p in scan_corpus.values()], "--duration", "0.5")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "8 files" in out and "7 readable" in out and "1 unreadable" in out
    for heading in ("Formats", "Sample rates", "Channels", "Durations"):
        assert heading in out
    assert "broken.wav" in out and "blip.wav" in out and "█" in out


# ------------------------------------------------------------------ bench
@pytest.mark.slow
def test_bench_json_and_plot(corpus, tmp_path):
    plot = tmp_path / "bench.png"
    result = run_cli("bench", *groups(corpus, "speech", "music"), "--workers", "0,1", "--threads", "0", "--buffers", "1",
                     "--batches", "2", "--batch-size", "4", *TINY, "--ram-budget", "100000", "--json", "--plot", plot)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert [(m["num_workers"], m["num_threads"]) for m in report["measurements"]] == [(0, 0), (1, 0)]
    for m in report["measurements"]:
        # Every setting produced a measurement (values, not speeds, are checked).
        measured = (m["items_per_second"], m["first_batch_seconds"])
        assert min(measured) > 0 and m["items"] == 8
        assert m["peak_rss_mb"] > 10
    # The worker's memory is counted: the process tree with a worker holds more.
    assert report["measurements"][1]["peak_rss_mb"] > report["measurements"][0]["peak_rss_mb"]
    assert report["knee"] in report["measurements"] and report["fits_budget"] is True
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The realised mix per window of 10 steps of 4 items, against the weights (1:1 here).
    mix = report["mix"]
    assert mix["names"] == ["speech", "music"] and mix["window"] == 40 and len(mix["windows"]) == 8
    for window in mix["windows"]:
        assert window["expected"] == {"speech": 0.5, "music": 0.5}
        assert sum(window["realised"].values()) == pytest.approx(1.0)
        assert abs(window["realised"]["speech"] - 0.5) <= 3 * (0.25 / 40) ** 0.5


@pytest.mark.slow
def test_bench_table(corpus):
    result = run_cli("bench", corpus["music"], "--workers", "0", "--threads", "0,2", "--batches", "2",
                     "--batch-size", "4", *TINY)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "knee" in result.stdout and "items/s" in result.stdout and "Use: ds.to_iter_dataset" in result.stdout
    assert "[2/2]" in result.stderr  # progress per setting
    assert "Mix per" not in result.stdout  # one group: nothing is mixed
    assert "Reads from storage" not in result.stdout  # local files: no request to count


@pytest.mark.slow
def test_bench_table_shows_the_mix_per_window_of_steps(corpus):
    result = run_cli("bench", *groups(corpus, "speech", "music"), "--weights", "speech=3", "--workers", "0",
                     "--threads", "0", "--batches", "1", "--batch-size", "4", *TINY)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "Mix per 10 steps of 4" in out and "0-9" in out and "70-79" in out and "(75.0%)" in out
    assert "binomial SD" in out


# ------------------------------------------------------------------ render
def _expected_items(corpus, names, n, **kwargs):
    from audiotree.sources import create_balanced_audio_dataset

    ds = create_balanced_audio_dataset({k: [str(corpus[k])] for k in names}, duration=0.25, sample_rate=8000, **kwargs)
    return [ds[i] for i in range(n)]


def _assert_same(rendered, expected):
    assert len(rendered) == len(expected)
    for i, want in enumerate(expected):
        got = rendered[i]
        np.testing.assert_array_equal(np.asarray(got.waveform), np.asarray(want.waveform))
        assert got.filepath == want.filepath and got.source == want.source


@pytest.mark.slow
def test_render_tree_resumes_and_extends(corpus, tmp_path):
    from audiotree.sources import open_render

    out = tmp_path / "render"
    args = ["render", *groups(corpus, "speech", "music"), "--out", out, "--part-size", "8", "--batch-size", "5", *TINY]
    first = run_cli(*args, "-n", "20")
    assert first.returncode == 0, first.stderr[-2000:]
    record = json.loads((out / "render.json").read_text())
    assert record["complete"] and [(p["start"], p["stop"], p["count"]) for p in record["parts"]] == [
        (0, 8, 8), (8, 16, 8), (16, 20, 4)]
    expected = _expected_items(corpus, ("speech", "music"), 28)
    _assert_same(open_render(out), expected[:20])

    # An interruption while part 2 was being written: it is missing from the record, its folder half there.
    record["parts"] = record["parts"][:2]
    record["complete"] = False
    (out / "render.json").write_text(json.dumps(record))
    (out / "part-00002" / "manifest.json").write_text("{ torn")
    resumed = run_cli(*args, "-n", "20")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Resuming at item 16" in resumed.stdout
    _assert_same(open_render(out), expected[:20])

    # Asking for more continues from the committed count.
    extended = run_cli(*args, "-n", "28")
    assert extended.returncode == 0 and "Resuming at item 20" in extended.stdout
    _assert_same(open_render(out), expected)
    again = run_cli(*args, "-n", "28")
    assert again.returncode == 0 and "Nothing to do" in again.stdout

    # Other settings are refused rather than mixed in.
    other = run_cli(*args[:-4], "--duration", "0.5", "--sample-rate", "8000", "-n", "28")
    assert other.returncode == 2 and "--overwrite" in other.stderr and other.stderr.count("\n") == 1


def test_render_refuses_a_foreign_folder(corpus, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = run_cli("render", corpus["speech"], "--out", tmp_path, "-n", "2", *TINY)
    assert result.returncode == 2 and "not empty" in result.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_render_epoch_audio_with_workers(corpus, tmp_path):
    from audiotree.sources import open_render
    from audiotree.sources import create_audio_dataset

    out = tmp_path / "audio"
    result = run_cli("render", corpus["effects"], "--out", out, "--epoch", "--format", "audio", "--workers", "2",
                     "--part-size", "5", "--batch-size", "2", *TINY)
    assert result.returncode == 0, result.stderr[-2000:]
    rendered = open_render(out)
    assert len(rendered) == 8  # one epoch: every file once
    assert len(list(out.glob("part-*/*.wav"))) == 8
    expected = create_audio_dataset(str(corpus["effects"]), duration=0.25, sample_rate=8000, num_epochs=1)
    for i in range(8):
        assert rendered[i].filepath == expected[i].filepath
        # AudioWriter stores float WAV: the samples come back exactly.
        np.testing.assert_array_equal(np.asarray(rendered[i].waveform), np.asarray(expected[i].waveform))


@pytest.mark.slow
def test_render_killed_midway_resumes(corpus, tmp_path):
    from audiotree.sources import open_render

    out = tmp_path / "killed"
    args = [sys.executable, "-m", "audiotree.cli", "render", *groups(corpus, "speech", "effects"), "--out", str(out),
            "-n", "96", "--part-size", "8", "--batch-size", "4", *TINY]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if len(json.loads((out / "render.json").read_text())["parts"]) >= 2:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    kept = len(json.loads((out / "render.json").read_text())["parts"])
    result = run_cli(*args[3:])
    assert result.returncode == 0, result.stderr[-2000:]
    if kept < 12:  # it was really interrupted
        assert "Resuming at item" in result.stdout
    _assert_same(open_render(out), _expected_items(corpus, ("speech", "effects"), 96))


# ------------------------------------------------------------------ demo
def test_the_demo_folder_is_git_ignored():
    # `audiotree demo` writes ./audiotree-demo/ wherever it runs, the repository included.
    from conftest import REPO_ROOT

    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("audiotree-demo/index.html", "examples/audiotree-demo/speech/000.wav"):
        result = subprocess.run(["git", "-C", str(REPO_ROOT), "check-ignore", "-q", path], timeout=60)
        assert result.returncode == 0, f"{path} is not ignored by .gitignore"


@pytest.mark.slow
def test_demo_from_a_fresh_cache(tmp_path):
    cache = tmp_path / "cache"
    # The "< 60 s on a fresh machine" goal is measured, not asserted (tests must not depend on
    # machine speed): the demo prints its own wall time ("Done in ... s").
    result = run_cli("demo", "--out", tmp_path / "demo-out", cwd=tmp_path, env={"AUDIOTREE_CACHE": str(cache)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done in" in result.stdout
    out = result.stdout
    assert "generated in" in out and "items/s" in out
    assert "Proportions over 256 items" in out and "Mix of the first 8 batches" in out
    assert "Mix per 10 steps of 32" in out and "70-79" in out and "(50.0%)" in out  # per window, read from the mix
    for group in ("speech", "music", "effects"):
        assert group in out
    # Observed shares follow the weights 0.5 / 0.3 / 0.2.
    rows = {line.split()[1]: line.split() for line in out.splitlines() if line.startswith("│ ") and "%" in line}
    for group, weight in (("speech", 0.5), ("music", 0.3), ("effects", 0.2)):
        observed = float(rows[group][7].rstrip("%")) / 100
        assert abs(observed - weight) < 0.06, (group, observed)
    # The corpus was generated atomically into the cache: one finished folder, no leftovers.
    assert sorted(p.name for p in cache.iterdir()) == ["demo-corpus-v2"]
    assert len(list((cache / "demo-corpus-v2").rglob("*.*"))) == 30
    page = (tmp_path / "demo-out" / "index.html").read_text()
    assert page.count("<audio controls") == 12
    # A second run uses the cache.
    again = run_cli("demo", "--out", tmp_path / "demo-out", "--workers", "0", "--batches", "2", "--batch-size", "4",
                    "-n", "0", cwd=tmp_path, env={"AUDIOTREE_CACHE": str(cache)})
    assert again.returncode == 0 and "(cached)" in again.stdout

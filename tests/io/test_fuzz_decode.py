"""The decode layer under coverage-guided fuzzing (atheris), and its regression inputs.

* Every file in ``tests/data/fuzz_regressions/`` (inputs that once broke the
  decode rule: the issue's examples, mutants and fuzzer finds) is replayed
  through every kind of read and must keep the rule.
* A bounded atheris run per format (``fuzz/fuzz_decode.py``) must finish
  without a crash. The default budget is 15 s per format (60 s in all);
  ``AUDIOTREE_FUZZ_SECONDS`` sets the seconds per format. The libFuzzer seed
  is fixed per format, so a run is repeatable. Longer campaigns: see
  ``fuzz/README.md``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

import audiotree
from audiotree.io import AudioFile
from audiotree.io.mpeg_frames import count_frames
from conftest import REPO_ROOT

FUZZ_DIR = REPO_ROOT / "fuzz"
REGRESSIONS = REPO_ROOT / "tests" / "data" / "fuzz_regressions"
sys.path.insert(0, str(FUZZ_DIR))
from decode_rule import FORMATS, FUZZ_FORMATS, check_file  # noqa: E402

FUZZ_SECONDS = float(os.environ.get("AUDIOTREE_FUZZ_SECONDS", "15"))
_REGRESSION_FILES = sorted(p for p in REGRESSIONS.iterdir() if p.suffix.lstrip(".") in FORMATS)


def test_regression_inputs_are_present():
    assert {p.suffix.lstrip(".") for p in _REGRESSION_FILES} == set(FORMATS)


@pytest.mark.parametrize("path", _REGRESSION_FILES, ids=lambda p: p.name)
def test_regression_input_keeps_the_rule(path, tmp_path):
    copy = tmp_path / path.name  # read a copy: the repository file stays untouched
    shutil.copyfile(path, copy)
    outcome = check_file(str(copy))  # raises RuleViolation if the rule is broken
    # The examples and the fuzzer's header finds are refused at open;
    # issue 29's wrong reads are refused at open or by the read that meets the
    # damage (never accepted), except MP3s whose damage is all in the Xing tag:
    # since issue 35 such a tag is not trusted and the file reads every frame it
    # holds (issue 29 read them short); ``mutant-*`` and ``crash-*`` inputs (once
    # wrong or once crashing the process) only have to keep the rule.
    if path.name.startswith("issue29-mp3-xing-"):
        assert outcome == "accepted", f"{path.name} should read whole, got {outcome}"
        frames, per_frame, _ = count_frames(copy.read_bytes(), 0)  # the tag's own frame and every audio frame
        with AudioFile(str(copy)) as f:
            assert f.info.frames == (frames - 1) * per_frame
    elif path.name.startswith("issue29-"):
        assert outcome in ("refused", "partial"), f"{path.name} read without an error ({outcome})"
    elif not path.name.startswith(("mutant-", "crash-")):
        assert outcome == "refused", f"{path.name} should be refused when opened, got {outcome}"


def _fuzz(fmt: str, tmp_path, seconds: float) -> tuple[subprocess.CompletedProcess, object]:
    """Runs the harness for ``seconds``; returns the finished process and its artifact folder."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for p in _REGRESSION_FILES:  # start from the known-bad inputs as well as the seeds
        if p.suffix == f".{fmt}":
            shutil.copyfile(p, corpus / p.name)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    src = os.path.dirname(os.path.dirname(os.path.abspath(audiotree.__file__)))
    # The scratch file goes under tmp_path: left in /dev/shm, the last run's would outlive the suite.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
           "AUDIOTREE_FUZZ_SCRATCH": str(tmp_path / "scratch")}
    seeds = tmp_path / "seeds"  # the harness seeds an empty first corpus folder with valid files
    cmd = [
        sys.executable, str(FUZZ_DIR / "fuzz_decode.py"), "--format", fmt, str(seeds), str(corpus),
        # A fixed seed makes the run repeatable (up to how far the time budget gets).
        f"-seed={1 + FORMATS.index(fmt)}", f"-max_total_time={int(seconds)}", "-timeout=30", "-rss_limit_mb=2048",
        f"-artifact_prefix={artifacts}/", "-print_final_stats=1",
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds + 300), artifacts


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FUZZ_FORMATS)
def test_bounded_fuzz_run_finds_nothing(fmt, tmp_path):
    pytest.importorskip("atheris", reason="atheris (in the [test] extra) runs the fuzz harness")
    proc, artifacts = _fuzz(fmt, tmp_path, FUZZ_SECONDS)
    found = sorted(p.name for p in artifacts.iterdir())
    tail = proc.stderr[-4000:]
    # atheris prints the uncaught exception (the broken rule) on stdout, libFuzzer's log goes to stderr.
    exception = proc.stdout[proc.stdout.find("=== Uncaught Python exception"):][:4000]
    if found:  # keep the inputs beyond the temp folder, so a CI failure can be replayed
        keep = REPO_ROOT / "artifacts" / f"fuzz-{fmt}"
        keep.mkdir(parents=True, exist_ok=True)
        for name in found:
            shutil.copyfile(artifacts / name, keep / name)
    assert proc.returncode == 0 and not found, (
        f"the {fmt} fuzzer found inputs that break the decode rule: {found} (copied to artifacts/fuzz-{fmt}/); "
        f"fix the bug and add each input to tests/data/fuzz_regressions/.\n{exception}\n{tail}"
    )
    done = re.search(r"#(\d+)\s+DONE\s+cov: (\d+) ft: (\d+)", proc.stderr)
    assert done, tail
    executions, cov, features = map(int, done.groups())
    assert executions > 0 and cov > 0 and features > 0
    print(f"fuzz {fmt}: {executions} executions in {FUZZ_SECONDS:.0f} s, cov {cov}, ft {features}")

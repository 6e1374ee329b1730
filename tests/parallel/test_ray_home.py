"""A Ray run started by audiotree leaves nothing in the home folder: Ray saves a new auth token to
``~/.ray/auth_token`` when it starts a local cluster with token authentication on by default; audiotree removes
the token it made Ray create (never one that was there before).

The run is a plain script in a fresh process with its own ``HOME`` and without the test suite's token variables
(tests/conftest.py sets them for this process), the way a user runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'audiotree[ray]')")

pytestmark = pytest.mark.slow

SCRIPT = """
from audiotree.parallel import map_chunks

def square(chunk):
    return [x * x for x in chunk]

if __name__ == "__main__":
    got = list(map_chunks(square, [[1, 2], [3]], executor="ray"))
    print("RESULT", got, flush=True)
"""


def _run(home: Path, tmp_path: Path) -> str:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(home), RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_ray_run_leaves_no_auth_token_it_created(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    assert "RESULT [[1, 4], [9]]" in _run(home, tmp_path)
    assert not (home / ".ray" / "auth_token").exists()
    assert not (home / ".ray").exists() or list((home / ".ray").iterdir()) == []


def test_a_token_that_was_there_before_stays(tmp_path):
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("a0" * 16)
    assert "RESULT [[1, 4], [9]]" in _run(home, tmp_path)
    assert (home / ".ray" / "auth_token").read_text() == "a0" * 16

"""The suite's /dev/shm guard (tests/conftest.py) knows the names this session's processes make: a semaphore of
this process or of a multiprocessing child, a name embedding a started process's pid; not another program's."""

from __future__ import annotations

import gc
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

import conftest

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="a Linux /dev/shm")


def test_a_semaphore_of_this_session_is_known_as_ours():
    before = conftest._shm_names()
    lock = multiprocessing.get_context("spawn").Lock()  # named, unlinked only when collected
    made = conftest._shm_names() - before
    mine = [name for name in made if name.startswith(f"sem.mp-pytest{os.getpid()}-")]
    assert mine and all(conftest._ours(name) for name in mine), made
    del lock
    gc.collect()
    assert not set(mine) & conftest._shm_names()


def test_names_of_started_processes_count_and_others_do_not():
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(child.stdout)
    assert conftest._ours(f"audiotree-fuzz-{pid}") and conftest._ours(f"audiotree_0a1b2c3d4e_{pid}_1_2")
    assert not conftest._ours("sem.mp-abcd1234") and not conftest._ours("psm_0d1adfbe")
    assert not conftest._ours(f"audiotree-fuzz-{pid + 1_000_000}")

"""Shared fixtures: every test generates its own audio; nothing is downloaded."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import pytest

# Keep JAX on the CPU and quiet in the test process and every subprocess it starts.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Ray (tests/test_ray.py): token auth with a token from the environment, set before Ray is first imported
# (Ray reads it once per process). Otherwise Ray would save a new token to ~/.ray/auth_token.
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# A single-node cluster bound to 127.0.0.1 (Ray's macOS/Windows mode); by default Ray would bind its
# servers to this machine's network address, and tests target loopback only.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

REPO_ROOT = Path(__file__).resolve().parent.parent
SEEDS_DIR = REPO_ROOT.parent / "shared" / "seeds"


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """Three groups (speech/music/effects), mixed formats, rates and channels."""
    from audiotree.synth import CorpusSpec, write_corpus

    root = tmp_path_factory.mktemp("corpus")
    return write_corpus(root, CorpusSpec(files_per_group=8, min_seconds=1.0, max_seconds=6.0, seed=7))


@pytest.fixture(scope="session")
def python_exe() -> str:
    return sys.executable

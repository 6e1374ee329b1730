"""Shared fixtures: every test generates its own audio; nothing is downloaded."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import pytest

# Keep JAX on the CPU and quiet in the test process and every subprocess it starts.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Ray (tests/parallel/test_ray.py): token auth with a token from the environment, set before Ray is first imported
# (Ray reads it once per process). Otherwise Ray would save a new token to ~/.ray/auth_token.
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# A single-node cluster bound to 127.0.0.1 (Ray's macOS/Windows mode); by default Ray would bind its
# servers to this machine's network address, and tests target loopback only.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

# Column stores of remote or read-only indexes go to a cache folder (audiotree.index.columns); keep the
# tests' out of the home folder, in one temporary folder removed when the session ends.
if "AUDIOTREE_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    _CACHE = tempfile.mkdtemp(prefix="audiotree-test-cache-")
    os.environ["AUDIOTREE_CACHE_DIR"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, True)

REPO_ROOT = Path(__file__).resolve().parent.parent
# The reference docs live beside the repository (../shared/seeds); a checkout elsewhere
# (a git worktree, CI) can point at them with AUDIOTREE_SEEDS_DIR.
SEEDS_DIR = Path(os.environ.get("AUDIOTREE_SEEDS_DIR") or REPO_ROOT.parent / "shared" / "seeds")


def seed_page_or_skip(name: str) -> Path:
    """The seed page ``name``; skips the calling test module, with one reason, when it is absent."""
    page = SEEDS_DIR / name
    if not page.is_file():
        pytest.skip(
            f"seed page {name} not found: expected at {page} (the shared reference docs beside the repository, "
            "../shared/seeds/; set AUDIOTREE_SEEDS_DIR to read them from elsewhere)",
            allow_module_level=True,
        )
    return page


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """Three groups (speech/music/effects), mixed formats, rates and channels."""
    from audiotree.synth import CorpusSpec, write_corpus

    root = tmp_path_factory.mktemp("corpus")
    return write_corpus(root, CorpusSpec(files_per_group=8, min_seconds=1.0, max_seconds=6.0, seed=7))


@pytest.fixture(scope="session")
def python_exe() -> str:
    return sys.executable


@pytest.fixture
def absl_flags_parsed():
    """What a plain Grain user does before ``mp_prefetch``: parse absl flags (undone afterwards).

    audiotree prepares Grain's flag only for its own pipelines (see
    ``audiotree.sources.workers.start``); a pipeline built with ``grain.MapDataset``
    directly follows Grain's rules, and Grain reads a flag while creating workers.
    """
    from absl import flags

    was_parsed = flags.FLAGS.is_parsed()
    if not was_parsed:
        flags.FLAGS.mark_as_parsed()
    yield
    if not was_parsed:
        flags.FLAGS.unparse_flags()

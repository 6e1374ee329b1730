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

# /dev/shm: a test must not leave there anything its processes created (a semaphore, a shared-memory block, a
# scratch folder). Other programs on the machine (parallel test runs) write there too, so only names this
# session can tell are its own count:
# * multiprocessing's named semaphores made by this process and its multiprocessing children carry the session's
#   pid (their prefix is inherited by every child multiprocessing starts);
# * names that embed the pid of a process this session started (audiotree's batch slots
#   ``audiotree_<token>_<pid>_...``, the fuzz harness's ``audiotree-fuzz-<pid>``, the read-counter board
#   ``audiotree-reads-<pid>-<token>`` of a process tree a test started; this session's own board lives as long
#   as the session, and is removed when it exits).
_SHM = Path("/dev/shm")
_SESSION_PIDS = {os.getpid()}
_SEM_MARK = f"sem.mp-pytest{os.getpid()}-"
if _SHM.is_dir():
    import multiprocessing
    import multiprocessing.process
    import subprocess

    multiprocessing.current_process()._config["semprefix"] = f"/mp-pytest{os.getpid()}"
    _popen_execute_child = subprocess.Popen._execute_child
    _process_start = multiprocessing.process.BaseProcess.start

    def _recording_execute_child(self, *args, **kwargs):
        _popen_execute_child(self, *args, **kwargs)
        _SESSION_PIDS.add(self.pid)

    def _recording_start(self):
        _process_start(self)
        _SESSION_PIDS.add(self.pid)

    subprocess.Popen._execute_child = _recording_execute_child
    multiprocessing.process.BaseProcess.start = _recording_start


def _shm_names() -> set[str]:
    try:
        return set(os.listdir(_SHM))
    except OSError:
        return set()


def _ours(name: str) -> bool:
    if name.startswith(_SEM_MARK):
        return True
    import re

    match = re.match(r"^(?:audiotree_[0-9a-f]+_(\d+)_|audiotree-fuzz-(\d+)$|audiotree-reads-(\d+)-[0-9a-f]+$)", name)
    if match is None:
        return False
    pid = int(next(g for g in match.groups() if g))
    return pid in _SESSION_PIDS and not (match.group(3) and pid == os.getpid())


@pytest.fixture(autouse=True)
def _no_bytes_held_between_tests():
    """Each test starts with no bytes fetched ahead by an earlier one: the read-ahead's stores are per process
    (audiotree.io.read_ahead), and a test's plans must not serve another's reads."""
    yield
    read_ahead = sys.modules.get("audiotree.io.read_ahead")
    if read_ahead is not None:
        read_ahead.close_stores()


@pytest.fixture(autouse=True)
def _leaves_nothing_in_dev_shm(request):
    """Fails the test that leaves in /dev/shm a name its processes created (see above)."""
    if not _SHM.is_dir():
        yield
        return
    before = _shm_names()
    yield
    try:
        import psutil

        _SESSION_PIDS.update(p.pid for p in psutil.Process().children(recursive=True))
    except Exception:  # noqa: BLE001 - psutil is optional: the recorded starts still count
        pass
    import gc
    import time

    left: set[str] = set()
    # A resource tracker unlinks what its tree left a moment after the tree ends: up to 10 s on a loaded machine
    # (the CI machine once needed more than 2 s for the queues of a worker pool stopped by an error).
    for attempt in range(200):
        left = {name for name in _shm_names() - before if _ours(name)}
        if not left:
            return
        if attempt == 0:
            # What the test dropped but a reference cycle keeps (a Grain iterator's queues) is not left. Collected
            # only when a name is there: a full collection costs up to a second in a process holding Ray, torch and
            # moto, on every one of the suite's thousands of tests.
            gc.collect()
            continue
        time.sleep(0.05)
    pytest.fail(f"{request.node.nodeid} left {len(left)} name(s) it created in /dev/shm: {sorted(left)[:10]}",
                pytrace=False)


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


def require_tool(present: bool, tool: str, why: str) -> None:
    """Skips the calling test when ``tool`` (a Debian encoder) is absent, naming it; under CI (``CI=true``)
    fails instead, so a broken ``.ci/run`` install step cannot pass by skipping."""
    if present:
        return
    message = f"{tool} is not installed ({why}); .ci/run installs it (apt-get install ffmpeg lame sox ...)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {message}")
    pytest.skip(message)


@pytest.fixture(scope="session")
def encoder_matrix(tmp_path_factory):
    """Every case of ``tests/encoder_matrix.py`` written by its encoder, with ffmpeg's decode as the oracle
    (``{case_id: Built}``); built once, the encoders running in parallel threads."""
    import encoder_matrix as em

    root = tmp_path_factory.mktemp("encoder-matrix")
    return em.build(root / "files", jobs=4)


@pytest.fixture(scope="session")
def mp3_corpus(tmp_path_factory) -> dict[str, Path]:
    """The three groups of :func:`corpus` (8 files each) as MP3s written by ffmpeg (libmp3lame): mixed rates
    (16, 22.05, 44.1 and 48 kHz), mono and stereo, 1.5-4 s."""
    import concurrent.futures
    import shutil
    import subprocess

    import soundfile

    import encoder_matrix as em

    require_tool(shutil.which("ffmpeg") is not None, "ffmpeg", "it writes the MP3 corpus")
    root = tmp_path_factory.mktemp("mp3-corpus")
    jobs = []
    for g, group in enumerate(("speech", "music", "effects")):
        (root / group).mkdir()
        for i in range(8):
            rate = (16000, 22050, 44100, 48000)[(i + g) % 4]
            channels = 1 + (i // 4 + i + g) % 2
            seconds = 1.5 + 2.5 * ((i * 3 + g) % 8) / 7
            wav = root / f"{group}-{i}.wav"
            soundfile.write(wav, em.source_signal(rate, channels, seconds), rate, subtype="PCM_16")
            bitrate = "64k" if rate < 32000 else "128k"
            jobs.append(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", str(wav), "-c:a", "libmp3lame",
                         "-b:a", bitrate, str(root / group / f"{group}-{i:02d}.mp3")])
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for done in pool.map(lambda argv: subprocess.run(argv, capture_output=True, text=True), jobs):
            assert done.returncode == 0, done.stderr
    for wav in root.glob("*.wav"):
        wav.unlink()
    return {group: root / group for group in ("speech", "music", "effects")}

"""Coverage-guided fuzzing of the decode layer with atheris (libFuzzer for Python).

Each input is the bytes of one file of the chosen format. It is written to a
scratch file and read the way the library reads files (open, probe, whole
read, excerpts at start/middle/end, a dataset-style excerpt); any break of the
decode rule (see ``decode_rule.py``) is raised as ``RuleViolation``, which
libFuzzer reports as a crash and saves as ``crash-<sha1>``. The audiotree
modules are instrumented, so inputs that reach new branches of the Python
decode layer (audiotree.io, audiotree.excerpts) are kept in the corpus.

Usage (see fuzz/README.md)::

    python fuzz/fuzz_decode.py --format flac CORPUS_DIR [libFuzzer flags...]

``CORPUS_DIR`` is created and seeded with small valid files when empty. Any
libFuzzer flag works, e.g. ``-max_total_time=3600`` or ``-runs=100000``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

with atheris.instrument_imports(include=["audiotree"]):
    import audiotree.excerpts  # noqa: F401 - instrumented for coverage
    import audiotree.io  # noqa: F401

from decode_rule import FORMATS, check_file, seed_bytes  # noqa: E402

_SCRATCH = {}


def _seed_corpus(directory: str, fmt: str) -> None:
    """Creates ``directory`` with two small valid files if it is missing or empty (a file is left alone)."""
    if os.path.isfile(directory):  # replaying one input
        return
    os.makedirs(directory, exist_ok=True)
    if any(os.scandir(directory)):
        return
    for channels in (1, 2):
        with open(os.path.join(directory, f"seed-{fmt}-{channels}ch.{fmt}"), "wb") as fh:
            fh.write(seed_bytes(fmt, channels=channels, seed=channels))


def test_one_input(data: bytes) -> None:
    path = _SCRATCH["path"]
    with open(path, "wb") as fh:
        fh.write(data)
    check_file(path)  # raises RuleViolation on a break of the rule


def _scratch_dir() -> str:
    """A per-process scratch folder (RAM-backed where possible); stale ones are removed.

    libFuzzer ends the process with C ``exit()``, so Python cleanup code never
    runs; the next run removes folders whose process is gone instead. A caller
    that cleans up after the run itself (the test suite) names the folder to
    use with ``AUDIOTREE_FUZZ_SCRATCH``.
    """
    given = os.environ.get("AUDIOTREE_FUZZ_SCRATCH")
    if given:
        os.makedirs(given, exist_ok=True)
        return given
    root = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    for entry in os.scandir(root):
        name = entry.name
        if name.startswith("audiotree-fuzz-") and name[15:].isdigit() and not os.path.exists(f"/proc/{name[15:]}"):
            shutil.rmtree(entry.path, ignore_errors=True)
    path = os.path.join(root, f"audiotree-fuzz-{os.getpid()}")
    os.makedirs(path, exist_ok=True)
    return path


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=True)
    parser.add_argument("--format", choices=FORMATS, required=True, help="file format the inputs are written as")
    args, libfuzzer_argv = parser.parse_known_args(argv[1:])
    corpora = [a for a in libfuzzer_argv if not a.startswith("-")]
    if corpora:
        _seed_corpus(corpora[0], args.format)
    _SCRATCH["path"] = os.path.join(_scratch_dir(), f"input.{args.format}")
    atheris.Setup([argv[0], *libfuzzer_argv], test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)

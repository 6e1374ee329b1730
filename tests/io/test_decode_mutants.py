"""Mutation test of the decode rule: a bounded sample of damaged files in six formats.

Each mutant of a small valid WAV, FLAC, Ogg/Vorbis, Ogg/Opus, MP3 or M4A/AAC
file (bit flips, a replaced byte, a zeroed span, a truncation, a zeroed or
0xFF header span; seeded) must either raise ``AudioReadError`` naming the
file, or decode to exactly the frames its header promises, finite, on every
kind of read (whole, start, middle, end, a dataset excerpt), with
``probe().frames`` agreeing; and it must not read as a wrong file: shorter
than the original, shifted, or (in a format whose audio is checksummed)
different. See ``fuzz/decode_rule.py`` for the checks. The full run of
>= 3,000 mutants is ``fuzz/mutation_run.py``; its last result is in
docs/decoding.md.
"""

from __future__ import annotations

import collections
import sys

import numpy as np
import pytest

from audiotree.io import AudioFile
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "fuzz"))
from decode_rule import FORMATS, RuleViolation, check_bytes, classify, is_wrong, mutate, seed_bytes  # noqa: E402

MUTANTS_PER_FORMAT = 100  # 600 in all, about 1 s per format; fuzz/mutation_run.py runs 600 per format


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_mutant_is_refused_or_decodes_to_its_promise(fmt, tmp_path):
    if fmt == "m4a":
        pytest.importorskip("av")
    seeds = [seed_bytes(fmt, channels=1, seed=0), seed_bytes(fmt, channels=2, seed=1)]
    originals = []
    for seed in seeds:  # the originals themselves pass
        assert check_bytes(seed, fmt, str(tmp_path), expect_audio=True) == "accepted"
        with AudioFile(str(tmp_path / f"input.{fmt}")) as f:
            originals.append(f.read_all())
    rng = np.random.default_rng([29, FORMATS.index(fmt)])
    outcomes: collections.Counter[str] = collections.Counter()
    wrong: list[str] = []
    for i in range(MUTANTS_PER_FORMAT):
        mutant = mutate(seeds[i % 2], rng)
        try:
            outcome = classify(mutant, fmt, str(tmp_path), originals[i % 2])
        except RuleViolation as exc:
            outcome = f"rule broken: {exc}"
        outcomes[outcome] += 1
        if outcome.startswith("rule broken") or is_wrong(fmt, outcome):
            wrong.append(f"mutant {i}: {outcome}")
    assert not wrong, f"{len(wrong)} of {MUTANTS_PER_FORMAT} {fmt} mutants read wrong:\n" + "\n".join(wrong[:10])
    # The mutants exercise both sides of the rule: some are refused, some survive intact.
    assert outcomes["refused"] + outcomes["partial"] > 0 and outcomes["exact"] > 0, outcomes

"""Mutation test of the decode rule: 2,000 damaged files per format.

Each mutant of a small valid WAV, FLAC, Ogg/Vorbis or MP3 file (bit flips,
truncation at a random point, a zeroed or 0xFF span in the header; seeded)
must either raise ``AudioReadError`` naming the file, or decode to exactly
the frames its header promises, finite, on every kind of read (whole, start,
middle, end, a dataset excerpt), with ``probe().frames`` agreeing. See
``fuzz/decode_rule.py`` for the checks; the fuzz harness uses the same ones.
"""

from __future__ import annotations

import collections
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "fuzz"))
from decode_rule import FORMATS, RuleViolation, check_bytes, mutate, seed_bytes  # noqa: E402

MUTANTS_PER_FORMAT = 2000


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_mutant_is_refused_or_decodes_to_its_promise(fmt, tmp_path):
    seeds = [seed_bytes(fmt, channels=1, seed=0), seed_bytes(fmt, channels=2, seed=1)]
    for seed in seeds:  # the originals themselves pass
        assert check_bytes(seed, fmt, str(tmp_path), expect_audio=True) == "accepted"
    rng = np.random.default_rng([FORMATS.index(fmt), 11])
    outcomes: collections.Counter[str] = collections.Counter()
    violations: list[str] = []
    for i in range(MUTANTS_PER_FORMAT):
        mutant = mutate(seeds[i % 2], rng)
        try:
            outcomes[check_bytes(mutant, fmt, str(tmp_path), expect_audio=True)] += 1
        except RuleViolation as exc:
            violations.append(f"mutant {i}: {exc}")
    assert not violations, f"{len(violations)} of {MUTANTS_PER_FORMAT} {fmt} mutants broke the rule:\n" + "\n".join(
        violations[:10]
    )
    # The mutants exercise both sides of the rule: some are refused, some survive intact.
    assert outcomes["refused"] + outcomes["partial"] > 0 and outcomes["accepted"] > 0, outcomes

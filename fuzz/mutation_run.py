"""The full mutation test of the decode layer: thousands of damaged files over six formats.

Each mutant of a small valid WAV, FLAC, Ogg/Vorbis, Ogg/Opus, MP3 or M4A/AAC
file (bit flips, a replaced byte, a zeroed span anywhere, a truncation, a
zeroed or 0xFF header span; seeded) must keep the decode rule (see
``decode_rule.py``) and is then compared with its seed's audio: see
``decode_rule.classify`` for the outcomes. A definite wrong read (``shorter``,
``shifted``, or ``differs`` in a checksummed format) fails the run.

Usage::

    python fuzz/mutation_run.py --per-format 600            # 3,600 mutants
    python fuzz/mutation_run.py --per-format 600 --keep DIR  # also write the wrong/suspect mutants to DIR

Prints a table of outcomes per format and exits 1 if any mutant was a wrong
read or broke the rule. The result of the last full run is recorded in
docs/decoding.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from decode_rule import FORMATS, SUSPECT, RuleViolation, classify, is_wrong, mutate, seed_bytes  # noqa: E402


def originals(fmt: str, directory: str) -> list[tuple[bytes, np.ndarray]]:
    """The two seeds of ``fmt`` (mono and stereo) with their decoded audio."""
    from audiotree.io import AudioFile

    out = []
    for channels in (1, 2):
        data = seed_bytes(fmt, channels=channels, seed=channels - 1)
        path = os.path.join(directory, f"seed.{fmt}")
        with open(path, "wb") as fh:
            fh.write(data)
        with AudioFile(path) as f:
            out.append((data, f.read_all()))
    return out


def run(formats: tuple[str, ...], per_format: int, seed: int, keep: str | None) -> dict:
    """Runs ``per_format`` mutants of each format; returns {format: {outcome: count}} and the findings."""
    table: dict[str, collections.Counter] = {}
    findings: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in formats:
            seeds = originals(fmt, tmp)
            rng = np.random.default_rng([seed, FORMATS.index(fmt)])
            counts: collections.Counter = collections.Counter()
            for i in range(per_format):
                data, audio = seeds[i % 2]
                mutant = mutate(data, rng)
                try:
                    outcome = classify(mutant, fmt, tmp, audio)
                except RuleViolation as exc:
                    outcome = "rule-broken"
                    findings.append({"format": fmt, "mutant": i, "outcome": outcome, "detail": str(exc)})
                counts[outcome] += 1
                wrong = outcome == "rule-broken" or is_wrong(fmt, outcome)
                if wrong and outcome != "rule-broken":
                    findings.append({"format": fmt, "mutant": i, "outcome": outcome})
                if keep and (wrong or outcome in SUSPECT):
                    os.makedirs(keep, exist_ok=True)
                    with open(os.path.join(keep, f"{fmt}-{i:05d}-{outcome}.{fmt}"), "wb") as fh:
                        fh.write(mutant)
            table[fmt] = counts
    return {"table": {k: dict(v) for k, v in table.items()}, "findings": findings}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-format", type=int, default=600, help="mutants per format (default 600: 3,600 in all)")
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated formats")
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--keep", help="folder for the wrong and suspect mutants")
    parser.add_argument("--json", help="write the result table here")
    args = parser.parse_args(argv)
    formats = tuple(f for f in args.formats.split(",") if f)
    start = time.perf_counter()
    result = run(formats, args.per_format, args.seed, args.keep)
    seconds = time.perf_counter() - start
    outcomes = sorted({o for counts in result["table"].values() for o in counts})
    print(f"{'format':8}" + "".join(f"{o:>12}" for o in outcomes))
    for fmt, counts in result["table"].items():
        print(f"{fmt:8}" + "".join(f"{counts.get(o, 0):>12}" for o in outcomes))
    total = sum(sum(c.values()) for c in result["table"].values())
    print(f"{total} mutants in {seconds:.0f} s; {len(result['findings'])} wrong reads or rule breaks")
    for finding in result["findings"][:20]:
        print("  ", finding)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({**result, "per_format": args.per_format, "seed": args.seed, "seconds": round(seconds)}, fh, indent=1)
    return 1 if result["findings"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

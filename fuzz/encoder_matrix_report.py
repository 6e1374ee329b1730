"""The encoder matrix as a table: how audiotree reads valid files from real encoders.

Builds every case of ``tests/encoder_matrix.py`` (the files the test
``tests/io/test_encoder_matrix.py`` reads), reads each the same three ways
(whole, two excerpts, a dataset item) and prints, as Markdown, the table of
docs/decoding.md "Valid files from real encoders": per encoder and format,
how many files read right, were refused, or were read wrong; then the
refusals by reason, and every case that is not read right.

Usage::

    python fuzz/encoder_matrix_report.py            # the tables
    python fuzz/encoder_matrix_report.py --cases    # also one line per case not read right
    python fuzz/encoder_matrix_report.py --jobs 2   # encoders run 2 at a time (default 4)
    python fuzz/encoder_matrix_report.py --only mp3-ffmpeg   # the cases whose id starts with mp3-ffmpeg

Exits 1 when a valid file is read wrong (never acceptable), 0 otherwise
(refusals are counted, not failed: the test's KNOWN_FAILURES tracks them).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import encoder_matrix as em  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4, help="encoders run at once")
    parser.add_argument("--cases", action="store_true", help="list every case not read right")
    parser.add_argument("--only", default="", metavar="PREFIX", help="only the cases whose id starts with PREFIX")
    args = parser.parse_args(argv)
    cases = [c for c in em.CASES if c.case_id.startswith(args.only)]
    if not cases:
        parser.error(f"no case id starts with {args.only!r}")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="encoder-matrix-") as tmp:
        built = em.build(os.path.join(tmp, "files"), cases, jobs=args.jobs)
        build_seconds = time.monotonic() - started
        dataset = em.matrix_dataset(os.path.join(tmp, "files"))
        results = {}
        for case_id, b in built.items():
            results[case_id] = ("not built", b.error, None) if b.error else em.evaluate(b, dataset)
    rows: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    reasons: collections.Counter = collections.Counter()
    for case_id, (outcome, _, reason) in results.items():
        case = built[case_id].case
        rows[(case.encoder, case.format)][outcome] += 1
        if outcome == "refused":
            reasons[reason or "(no reason)"] += 1
    totals = collections.Counter(outcome for outcome, _, _ in results.values())
    encoders = len({c.encoder for c in cases})
    print(f"{len(results)} files from {encoders} encoder{'s' if encoders != 1 else ''} "
          f"(built in {build_seconds:.0f} s): {totals['right']} read right, {totals['refused']} refused, "
          f"{totals['wrong']} read wrong" + (f", {totals['not built']} not built" if totals["not built"] else ""))
    print()
    print("| encoder | format | files | read right | refused | wrong |")
    print("|---|---|---:|---:|---:|---:|")
    for (encoder, fmt), counts in sorted(rows.items()):
        print(f"| {encoder} | {fmt} | {sum(counts.values())} | {counts['right']} | {counts['refused']} | "
              f"{counts['wrong']} |")
    print(f"| **all** | | **{len(results)}** | **{totals['right']}** | **{totals['refused']}** | "
          f"**{totals['wrong']}** |")
    print()
    print("Valid files refused, by reason:")
    print()
    print("| reason | files |")
    print("|---|---:|")
    for reason, count in reasons.most_common():
        print(f"| {reason} | {count} |")
    if not reasons:
        print("| (none) | 0 |")
    if args.cases:
        print()
        for case_id, (outcome, detail, reason) in results.items():
            if outcome != "right":
                print(f"{case_id}: {outcome}{f' ({reason})' if reason else ''}: {' '.join(str(detail).split())}")
    return 1 if totals["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())

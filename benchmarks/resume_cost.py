"""The cost of a resume (issue 40): first batch after ``set_state`` vs first batch of a fresh run.

An endless balanced mix of 3 s excerpts at 16 kHz, batches of 16 made in the
workers (``to_iter_dataset().batch(16).mp_prefetch(W)``). A checkpoint is taken
after 6 batches with 2 workers. For each shape the run resumes with (same
shape, fewer workers, more workers, none), the time from ``iter()`` to the
first batch is measured for a fresh run of that shape and for the resumed run
(``iter()``, ``set_state(checkpoint)``, ``next``); medians over ``--repeats``.
The goal: resumed ≤ 2× fresh. Neither includes building the dataset, which is
the same for both.

    python benchmarks/resume_cost.py [--repeats 3] [--corpus-dir DIR] [--write]

``--write`` replaces the ``resume-cost`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

BATCH, WORKERS_BEFORE, BATCHES_BEFORE = 16, 2, 6


def build(folders: dict):
    from audiotree.sources import create_balanced_audio_dataset

    return create_balanced_audio_dataset({g: [str(p)] for g, p in folders.items()}, duration=3.0, sample_rate=16000,
                                         shuffle_seed=1)


def pipeline(ds, workers: int):
    import grain

    it = ds.to_iter_dataset().batch(BATCH)
    return it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers)) if workers else it


def first_batch(ds, workers: int, state: dict | None) -> float:
    start = time.perf_counter()
    it = iter(pipeline(ds, workers))
    if state is not None:
        it.set_state(state)
    next(it)
    elapsed = time.perf_counter() - start
    it.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--corpus-dir", type=Path, default=None)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    from audiotree.synth import CorpusSpec, write_corpus

    root = args.corpus_dir or Path(tempfile.mkdtemp(prefix="resume-cost-"))
    folders = write_corpus(root, CorpusSpec(files_per_group=8, min_seconds=4.0, max_seconds=20.0, seed=3),
                           groups=("speech", "music"))
    ds = build(folders)
    it = iter(pipeline(ds, WORKERS_BEFORE))
    for _ in range(BATCHES_BEFORE):
        next(it)
    checkpoint = json.loads(json.dumps(it.get_state()))
    it.close()

    rows = []
    for workers in (2, 1, 3, 0):
        fresh = statistics.median(first_batch(ds, workers, None) for _ in range(args.repeats))
        resumed = statistics.median(first_batch(ds, workers, checkpoint) for _ in range(args.repeats))
        rows.append((workers, fresh, resumed))
    lines = [
        f"Resume cost: first batch (16 x 3 s @ 16 kHz, batched in the workers) after `set_state` of a checkpoint "
        f"taken with {WORKERS_BEFORE} workers after {BATCHES_BEFORE} batches, vs a fresh run of the same shape; "
        f"medians of {args.repeats}. Goal: resumed ≤ 2× fresh.",
        "",
        "| resumed with | fresh: first batch (s) | resumed: first batch (s) | ratio |",
        "|---|---|---|---|",
    ]
    for workers, fresh, resumed in rows:
        same = " (same shape: Grain's state)" if workers == WORKERS_BEFORE else ""
        lines.append(f"| {workers} workers{same} | {fresh:.2f} | {resumed:.2f} | {resumed / fresh:.2f}× |")
    report = "\n".join(lines)
    print(report)
    if args.write:
        sys.path.insert(0, str(HERE))
        import _sections

        _sections.replace_section(HERE.parent / "BENCHMARKS.md", "resume-cost", _sections.wrap("resume-cost", report))


if __name__ == "__main__":
    main()

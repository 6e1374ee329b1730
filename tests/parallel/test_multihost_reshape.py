"""A run of two ``jax.distributed`` processes (127.0.0.1, CPU), checkpointed, resumed as one and as three.

Each host reads its ``shard_dataset`` share of one endless balanced stream with two
``mp_prefetch`` workers, the hosts unevenly far (7 and 4 items), and saves its
checkpoint. ``merge_checkpoints`` makes one checkpoint of the run; fresh processes, one
and then three, restore it and read on. The items read before and after, tagged with
their global index and a hash of the waveform, are the reference run's first items:
none twice, none skipped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import run_together
from servers import free_port

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("reshape_worker.py")


def _run(corpus, out: Path, mode: str, counts: list[int]) -> list[list]:
    port = free_port()
    run_together([[sys.executable, str(WORKER), str(port), str(i), str(len(counts)), str(corpus["speech"]),
                   str(corpus["music"]), str(out), mode, str(n)] for i, n in enumerate(counts)])
    return [json.loads((out / f"{mode}-{i}.json").read_text()) for i in range(len(counts))]


def test_two_hosts_checkpoint_resume_as_one_and_as_three(corpus, tmp_path):
    from audiotree.sources import merge_checkpoints
    from reshape_worker import tagged_stream

    first = _run(corpus, tmp_path, "first", [7, 4])
    merged = merge_checkpoints([json.loads((tmp_path / f"checkpoint-{i}.json").read_text()) for i in range(2)])
    assert merged["position"] == {"prefix": 9, "beyond": [10, 12]}
    (tmp_path / "merged.json").write_text(json.dumps(merged))
    stream = tagged_stream(str(corpus["speech"]), str(corpus["music"]))
    reference = [[i, h] for i, h in (stream[k] for k in range(26))]
    before = first[0] + first[1]
    for counts in ([15], [5, 5, 5]):
        after = [item for host in _run(corpus, tmp_path, "resume", counts) for item in host]
        union = before + after
        assert len({i for i, _ in union}) == len(union), f"an item was read twice resuming as {len(counts)}"
        assert sorted(union) == reference, f"resuming as {len(counts)} hosts"

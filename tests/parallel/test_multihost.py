"""Many hosts, for real: two processes joined by ``jax.distributed.initialize`` on 127.0.0.1 (CPU).

Each reads its share through ``ShardByJaxProcess`` (by item with ``shard_dataset``, and by
file with the builders' ``shard_options=``): the shares are disjoint and together complete, each host's stream keeps the group weights, and a per-host
checkpoint restored in fresh processes continues exactly where it was taken.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest
from helpers import run_together
from servers import free_port

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("multihost_worker.py")


def _run_hosts(corpus, out: Path, mode: str) -> list[dict]:
    port = free_port()
    run_together([[sys.executable, str(WORKER), str(port), str(i), str(corpus["speech"]), str(corpus["music"]),
                   str(out), mode] for i in range(2)])
    return [json.loads((out / f"host-{i}-{mode}.json").read_text()) for i in range(2)]


def test_two_jax_processes_read_disjoint_complete_balanced_resumable_shares(corpus, tmp_path):
    from audiotree.sources import create_audio_dataset, create_balanced_audio_dataset, find_audio_files
    from multihost_worker import digest

    first = _run_hosts(corpus, tmp_path, "first")
    assert [r["process_index"] for r in first] == [0, 1]

    # One epoch: every file read by exactly one host.
    files = sorted(str(p) for g in ("speech", "music") for p in find_audio_files(corpus[g]))
    read = [sorted(item[0] for item in r["epoch"]) for r in first]
    assert not set(read[0]) & set(read[1]) and sorted(read[0] + read[1]) == files
    assert abs(len(read[0]) - len(read[1])) <= 1

    # shard_options=ShardByJaxProcess(): each process gets its own files of every group, both groups mixed.
    for group in ("speech", "music"):
        mine = [{item[0] for item in r["by_container"] if item[1] == group} for r in first]
        assert mine[0] and mine[1] and not mine[0] & mine[1]
        assert sorted(mine[0] | mine[1]) == sorted(str(p) for p in find_audio_files(corpus[group]))
    windows = [set(r["windows"]) for r in first]
    assert not windows[0] & windows[1] and sorted(windows[0] | windows[1]) == files

    # The endless balanced stream: host h's k-th item is item h + 2k of the unsharded dataset ...
    common = dict(duration=0.25, sample_rate=8000, shuffle_seed=5)
    whole = create_balanced_audio_dataset({"speech": [str(corpus["speech"])], "music": [str(corpus["music"])]},
                                          weights={"speech": 3.0, "music": 1.0}, **common)
    for host, report in enumerate(first):
        for k in (0, 1, 2, 77, 159):
            assert report["stream"][k] == digest(whole[host + 2 * k])
        # ... and keeps the 3:1 mix on its own.
        counts = collections.Counter(item[1] for item in report["stream"])
        assert set(counts) == {"speech", "music"}
        assert abs(counts["speech"] / 160 - 0.75) < 0.08, counts
    assert not {tuple(x) for x in first[0]["stream"]} & {tuple(x) for x in first[1]["stream"]}

    # Fresh processes restore each host's own checkpoint and continue exactly.
    resumed = _run_hosts(corpus, tmp_path, "resume")
    for host in range(2):
        assert resumed[host]["after"] == first[host]["after"]
        assert first[host]["before"] == first[host]["stream"][:7]
        assert first[host]["after"] == first[host]["stream"][7:14]
    assert first[0]["after"] != first[1]["after"]
    assert len(create_audio_dataset([str(corpus["speech"]), str(corpus["music"])], num_epochs=1, **common)) == len(files)

"""One host of the ``jax.distributed`` runs in ``test_multihost_reshape.py``.

Usage: ``python reshape_worker.py PORT PROCESS_ID NUM_PROCESSES SPEECH MUSIC OUT MODE COUNT``. MODE
``first`` reads COUNT items of this host's share (2 mp_prefetch workers) and saves its checkpoint;
``resume`` restores ``OUT/merged.json`` (the hosts' checkpoints merged) and reads COUNT items (no
workers). Writes what this host read, as (global index, hash) pairs, to ``OUT/<mode>-<id>.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"


def tag(index, tree):
    import numpy as np

    digest = hashlib.sha1(np.asarray(tree.waveform).tobytes() + str(tree.filepath).encode()).hexdigest()[:12]
    return index, digest


def tagged_stream(speech: str, music: str):
    """The global stream: an endless 3:1 balanced mix, each item tagged with its global index."""
    from audiotree.sources import create_balanced_audio_dataset

    balanced = create_balanced_audio_dataset({"speech": [speech], "music": [music]}, weights={"speech": 3.0, "music": 1.0},
                                             duration=0.25, sample_rate=8000, shuffle_seed=5)
    return balanced.map_with_index(tag)


def main() -> None:
    port, process_id, processes, speech, music, out, mode, count = sys.argv[1:]
    process_id, processes, count = int(process_id), int(processes), int(count)
    import grain
    import jax

    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=processes,
                               process_id=process_id, initialization_timeout=120)
    assert (jax.process_index(), jax.process_count()) == (process_id, processes)
    from audiotree.sources import shard_dataset

    share = shard_dataset(tagged_stream(speech, music), grain.sharding.ShardByJaxProcess())
    if mode == "first":
        it = iter(share.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    else:
        it = iter(share.to_iter_dataset())
        with open(os.path.join(out, "merged.json")) as f:
            it.set_state(json.load(f))
    read = [[int(i), str(h)] for i, h in (next(it) for _ in range(count))]
    if mode == "first":
        with open(os.path.join(out, f"checkpoint-{process_id}.json"), "w") as f:
            json.dump(it.get_state(), f)
    it.close()
    with open(os.path.join(out, f"{mode}-{process_id}.json"), "w") as f:
        json.dump(read, f)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()

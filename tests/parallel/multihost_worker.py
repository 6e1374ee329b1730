"""One host of the two-process ``jax.distributed`` run in ``test_multihost.py``.

Usage: ``python multihost_worker.py PORT PROCESS_ID SPEECH MUSIC OUT MODE``; MODE is
``first`` (read, checkpoint, read on) or ``resume`` (restore the checkpoint, read).
Writes what this host read to ``OUT/host-<id>-<mode>.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from audiotree.sources import Order

os.environ["JAX_PLATFORMS"] = "cpu"


def digest(tree) -> list:
    import numpy as np

    return [tree.filepath[0], (tree.source or [""])[0], round(float(tree.offset[0]), 9),
            hashlib.sha1(np.asarray(tree.waveform).tobytes()).hexdigest()]


def main() -> None:
    port, process_id, speech, music, out, mode = sys.argv[1:]
    process_id = int(process_id)
    import grain
    import jax

    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process_id,
                               initialization_timeout=120)
    assert (jax.process_index(), jax.process_count()) == (process_id, 2)

    from audiotree.sources import (
        WindowConfig,
        create_audio_dataset,
        create_balanced_audio_dataset,
        create_windowed_audio_dataset,
        shard_dataset,
    )

    common = dict(duration=0.25, sample_rate=8000, shuffle_seed=5)
    report: dict = {"process_index": jax.process_index()}
    balanced = create_balanced_audio_dataset({"speech": [speech], "music": [music]},
                                             weights={"speech": 3.0, "music": 1.0}, **common)
    share = shard_dataset(balanced, grain.sharding.ShardByJaxProcess(drop_remainder=True))
    ckpt = os.path.join(out, f"checkpoint-host-{process_id}.json")
    if mode == "first":
        epoch = create_audio_dataset([speech, music], num_epochs=1, **common)
        mine = shard_dataset(epoch, grain.sharding.ShardByJaxProcess())
        report["epoch"] = [digest(t) for t in mine.to_iter_dataset()]
        # By container: each process reads only its own files of every group, and mixes both groups.
        by_files = create_balanced_audio_dataset({"speech": [speech], "music": [music]}, num_epochs=1,
                                                 order=Order(shard_options=grain.sharding.ShardByJaxProcess()), **common)
        report["by_container"] = [digest(by_files[k]) for k in range(len(by_files))]
        windows = create_windowed_audio_dataset([speech, music], window=WindowConfig(duration=0.25), sample_rate=8000,
                                                order=Order(shard_options=grain.sharding.ShardByJaxProcess()))
        report["windows"] = sorted({windows[k].filepath[0] for k in range(len(windows))})
        report["stream"] = [digest(share[k]) for k in range(160)]
        it = share.to_iter_dataset().__iter__()
        report["before"] = [digest(next(it)) for _ in range(7)]
        with open(ckpt, "w") as f:
            json.dump(it.get_state(), f)
        report["after"] = [digest(next(it)) for _ in range(7)]
    else:
        it = share.to_iter_dataset().__iter__()
        with open(ckpt) as f:
            it.set_state(json.load(f))
        report["after"] = [digest(next(it)) for _ in range(7)]
    with open(os.path.join(out, f"host-{process_id}-{mode}.json"), "w") as f:
        json.dump(report, f)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()

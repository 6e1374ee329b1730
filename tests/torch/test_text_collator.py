"""``TextCollator``: transcripts tokenized into padded CTC targets in real DataLoader workers (fork and spawn),
over an index imported from a NeMo manifest of sox-written audio."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from audiotree import AudioTree  # noqa: E402
from audiotree.torch import TextCollator  # noqa: E402

_SCRIPT = textwrap.dedent(
    """
    import json, os, subprocess, sys

    import numpy as np
    import torch

    from audiotree.index import import_nemo
    from audiotree.sources import BucketConfig, Corpus, batch_by_duration, create_audio_dataset
    from audiotree.torch import TextCollator, create_dataloader

    LETTERS = " abcdefghijklmnopqrstuvwxyz"
    TEXTS = ["hello world", "a", "the quick brown fox", "ctc", "padded targets", "by", "spawned workers", "ok"]


    def tokenize(text):  # module level: picklable for spawn workers
        return [LETTERS.index(c) for c in text]


    def check(batch, seen):
        texts = batch.extras["text"]
        targets, lengths = batch.extras["targets"], batch.extras["target_lengths"]
        assert targets.dtype == torch.int64 and lengths.dtype == torch.int64, (targets.dtype, lengths.dtype)
        assert targets.shape[0] == len(texts) == lengths.shape[0]
        real = batch.lengths > 0 if batch.lengths is not None else torch.ones(len(texts), dtype=torch.bool)
        for i, text in enumerate(texts):
            if not bool(real[i]):
                assert int(lengths[i]) == -1 and text == "", (text, lengths[i])
                continue
            n = int(lengths[i])
            assert targets[i, :n].tolist() == tokenize(text), (text, targets[i])
            assert (targets[i, n:] == 0).all()
            seen.append(text)


    if __name__ == "__main__":
        root = sys.argv[1]
        with open(os.path.join(root, "train.json"), "w") as f:
            for i, text in enumerate(TEXTS):
                seconds = 0.5 + 0.25 * i
                path = os.path.join(root, f"u{i}.wav")
                subprocess.run(["sox", "-n", "-r", "8000", "-b", "16", "-c", "1", path, "synth", str(seconds),
                                "sine", str(200 + 50 * i)], check=True)
                f.write(json.dumps({"audio_filepath": f"u{i}.wav", "duration": seconds, "text": text}) + "\\n")
        index = os.path.join(root, "c.parquet")
        import_nemo(os.path.join(root, "train.json"), index, executor="serial", loudness=False)
        items = create_audio_dataset(corpus=Corpus(index=index, labels=["text"]), duration=None, sample_rate=8000)
        collator = TextCollator(tokenize)
        for method in ("fork", "spawn"):
            seen = []
            loader = create_dataloader(items, batch_size=3, num_workers=2, collate_fn=collator,
                                       multiprocessing_context=method)
            for batch in loader:
                check(batch, seen)
            assert sorted(seen) == sorted(TEXTS), (method, seen)
            del loader
            # Planned batches (batch_size=None): each element is already a batch, with filler slots. In fork
            # workers only: test_varlen_torch.py runs planned batches in spawn ones, the collator's pickling is above.
            if method == "fork":
                batches = batch_by_duration(items, bucketing=BucketConfig(max_seconds=4.0, buckets=2), shuffle_seed=0,
                                            num_epochs=1)
                seen = []
                loader = create_dataloader(batches, batch_size=None, num_workers=2, collate_fn=collator,
                                           multiprocessing_context=method)
                for batch in loader:
                    check(batch, seen)
                assert sorted(seen) == sorted(TEXTS), (method, seen)
                del loader
            print(method, "OK")
    """
)


@pytest.mark.slow
def test_targets_in_fork_and_spawn_workers(tmp_path):
    from helpers import run_script

    result = run_script(_SCRIPT.replace("sys.argv[1]", repr(str(tmp_path))), tmp_path, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "fork OK" in result.stdout and "spawn OK" in result.stdout


def _items(texts, lengths=None):
    items = []
    for i, text in enumerate(texts):
        n = 4 if lengths is None else lengths[i]
        items.append(AudioTree(np.zeros((1, 1, 4), np.float32), 8000, extras={"text": [text]},
                               lengths=None if lengths is None else np.array([n], np.int32)))
    return items


def test_tokenizers_may_return_lists_arrays_or_tensors():
    for convert in (list, np.array, torch.tensor):
        collator = TextCollator(lambda s, convert=convert: convert([ord(c) - 96 for c in s]), pad_value=-5)
        batch = collator(_items(["abc", "", "z"]))
        assert batch.extras["targets"].tolist() == [[1, 2, 3], [-5, -5, -5], [26, -5, -5]]
        assert batch.extras["target_lengths"].tolist() == [3, 0, 1]


def test_a_batched_element_and_filler_slots():
    batched = AudioTree.batch(_items(["ab", ""], lengths=[4, 0]))
    batch = TextCollator(lambda s: [ord(c) - 96 for c in s])(batched)
    assert batch.extras["targets"].tolist() == [[1, 2], [0, 0]]
    assert batch.extras["target_lengths"].tolist() == [2, -1]  # a filler, like every integer label of a filler


def test_mistakes_are_named():
    with pytest.raises(ValueError, match=r"no extras\['text'\].*labels=\['text'\]"):
        TextCollator(list)([AudioTree(np.zeros((1, 1, 4), np.float32), 8000)])
    with pytest.raises(TypeError, match="1-D sequence of integer token ids"):
        TextCollator(lambda s: [0.5])(_items(["a"]))
    with pytest.raises(TypeError, match="tokenize must be a function"):
        TextCollator("chars")
    assert TextCollator(list)([None, None]) is None

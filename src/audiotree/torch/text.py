"""Transcripts to padded token targets in the DataLoader: :class:`TextCollator`.

A dataset over an index with a text label (``Corpus(labels=["text"])``) gives
each batch its transcripts as ``batch.extras["text"]``, a list of strings.
:class:`TextCollator` is a ``collate_fn`` that batches as :func:`collate` does
(or converts an already batched element, ``batch_size=None``), then tokenizes
each transcript with the user's function and adds two tensors to ``extras``:
``targets`` ``(B, S)`` int64, padded with ``pad_value`` past each item's
length, and ``target_lengths`` ``(B,)`` int64: what ``torch.nn.CTCLoss`` takes
(padded targets, their lengths). Tokenizing runs in the DataLoader workers.

Filler slots of :func:`~audiotree.sources.batch_by_duration` batches (no
samples, ``lengths == 0``) get ``target_lengths == -1`` and a row of
``pad_value``, as every integer label of a filler is ``-1``: keep the real
items with ``batch.lengths > 0``.

>>> import numpy as np
>>> from audiotree import AudioTree
>>> items = [AudioTree(np.zeros((1, 1, 4), np.float32), 8000, extras={"text": [t]}) for t in ("ab", "b")]
>>> batch = TextCollator(lambda s: [" ab".index(c) for c in s])(items)
>>> batch.extras["targets"].tolist(), batch.extras["target_lengths"].tolist()
([[1, 2], [2, 0]], [2, 1])
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from audiotree.core import AudioTree
from audiotree.torch.tensors import collate, to_torch
from audiotree.validation import is_int

__all__ = ["TextCollator"]


class TextCollator:
    """A DataLoader ``collate_fn`` that adds padded token targets for the batch's transcripts.

    Args:
      tokenize: ``str -> sequence of ints`` (a list, a NumPy array or a 1-D
        tensor): the transcript's token ids. Must be picklable to reach
        ``spawn`` workers (a module-level function, or an object with
        ``__call__``).
      text: the ``extras`` key of the transcripts (a text label of the index).
      targets, target_lengths: the ``extras`` keys the tensors are added under.
      pad_value: the id filling targets past each item's length (CTC ignores
        it; 0 is often the blank).

    Called with a list of items (``batch_size=B``), it batches them as
    :func:`~audiotree.torch.collate` does (``None`` items dropped; ``None`` if
    none is left); called with one batched ``AudioTree`` (``batch_size=None``
    over planned batches), it converts it as :func:`~audiotree.torch.to_torch`.
    """

    def __init__(self, tokenize: Callable[[str], Sequence[int]], *, text: str = "text", targets: str = "targets",
                 target_lengths: str = "target_lengths", pad_value: int = 0) -> None:
        if not callable(tokenize):
            raise TypeError(f"tokenize must be a function str -> token ids, got {type(tokenize).__name__}.")
        for name, value in (("text", text), ("targets", targets), ("target_lengths", target_lengths)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be an extras key (a non-empty string), got {value!r}.")
        if not is_int(pad_value):
            raise TypeError(f"pad_value must be an int, got {pad_value!r}.")
        self.tokenize, self.text, self.targets, self.target_lengths = tokenize, text, targets, target_lengths
        self.pad_value = int(pad_value)

    def __repr__(self) -> str:
        return f"TextCollator({self.tokenize!r}, text={self.text!r}, pad_value={self.pad_value})"

    def __call__(self, value: Any) -> Any:
        batch = to_torch(value) if isinstance(value, AudioTree) else collate(value)
        if batch is None:
            return None
        texts = batch.extras.get(self.text)
        if texts is None:
            raise ValueError(f"The batch has no extras[{self.text!r}] to tokenize (its extras: "
                             f"{sorted(batch.extras)}); read the transcripts with Corpus(index=..., "
                             f"labels=[{self.text!r}]).")
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError(f"extras[{self.text!r}] must hold one string per item (a text label), got "
                            f"{type(texts).__name__}.")
        ids = [self._ids(t) for t in texts]
        filler = np.zeros(len(ids), dtype=bool)
        if batch.lengths is not None:
            filler = np.asarray(torch.as_tensor(batch.lengths).reshape(-1).cpu()) == 0
        width = max((len(x) for x in ids), default=0)
        padded = torch.full((len(ids), width), self.pad_value, dtype=torch.int64)
        lengths = torch.empty(len(ids), dtype=torch.int64)
        for i, x in enumerate(ids):
            if filler[i]:
                lengths[i] = -1
                continue
            padded[i, : len(x)] = torch.from_numpy(x)
            lengths[i] = len(x)
        return batch.replace_extras(**{self.targets: padded, self.target_lengths: lengths})

    def _ids(self, text: str) -> np.ndarray:
        raw = self.tokenize(text)
        if isinstance(raw, torch.Tensor):
            raw = raw.detach().cpu().numpy()
        ids = np.asarray(raw)
        if ids.size == 0:
            return np.zeros(0, dtype=np.int64)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise TypeError(f"tokenize({text[:40]!r}) returned {ids.dtype} of shape {ids.shape}; it must return a "
                            "1-D sequence of integer token ids.")
        return ids.astype(np.int64, copy=False)

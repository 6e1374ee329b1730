"""The option objects of the dataset builders: what an item is, in what order items come, and from which corpus.

Each builder takes a handful of arguments of its own (``sources``,
``duration``, ``excerpt``, ...) and three option objects, so that a word means
one thing in every builder (``tests/test_words.py`` checks it):

* :class:`Output`: what every item looks like (rate, channels, padding, loudness, source name);
* :class:`Order`: in which order items come and which share a host reads (shuffle, seeds, sharding);
* :class:`Corpus`: where the files come from and which are kept (an index and its filters, file
  policies, storage).

The seed page's words stay accepted loose, as shorthands: ``sample_rate`` (for
``Output``), ``shuffle``, ``shuffle_seed`` and ``excerpt_seed`` (for
``Order``). Every other option of earlier releases is refused with a
``TypeError`` naming its new spelling.

All three are frozen dataclasses: hashable settings when their values are
(``storage_options`` is a mapping), picklable, compared by value.

>>> Output(sample_rate=16_000, mono=False).channels is None
True
>>> Corpus(index="corpus.parquet", max_duration=20.0).on_stale
'raise'
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from audiotree.validation import check_pad_mode

__all__ = ["Output", "Order", "Corpus", "gather_options", "SHORTHANDS"]


@dataclasses.dataclass(frozen=True)
class Output:
    """What every item is.

    Args:
      sample_rate: the items' rate in Hz (soxr resampling of what is read only).
      mono: average channels; ``False`` keeps them and checks that every file
        has ``channels`` (default: the first file's count).
      channels: the channel count every file must have when ``mono=False``.
      pad_mode: ``np.pad`` mode for files shorter than ``duration``; ``None``
        leaves them short (``AudioTree.batch`` then pads with zeros and fills
        ``lengths``).
      measure_lufs: give every item ``lufs`` ``(1,)`` and ``lufs_windows``
        (0.4 s windows), measured on the item as returned, whatever the
        strategy (one K-weighting pass per item). By default only
        ``strategy="loudest"`` items carry loudness (it meters to choose).
      source: a name recorded in every item's ``source`` (the balanced
        builder names items by group instead).

    >>> Output(sample_rate=48_000).sample_rate
    48000
    """

    sample_rate: int = 44_100
    mono: bool = True
    channels: int | None = None
    pad_mode: str | None = "constant"
    measure_lufs: bool = False
    source: str | None = None

    def __post_init__(self) -> None:
        check_pad_mode(self.pad_mode)


@dataclasses.dataclass(frozen=True)
class Order:
    """The order of the items, and this host's share of them.

    Args:
      shuffle: shuffle the file order (a new permutation every epoch).
      shuffle_seed: the seed of that order (and of the balanced mix).
      excerpt_seed: the seed of the excerpts' offsets (default: derived from
        ``shuffle_seed``). A fixed pair of seeds gives the same items on any
        number of workers and threads.
      shard_options: a ``grain.sharding.ShardOptions`` (e.g.
        ``ShardByJaxProcess()``): this host's share of the *containers*. Whole
        tar shards, Parquet row groups and plain files are dealt round robin,
        so a host opens only its 1/n of them; the share is then shuffled and
        read as usual. For item sharding (every host samples the whole
        corpus) apply :func:`~audiotree.sources.shard_dataset` instead;
        docs/containers.md compares the two.

    >>> Order(shuffle=False).shuffle_seed
    0
    """

    shuffle: bool = True
    shuffle_seed: int = 0
    excerpt_seed: int | None = None
    shard_options: Any = None


@dataclasses.dataclass(frozen=True)
class Corpus:
    """Where the files come from, which are kept, and what to do with bad ones.

    Args:
      index: a corpus index (``audiotree index``; a path or ``CorpusIndex``)
        instead of ``sources``: its readable rows are the files, and start-up
        reads the index and nothing else. Items' ``source`` is the row's group.
      group_by: the balanced builder only: the index column (``"group"`` or a
        label) whose values are the groups.
      labels: label columns carried into every item's ``extras``
        (``(1,)`` arrays: int32 category ids, see the index's vocabulary, or
        numbers as stored; a text label as a one-string list): an index's
        labels, or without an index the sidecars of tar members and the
        columns of Parquet files. ``{"text": ["transcript", "txt"]}`` makes
        one label of several columns (the first with a value, per row; one
        vocabulary). ``"id"`` is a segment index's utterance id. Every item
        also carries its key in ``extras["key"]`` (see
        :mod:`audiotree.sources.item_labels`).
      min_duration, max_duration: keep index rows within these seconds (a
        filter: a longer file is left out, never cropped).
      where: keep the index rows where this expression over index columns
        holds, e.g. ``"bandwidth_hz >= 16000 and clip_share < 1e-4"``:
        comparisons of columns (quality columns, ``sample_rate``,
        ``duration``, ``channels``, ``size``, numeric labels) and numbers,
        joined by ``and``/``or``/``not`` (:mod:`audiotree.index.where`; a
        missing value compares false). Applied once, before any worker starts.
      weight_by: draw the index rows of each group in proportion to a
        numeric column (``"snr_db"``) or to a function of the columns
        (``lambda c: c["snr_db"].clip(0, 40)``): each row fills its share of
        the group's items, deterministically (:mod:`audiotree.index.weights`).
      on_stale: a file whose size or mtime differs from its index row:
        ``"raise"`` (naming the file and the refresh command), ``"reprobe"``
        (read it as it is now), ``"skip"`` the item, or ``"trust"`` (no check
        and no request at all; a changed file is then read as if it matched
        its row). The check is one ``stat`` per item for a local file, and one
        metadata request per remote file per process.
      on_read_error: an unreadable file: ``"raise"`` an ``AudioReadError``
        naming it, ``"warn"`` and drop the item, or ``"skip"`` it silently.
        Dropped items are removed by ``to_iter_dataset``; random access
        returns ``None`` for them.
      extensions: file extensions to discover (default: every decodable format).
      audio_column: the audio column of Parquet sources (default ``"audio"``).
        Tar shards (``.tar``, brace patterns such as
        ``train-{000000..000099}.tar``) and Parquet files with embedded audio
        are read in place: every member or row is an item.
      storage_options: fsspec filesystem options for ``s3://``, ``gs://``,
        ``https://`` ... sources (endpoint, credentials, ``anon``; see
        ``docs/storage.md``), used while building and around every read, in
        every worker process. Without it fsspec's own configuration applies;
        secrets never appear in messages.

    >>> Corpus(labels=["speaker"]).labels
    ('speaker',)
    >>> Corpus(labels={"text": ["transcript", "txt"]}).labels
    {'text': ('transcript', 'txt')}
    """

    index: Any = None
    group_by: str | None = None
    labels: Sequence[str] | None = None
    min_duration: float | None = None
    max_duration: float | None = None
    on_stale: str = "raise"
    on_read_error: str = "raise"
    extensions: Sequence[str] | None = None
    audio_column: str | None = None
    storage_options: Mapping[str, Any] | None = None
    where: str | None = None
    weight_by: Any = None

    def __post_init__(self) -> None:
        if isinstance(self.labels, Mapping):  # {label: [aliases]}: one label made of several columns
            from audiotree.sources.item_labels import label_request

            request = label_request(self.labels)
            object.__setattr__(self, "labels", {name: columns[1:] for name, columns in request})
        for name in ("labels", "extensions"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, (str, Mapping)):
                object.__setattr__(self, name, tuple(value))


#: The seed page's loose words, and the option object each one sets.
SHORTHANDS = {"sample_rate": "output", "shuffle": "order", "shuffle_seed": "order", "excerpt_seed": "order"}
_CLASSES = {"output": Output, "order": Order, "corpus": Corpus}
_FIELDS = {name: [f.name for f in dataclasses.fields(cls)] for name, cls in _CLASSES.items()}


def _moved(word: str) -> str | None:
    """The new spelling of a loose option of earlier releases, or ``None``."""
    for name, cls in _CLASSES.items():
        if word in _FIELDS[name]:
            return f"{name}={cls.__name__}({word}=...)"
    if word == "datasets":
        return "sources={group: dataset} (a ready MapDataset is a group like a folder)"
    return None


def gather_options(builder: str, *, output: Any, order: Any, corpus: Any, shorthands: Mapping[str, Any],
                   unused: Sequence[str] = ()) -> dict[str, Any]:
    """A builder's option objects, with defaults for the missing ones and its shorthands applied.

    Returns ``{"output": Output, "order": Order, "corpus": Corpus}``. Raises
    ``TypeError`` for an object of the wrong type, for a loose option of an
    earlier release (naming its new spelling) or an unknown keyword, and
    ``ValueError`` for a shorthand that contradicts its object, or for a field
    named in ``unused`` (one ``builder`` does not use) set away from its default.
    """
    objects = {"output": output, "order": order, "corpus": corpus}
    for name, value in objects.items():
        cls = _CLASSES[name]
        if value is None:
            objects[name] = cls()
        elif not isinstance(value, cls):
            raise TypeError(f"{builder}(): {name} must be an audiotree.{cls.__name__}, got {type(value).__name__}.")
    for word, value in shorthands.items():
        target = SHORTHANDS.get(word)
        if target is None:
            new = _moved(word)
            if new is None:
                raise TypeError(f"{builder}() got an unexpected keyword argument {word!r}.")
            raise TypeError(f"{builder}() takes {new} now, not {word}=.")
        given = objects[target]
        default = getattr(_CLASSES[target](), word)
        if getattr(given, word) != default and getattr(given, word) != value:
            raise ValueError(f"{builder}(): {word}={value!r} contradicts {target}.{word}="
                             f"{getattr(given, word)!r}; set it in one place.")
        objects[target] = dataclasses.replace(given, **{word: value})
    for name, value in objects.items():
        cls = _CLASSES[name]
        for field in _FIELDS[name]:
            if field in unused and getattr(value, field) != getattr(cls(), field):
                raise ValueError(f"{builder}() does not use {cls.__name__}.{field} "
                                 f"(got {getattr(value, field)!r}); leave it at its default.")
    return objects

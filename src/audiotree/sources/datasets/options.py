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

All three, and :class:`WindowConfig` (the windows of windowed sampling), are
frozen dataclasses that check themselves when constructed, as Grain's
``ReadOptions`` does: a bad value is refused where it is written, naming the
field. What depends on several options at once (a window with an excerpt, an
index filter without an index, whole files with a duration) is checked once
by :class:`BuildRequest`, before a builder reads anything. They are hashable
settings when their values are (``storage_options`` is a mapping), picklable,
compared by value.

>>> Output(sample_rate=16_000, mono=False).channels is None
True
>>> Corpus(index="corpus.parquet", max_duration=20.0).on_stale
'raise'
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from audiotree.excerpts.config import ExcerptConfig
from audiotree.io.read_ahead import ReadAhead
from audiotree.io.read_errors import check_on_read_error
from audiotree.seeds import check_seed
from audiotree.validation import check_duration, check_pad_mode, check_positive, check_sample_rate, is_int, is_real

__all__ = ["Output", "Order", "Corpus", "WindowConfig", "BuildRequest", "SHORTHANDS"]


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
        object.__setattr__(self, "sample_rate", check_sample_rate(self.sample_rate))
        check_pad_mode(self.pad_mode)
        if not isinstance(self.measure_lufs, bool):
            raise TypeError(f"measure_lufs must be True or False, got {self.measure_lufs!r}.")


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "shuffle_seed", check_seed("shuffle_seed", self.shuffle_seed))
        if self.excerpt_seed is not None:
            object.__setattr__(self, "excerpt_seed", check_seed("excerpt_seed", self.excerpt_seed))
        if self.shard_options is not None:
            from audiotree.discovery.sharding import check_shard_options

            check_shard_options(self.shard_options)


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
      read_ahead: how a process reads the byte ranges of its next items ahead
        (:class:`~audiotree.io.read_ahead.ReadAhead`: items, ``cache_limit``,
        concurrency, a request budget), for a remote corpus read through
        ``index=``; ``None`` reads each item only when it is asked for. Items
        are identical either way (see ``docs/storage.md``).
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
    read_ahead: ReadAhead | None = ReadAhead()

    def __post_init__(self) -> None:
        from audiotree.index.reader import check_on_stale

        if self.read_ahead is not None and not isinstance(self.read_ahead, ReadAhead):
            raise TypeError("read_ahead must be a ReadAhead (audiotree.sources.ReadAhead) or None, got "
                            f"{type(self.read_ahead).__name__}.")

        check_on_stale(self.on_stale)
        check_on_read_error(self.on_read_error)
        options = self.storage_options
        if options is not None:
            if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
                raise TypeError("storage_options must be a dict of fsspec filesystem options, got "
                                f"{type(options).__name__}.")
            object.__setattr__(self, "storage_options", dict(options))
        if isinstance(self.labels, Mapping):  # {label: [aliases]}: one label made of several columns
            from audiotree.sources.item_labels import label_request

            request = label_request(self.labels)
            object.__setattr__(self, "labels", {name: columns[1:] for name, columns in request})
        for name in ("labels", "extensions"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, (str, Mapping)):
                object.__setattr__(self, name, tuple(value))




def _check_alpha(alpha: Any) -> float:
    if not is_real(alpha) or not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"alpha must be in [0, 1] (0: one slot per file, 1: one per window), got {alpha!r}.")
    return float(alpha)


@dataclasses.dataclass(frozen=True)
class WindowConfig:
    """Windowed sampling knobs for ``create_windowed_audio_dataset(window=...)`` and
    ``create_balanced_audio_dataset(window=...)``.

    See :func:`~audiotree.sources.create_windowed_audio_dataset` for the meaning of each field.
    Group weights and ``alpha`` compose: a group's share is its weight, and
    within the group files are weighted by length according to ``alpha``.

    >>> WindowConfig(duration=2.0, hop=1.0).alpha
    1.0
    """

    duration: float = 1.0
    hop: float | None = None
    alpha: float = 1.0
    jitter: bool = True
    lufs_cache: Any = None
    lufs_cutoff: float = -40.0
    lufs_window_sec: float | None = None
    allow_text_crops: bool = False

    def __post_init__(self) -> None:
        check_positive(self.duration, "WindowConfig.duration")
        check_positive(self.hop, "WindowConfig.hop", optional=True)
        _check_alpha(self.alpha)
        if not is_real(self.lufs_cutoff):
            raise ValueError(f"WindowConfig.lufs_cutoff must be a number (LUFS), got {self.lufs_cutoff!r}.")
        check_positive(self.lufs_window_sec, "WindowConfig.lufs_window_sec", optional=True)
        if not isinstance(self.allow_text_crops, bool):
            raise ValueError(f"WindowConfig.allow_text_crops must be True or False, got {self.allow_text_crops!r}.")


#: The seed page's loose words, and the option object each one sets.
SHORTHANDS = {"sample_rate": "output", "shuffle": "order", "shuffle_seed": "order", "excerpt_seed": "order"}
_CLASSES = {"output": Output, "order": Order, "corpus": Corpus}
_FIELDS = {name: [f.name for f in dataclasses.fields(cls)] for name, cls in _CLASSES.items()}
#: The settings a WindowConfig carries (passed loose, each is refused naming its WindowConfig spelling).
_WINDOW_KNOBS = tuple(field.name for field in dataclasses.fields(WindowConfig))
#: Fields of the option objects each builder does not use (set away from their default: refused).
_UNUSED = {
    "create_audio_dataset": ("group_by",),
    "create_balanced_audio_dataset": ("source",),
    "create_windowed_audio_dataset": ("channels", "on_read_error", "group_by"),
}
#: Corpus filters that select index rows, so need an index.
_INDEX_FILTERS = ("labels", "min_duration", "max_duration", "where", "weight_by")


def _moved(word: str) -> str | None:
    """The new spelling of a loose option of earlier releases, or ``None``."""
    for name, cls in _CLASSES.items():
        if word in _FIELDS[name]:
            return f"{name}={cls.__name__}({word}=...)"
    if word == "datasets":
        return "sources={group: dataset} (a ready MapDataset is a group like a folder)"
    return None


def _check_num_epochs(num_epochs: Any) -> None:
    if num_epochs is None:
        return
    if not is_int(num_epochs):
        raise TypeError(f"num_epochs must be an int or None (None repeats forever), got {num_epochs!r}.")
    if num_epochs < 1:
        raise ValueError(f"num_epochs must be >= 1 (or None to repeat forever), got {num_epochs}.")


def whole_files(duration: float | None, excerpt: ExcerptConfig) -> tuple[float | None, ExcerptConfig]:
    """``duration=None`` means whole files; ``strategy="full"`` takes no duration."""
    if excerpt.strategy == "full":
        if duration is not None and duration != 1.0:
            raise ValueError(
                f"strategy='full' reads whole files, so duration={duration!r} does not apply; pass duration=None "
                "and cap long files with ExcerptConfig(strategy='full', crop_to=...)."
            )
        return None, excerpt
    if duration is None:
        if excerpt.strategy == "loudest":
            raise ValueError("strategy='loudest' needs duration= (the excerpt length); use strategy='full' for whole files.")
        if excerpt.strategy == "random" and excerpt != ExcerptConfig():
            raise ValueError("duration=None reads whole files; a custom search does not apply. Use ExcerptConfig(strategy='full').")
        return None, ExcerptConfig(strategy="full")
    return duration, excerpt


@dataclasses.dataclass(frozen=True)
class BuildRequest:
    """What one builder call asks for, checked as a whole when constructed: a builder's *check* step.

    Every option object has checked itself; this checks what depends on
    several of them (a window with an excerpt, an index filter without an
    index, whole files with a duration, fields the builder does not use),
    before the builder reads an index row or a file. Build it with
    :meth:`resolve` from a public builder's arguments.

    Attributes:
      builder: the public builder's name (for messages).
      output, order, corpus: the option objects, shorthands applied.
      num_epochs: passes over the items; ``None`` repeats forever.
      duration: seconds per item (``None``: whole files); for windows, the window's.
      excerpt: the excerpt strategy (resolved: ``duration=None`` reads whole
        files); the windowed builder does not use it.
      window: the windows (windowed sampling), else ``None``.
      has_index: the rows come from a corpus index (``Corpus.index``, or a
        group given as an index path).

    >>> BuildRequest.resolve("create_audio_dataset", duration=None, shorthands={"sample_rate": 8000}).excerpt.strategy
    'full'
    """

    builder: str
    output: Output
    order: Order
    corpus: Corpus
    num_epochs: int | None = 1
    duration: float | None = 1.0
    excerpt: ExcerptConfig = ExcerptConfig()
    window: WindowConfig | None = None
    has_index: bool = False

    @classmethod
    def resolve(cls, builder: str, *, output: Any = None, order: Any = None, corpus: Any = None,
                shorthands: Mapping[str, Any] | None = None, **call: Any) -> "BuildRequest":
        """The request of a call: defaults for missing option objects, the loose shorthands applied.

        Raises ``TypeError`` for a loose option of an earlier release (naming
        its new spelling) or an unknown keyword, ``ValueError`` for a shorthand
        that contradicts its object; then whatever the checks of the request raise.
        """
        objects = {"output": output, "order": order, "corpus": corpus}
        for name, value in objects.items():
            cls_ = _CLASSES[name]
            if value is None:
                objects[name] = cls_()
            elif not isinstance(value, cls_):
                raise TypeError(f"{builder}(): {name} must be an audiotree.{cls_.__name__}, got {type(value).__name__}.")
        for word, value in (shorthands or {}).items():
            target = SHORTHANDS.get(word)
            if target is None:
                if builder == "create_windowed_audio_dataset" and word in _WINDOW_KNOBS:
                    raise TypeError(f"{builder}() takes window=WindowConfig({word}=...) now, not {word}=.")
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
        return cls(builder, **objects, **call)

    def __post_init__(self) -> None:
        for name, cls_ in _CLASSES.items():
            value = getattr(self, name)
            if not isinstance(value, cls_):
                raise TypeError(f"{self.builder}(): {name} must be an audiotree.{cls_.__name__}, got "
                                f"{type(value).__name__}.")
            for field in _FIELDS[name]:
                if field in _UNUSED.get(self.builder, ()) and getattr(value, field) != getattr(cls_(), field):
                    raise ValueError(f"{self.builder}() does not use {cls_.__name__}.{field} "
                                     f"(got {getattr(value, field)!r}); leave it at its default.")
        _check_num_epochs(self.num_epochs)
        if self.window is not None and not isinstance(self.window, WindowConfig):
            raise TypeError(f"window must be a WindowConfig, got {type(self.window).__name__}.")
        if self.builder == "create_windowed_audio_dataset":
            self._check_windowed()
        else:
            self._check_excerpts()
        self._refuse_index_filters()

    def _check_windowed(self) -> None:
        if self.window is None:
            raise TypeError("window must be a WindowConfig, got NoneType.")
        if self.corpus.weight_by is not None:
            raise ValueError(f"{self.builder}() reads every window of every file once; Corpus(weight_by=...) "
                             "applies to create_audio_dataset and create_balanced_audio_dataset.")
        object.__setattr__(self, "duration", float(self.window.duration))

    def _check_excerpts(self) -> None:
        excerpt, duration = self.excerpt, self.duration
        if not isinstance(excerpt, ExcerptConfig):
            raise TypeError(f"excerpt must be an ExcerptConfig, got {type(excerpt).__name__}.")
        if self.window is not None:
            if excerpt != ExcerptConfig():
                raise ValueError("window= samples by window; it cannot be combined with a custom excerpt=.")
            if duration is None or (duration != 1.0 and duration != self.window.duration):
                raise ValueError(f"window= carries its own duration ({self.window.duration} s); do not pass duration="
                                 f"{duration!r} as well.")
            if self.corpus.on_read_error != "raise":
                raise ValueError("window= supports only Corpus(on_read_error='raise').")
            object.__setattr__(self, "duration", float(self.window.duration))
            return
        duration, excerpt = whole_files(duration, excerpt)
        check_duration(duration)
        object.__setattr__(self, "duration", duration)
        object.__setattr__(self, "excerpt", excerpt)

    def _refuse_index_filters(self) -> None:
        """Index filters need an index: refused (naming them) when the rows come from no index."""
        if self.has_index or self.corpus.index is not None:
            return
        filters = _INDEX_FILTERS
        if self.builder == "create_audio_dataset":  # labels also come from tar sidecars and Parquet columns
            filters = tuple(f for f in filters if f != "labels")
        given = sorted(name for name in filters if getattr(self.corpus, name) is not None)
        if given:
            raise ValueError(f"Corpus({', '.join(given)}) need Corpus(index=...) (a corpus index from `audiotree "
                             "index`); folders carry no labels or durations.")

    @property
    def item_seconds(self) -> float:
        """Seconds per item for memory estimates (whole files: ``crop_to`` or a typical utterance)."""
        if self.duration is not None:
            return float(self.duration)
        return float(self.excerpt.crop_to or WHOLE_FILE_ESTIMATE_SECONDS)


#: Seconds assumed per whole-file item without crop_to, for buffer-memory estimates only.
WHOLE_FILE_ESTIMATE_SECONDS = 20.0

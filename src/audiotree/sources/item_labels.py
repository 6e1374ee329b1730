"""What an item carries besides its audio: its key, and the labels ``Corpus(labels=...)`` asks for.

The key
    Every item of the builders carries ``extras["key"]``: the key's
    code points as an int32 row ``(1, 1024)`` (``(B, 1024)`` in a batch), the
    encoding of ``filepath`` and ``source`` (:mod:`audiotree.provenance`), so
    every batch stays a pytree of arrays that ``jax.jit`` and
    ``jax.device_put`` take, in Grain and in torch batches alike.
    :func:`item_keys` decodes them: ``item_keys(batch)`` is a list of ``B``
    strings. It is the row's utterance id in a segment index (Kaldi, lhotse,
    NeMo imports, ``--segments``), else an index label named ``id``, else what
    the path names: a tar member's webdataset key (``a/utt1`` for
    ``a/utt1.flac``), a Parquet row's ``FILE:GROUP:ROW``, a plain file's path.
    Hypotheses written by key score against the manifest without a join.

Labels and aliases
    ``Corpus(labels=["speaker", "text"])`` carries index label columns into
    ``extras``; ``"id"`` names a segment index's utterance ids (as text).
    ``Corpus(labels={"text": ["transcript", "txt"]})`` makes one label of
    several columns (sources mixed in one index name a transcript three
    ways): per row, the first of ``text``, ``transcript``, ``txt`` that has a
    value (not null, not empty). Category columns merged this way share one
    vocabulary (the sorted union of theirs: :func:`label_vocabulary`); a text
    column among them makes the label text; numbers merge with numbers only.

Without an index
    ``create_audio_dataset(sources=shards, corpus=Corpus(labels=["text"]))``
    carries each tar member's ``.json`` fields, ``.txt`` (``txt``) and
    ``.cls`` (``cls``), and each Parquet row's other columns
    (:func:`stream_labels`): numbers as ``(1,)`` arrays, strings as
    one-string lists (no vocabulary is built without an index). They are read
    when the dataset is built, with the listing of the shards.

>>> item_key("tar://spk1/utt-7.flac?offset=512&size=9::/data/train-000001.tar")
'spk1/utt-7'
>>> item_key("parquet://audio?row_group=0&row=3::/data/train-00000.parquet")
'train-00000.parquet:0:3'
>>> label_request({"text": ["transcript", "txt"], "speaker": []})
(('text', ('text', 'transcript', 'txt')), ('speaker', ('speaker',)))
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any, Mapping

import numpy as np

from audiotree.io.members import is_member, parse
from audiotree.provenance import KEY_EXTRA

__all__ = ["KEY", "item_key", "item_keys", "encode_key", "label_request", "LabelPlan", "plan_labels", "label_vocabulary", "check_same_kinds",
           "StreamLabels", "stream_labels"]

#: The ``extras`` entry that holds every item's key (code-point rows; writers store it as text).
KEY = KEY_EXTRA
_ID = "id"


def item_key(path: str) -> str:
    """The key of the item read from ``path`` (a file path, a URL or a member URL); see the module docstring."""
    path = os.fspath(path)
    if not is_member(path):
        return path
    ref = parse(path)
    if ref.kind == "tar":
        from audiotree.io.tar_shards import split_key

        return split_key(ref.name)[0]
    return f"{ref.container.rstrip('/').rsplit('/', 1)[-1]}:{ref.offset}:{ref.size}"


def encode_key(keys: list) -> np.ndarray:
    """``extras["key"]`` of items with these keys: code-point rows ``(len(keys), 1024)`` int32."""
    from audiotree.provenance import encode_strings

    return encode_strings(keys)


def item_keys(tree: Any) -> list:
    """The keys of an item or batch (an ``AudioTree`` of NumPy, JAX or torch leaves), as strings.

    >>> from audiotree import AudioTree
    >>> tree = AudioTree.create(np.zeros((2, 1, 4), np.float32), 8000, extras={"key": encode_key(["u1", "u2"])})
    >>> item_keys(tree)
    ['u1', 'u2']
    """
    from audiotree.provenance import decode_strings

    rows = tree.extras[KEY]
    rows = np.asarray(rows.numpy() if hasattr(rows, "numpy") and not isinstance(rows, np.ndarray) else rows)
    return decode_strings(np.where(rows < 0, 0, rows))  # a filler slot of batch_by_duration (-1s) has the key ""


def label_request(labels: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``Corpus.labels`` as ``((name, (column, alias, ...)), ...)``: a list of names, or ``{name: [aliases]}``."""
    if labels is None:
        return ()
    if isinstance(labels, str):
        labels = [labels]
    if isinstance(labels, Mapping):
        out = []
        for name, aliases in labels.items():
            aliases = [aliases] if isinstance(aliases, str) else list(aliases or ())
            if not isinstance(name, str) or not name or not all(isinstance(a, str) and a for a in aliases):
                raise TypeError(f"labels must map a label name to the column names it is made of, got {labels!r}.")
            out.append((name, tuple(dict.fromkeys([name, *aliases]))))
        return tuple(out)
    names = list(labels)
    if not all(isinstance(n, str) and n for n in names):
        raise TypeError(f"labels must be a list of column names or {{name: [aliases]}}, got {labels!r}.")
    return tuple((n, (n,)) for n in dict.fromkeys(names))


def _present(store: Any, column: str) -> np.ndarray:
    """Per store row: whether ``column`` has a value (not null, not an empty string)."""
    if column == _ID:
        return np.diff(store.column("id.offsets")) > 0
    kind = store.label_kind(column)
    if kind == "numeric":
        values = store.column(store.label_key(column))
        return np.isfinite(values) if values.dtype.kind == "f" else np.ones(values.shape, bool)
    codes, names = store.codes(column)
    empty = np.array([n == "" for n in names] + [True], dtype=bool)  # code -1 reads the last: none
    return ~empty[codes]


def _as_string(store: Any, column: str, r: int) -> str:
    """Row ``r`` of label ``column`` as a string (``""``: none)."""
    kind, leaf = store.label_kind(column), store.label_leaf(column, r)
    if kind == "text":
        return leaf[0]
    value = np.asarray(leaf).reshape(-1)[0]
    if kind == "category":
        return store.string(store.label_key(column) + ".names", int(value)) if value >= 0 else ""
    if value.dtype.kind == "f" and not np.isfinite(value):
        return ""
    return str(int(value)) if value.dtype.kind == "f" and float(value).is_integer() else str(value)


def _kind(store: Any, column: str) -> str:
    return "text" if column == _ID else store.label_kind(column)


@dataclasses.dataclass(frozen=True)
class LabelPlan:
    """How rows of one index become item labels: for each label its name, kind and columns.

    A label of one column reads it as the index stores it. An aliased label
    (several columns) reads, per row, the column kept in the store's derived
    ``which`` array (``-1``: none), and maps category ids to its one
    vocabulary through derived tables. Pickles small: the arrays stay in the
    column store.
    """

    names: tuple = ()
    kinds: tuple = ()
    columns: tuple = ()
    derived: tuple = ()  # per label: the derived arrays' name, or None (one column)
    key_from_id: bool = False
    key_from_label: bool = False

    def leaves(self, store: Any, r: int, path: str) -> dict:
        """Row ``r``'s ``extras``: the labels and the key (``path``: the row's usable path)."""
        out = {name: self._leaf(store, r, j) for j, name in enumerate(self.names)}
        out[KEY] = encode_key([self._key(store, r, path)])
        return out

    def _key(self, store: Any, r: int, path: str) -> str:
        if self.key_from_id:
            value = store.string("id", r)
            if value:
                return value
        if self.key_from_label:
            value = _as_string(store, _ID, r)
            if value:
                return value
        return item_key(path)

    def _read(self, store: Any, column: str, r: int) -> Any:
        return [store.string("id", r)] if column == _ID else store.label_leaf(column, r)

    def _leaf(self, store: Any, r: int, j: int) -> Any:
        kind, columns, derived = self.kinds[j], self.columns[j], self.derived[j]
        if derived is None:
            return self._read(store, columns[0], r)
        which = int(store.derived_value(derived, "which", r))
        if which < 0:
            return [""] if kind == "text" else (np.array([-1], np.int32) if kind == "category"
                                                 else np.array([np.nan]))
        column = columns[which]
        value = self._read(store, column, r)
        if kind == "numeric":
            return np.asarray(value, dtype=np.float64)
        source_kind = _kind(store, column)
        if kind == "text":
            if source_kind == "category":  # its value by id, from the stored vocabulary
                return [store.string(store.label_key(column) + ".names", int(np.asarray(value)[0]))]
            return value
        return np.array([store.derived_value(derived, f"map{which}", int(np.asarray(value)[0]))], np.int32)


def plan_labels(store: Any, request: Any, index_path: str) -> LabelPlan:
    """The :class:`LabelPlan` of ``request`` (:func:`label_request`'s form) over an index's column store.

    Raises ``ValueError`` naming the index when a label has none of its
    columns, or when aliased columns hold numbers and strings.
    """
    from audiotree.index.quality import QUALITY_COLUMNS, store_key

    available = (list(store.manifest["labels"]) + ([_ID] if store.has("id.offsets") else [])
                 + [name for name in QUALITY_COLUMNS if store.has(store_key(name))])
    names, kinds, columns, derived = [], [], [], []
    for name, wanted in request:
        found = tuple(c for c in wanted if c in available)
        if not found:
            hint = ("" if name != _ID else " Every item carries its utterance id, member key or path as "
                    "extras['key'] (see audiotree.sources.item_labels).")
            raise ValueError(
                f"{index_path} has no label column {name!r}" + (f" (nor {list(wanted[1:])})" if len(wanted) > 1 else "")
                + f"; its labels are {available}. Labels come from a labels file (--labels), tar sidecars, Parquet "
                "columns, a segment list or an import; name one of those columns, or map a label to the columns "
                "that hold it: Corpus(labels={'text': ['transcript', 'txt']})." + hint)
        source_kinds = [_kind(store, c) for c in found]
        if "numeric" in source_kinds and len(set(source_kinds)) > 1:
            raise ValueError(f"{index_path}: label {name!r} merges columns {list(found)} of kinds {source_kinds}; "
                             "numbers merge with numbers only.")
        kind = "text" if "text" in source_kinds else source_kinds[0]
        names.append(name)
        kinds.append(kind)
        columns.append(found)
        derived.append(None if len(found) == 1 else _save_merge(store, found, kind, source_kinds))
    return LabelPlan(tuple(names), tuple(kinds), tuple(columns), tuple(derived),
                     key_from_id=store.has("id.offsets"),
                     key_from_label=_ID in store.manifest["labels"])


def _save_merge(store: Any, columns: tuple, kind: str, source_kinds: list) -> str:
    """Keeps, in the store, which column each row's value comes from and (categories) the id maps."""
    which = np.full(len(store), -1, dtype=np.int16)
    for k, column in reversed(list(enumerate(columns))):  # the first column with a value wins
        which[_present(store, column)] = k
    arrays = {"which": which}
    if kind == "category":
        vocabularies = [store.codes(c)[1] for c in columns]
        merged = sorted({v for vocab in vocabularies for v in vocab if v})
        position = {v: i for i, v in enumerate(merged)}
        for k, vocab in enumerate(vocabularies):  # ("" is a retired id: none)
            arrays[f"map{k}"] = np.array([position.get(v, -1) for v in vocab] or [-1], dtype=np.int32)
    tag = hashlib.blake2b(repr((columns, kind, source_kinds)).encode(), digest_size=6).hexdigest()
    return store.save_derived(f"alias-{tag}", arrays)


def label_vocabulary(index: Any, labels: Any) -> dict[str, list]:
    """The vocabulary (values by id) of each category label ``Corpus(labels=...)`` would carry from ``index``.

    For a label of one column, the index's vocabulary; for an aliased label,
    the sorted union of its columns' values (the ids items carry).
    """
    from audiotree.index.columns import open_columns
    from audiotree.index.reader import CorpusIndex, open_index

    ix = index if isinstance(index, CorpusIndex) else open_index(index, columns=())
    store = open_columns(ix)
    plan = plan_labels(store, label_request(labels), ix.path)
    out = {}
    for name, kind, columns in zip(plan.names, plan.kinds, plan.columns):
        if kind != "category":
            continue
        if len(columns) == 1:
            out[name] = ix.vocabulary(columns[0]) if columns[0] in ix.label_names else []
        else:
            out[name] = sorted({v for c in columns for v in store.codes(c)[1] if v})
    return out


def check_same_kinds(plans: Mapping[str, LabelPlan]) -> None:
    """Refuses a dataset over several indexes (``{index path: plan}``) whose labels of one name differ in kind."""
    seen: dict[str, tuple[str, str]] = {}
    for path, plan in plans.items():
        for name, kind in zip(plan.names, plan.kinds):
            first = seen.setdefault(name, (path, kind))
            if first[1] != kind:
                raise ValueError(f"Label {name!r} is {first[1]} in {first[0]} but {kind} in {path}; one dataset needs "
                                 f"one kind per label. Rebuild one index with --text-columns {name} (text) or "
                                 "--numeric-columns, or carry the label from one index only.")


@dataclasses.dataclass(frozen=True, eq=False)
class StreamLabels:
    """Labels of items read without an index: tar members' sidecars and Parquet rows' columns.

    ``leaves(path)`` gives an item's ``extras``: numbers as ``(1,)`` arrays
    (NaN where a member has none), strings as one-string lists (``""`` where
    none): no vocabulary is built without an index.
    """

    position: Mapping[str, int]
    values: Mapping[str, Any]  # label -> a NumPy array, or a TextColumn

    def leaves(self, path: Any) -> dict:
        i = self.position.get(os.fspath(path))
        out = {}
        for name, column in self.values.items():
            if isinstance(column, np.ndarray):
                out[name] = column[i:i + 1].copy() if i is not None else _neutral(column)
            else:
                out[name] = [column.text(i) if i is not None else ""]
        return out


def _neutral(column: np.ndarray) -> np.ndarray:
    return np.array([np.nan if column.dtype.kind == "f" else -1 if column.dtype.kind == "i" else False],
                    dtype=column.dtype)


def stream_labels(files: list, found: Mapping[str, Mapping[str, Any]], labels: Any, where: str) -> StreamLabels:
    """:class:`StreamLabels` of ``labels`` (``Corpus.labels``) for ``files``, from the sidecar values ``found``.

    Raises ``ValueError`` naming the sources when a label is held by no member or column.
    """
    from audiotree.index.text import TextColumn
    from audiotree.discovery.containers import label_rows

    columns = label_rows(found, list(files))
    values: dict[str, Any] = {}
    for name, wanted in label_request(labels):
        present = [c for c in wanted if c in columns]
        if not present:
            raise ValueError(f"No tar sidecar or Parquet column of {where} holds label {name!r}"
                             + (f" (nor {list(wanted[1:])})" if len(wanted) > 1 else "")
                             + f"; their labels are {sorted(columns)}. Plain files carry labels through a corpus "
                             "index: audiotree index SOURCES --labels FILE, then Corpus(index=...).")
        merged = [next((v for v in row if v is not None and v != ""), None)
                  for row in zip(*(columns[c] for c in present))]
        kinds = {type(v) for v in merged if v is not None}
        if kinds and kinds <= {int, float}:
            exact = kinds == {int} and all(v is not None for v in merged)
            values[name] = np.array([np.nan if v is None else v for v in merged],
                                    dtype=np.int64 if exact else np.float64)
        elif kinds == {bool} and all(v is not None for v in merged):
            values[name] = np.array(merged, dtype=bool)
        else:
            values[name] = TextColumn.from_strings(["" if v is None else str(v) for v in merged])
    return StreamLabels({os.fspath(f): i for i, f in enumerate(files)}, values)

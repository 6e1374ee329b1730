"""An index's metadata is not trusted with its root or its profiles (issue 29): a forged value is an error."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf

from audiotree.index import build_index, open_index
from audiotree.sources import Corpus

RATE = 16000


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """An index beside its corpus, paths stored relative to a root inside the index's folder."""
    top = tmp_path_factory.mktemp("trust")
    corpus = top / "corpus"
    corpus.mkdir()
    rng = np.random.default_rng(3)
    for i, seconds in enumerate((2.0, 3.5, 5.0)):
        sf.write(corpus / f"f{i}.wav", 0.3 * rng.standard_normal(int(seconds * RATE)).astype(np.float32), RATE)
    out = top / "corpus.parquet"
    build_index(str(corpus), out, executor="serial", show_progress=False, root=str(corpus))
    return out


def _rewrite(src, dst, *, meta=None, profile=None):
    table = pq.read_table(src)
    metadata = dict(table.schema.metadata)
    if meta is not None:
        metadata[b"audiotree"] = json.dumps(meta).encode()
    if profile is not None:
        i = table.column_names.index("profile")
        table = table.set_column(i, table.schema.field("profile"), pa.array(profile, type=table.schema.field("profile").type))
    pq.write_table(table.replace_schema_metadata(metadata), dst)
    return dst


def test_the_built_index_opens_and_its_profiles_pass(built):
    ix = open_index(built, columns="all")
    assert len(ix.paths()) == 3 and all(p.endswith(".wav") for p in ix.paths())


@pytest.mark.parametrize("forged", ["../../../..", "/", "../elsewhere"])
def test_a_root_outside_the_index_folder_is_refused_unless_passed_explicitly(built, forged):
    meta = json.loads(pq.read_metadata(built).metadata[b"audiotree"])
    meta["root"] = forged
    path = _rewrite(built, built.parent / "forged.parquet", meta=meta)
    with pytest.raises(ValueError, match=r"forged\.parquet: the index's root .* outside the index's folder.*root="):
        open_index(path)
    # The caller who keeps the corpus elsewhere says so, and the paths resolve against that root.
    ix = open_index(path, root=built.parent / "corpus")
    assert ix.root == str(built.parent / "corpus")


def _profiles(built):
    return pq.read_table(built).column("profile").to_pylist()


def _check_refused(path, message):
    with pytest.raises(ValueError, match=r"bad-profile\.parquet: row 1 has a loudness profile .*" + message):
        open_index(path, columns="all")
    # A dataset that plans loud excerpts from the profiles refuses it too, before any item.
    from audiotree.sources import ExcerptConfig, create_audio_dataset

    with pytest.raises(ValueError, match=r"bad-profile\.parquet: row 1"):
        create_audio_dataset(corpus=Corpus(index=path), sample_rate=RATE, duration=1.0,
                             excerpt=ExcerptConfig(strategy="loudest", lufs_cutoff=-40))


@pytest.mark.parametrize("damage", [lambda p: p[:1], lambda p: p + [0], lambda p: []], ids=["one-block", "one-more",
                                                                                              "empty"])
def test_an_int16_profile_of_the_wrong_length_is_an_error_naming_the_index_and_row(built, damage):
    profiles = _profiles(built)
    profiles[1] = damage(profiles[1])
    _check_refused(_rewrite(built, built.parent / "bad-profile.parquet", profile=profiles),
                   r"holds \d+ blocks, but \d+ frames make \d+")


@pytest.mark.parametrize("damage,message", [
    (lambda p: p[:1], r"holds 1 blocks, but \d+ frames make \d+"),
    (lambda p: [float("nan")] + p[1:], "not finite, non-negative"),
    (lambda p: [float("inf")] + p[1:], "not finite, non-negative"),
    (lambda p: [-1.0] + p[1:], "not finite, non-negative"),
], ids=["one-block", "nan", "inf", "negative"])
def test_a_format_1_0_float32_profile_that_does_not_describe_its_file_is_an_error(built, damage, message):
    from helpers import index_as_format_1_0

    old = index_as_format_1_0(built, built.parent / "old.parquet")
    assert open_index(old, columns="all").profile(1).dtype == np.float32  # the undamaged 1.0 index opens
    profiles = _profiles(old)
    profiles[1] = damage(profiles[1])
    _check_refused(index_as_format_1_0(built, built.parent / "bad-profile.parquet", profiles=profiles), message)


@pytest.mark.parametrize("kind", [pa.list_(pa.int32()), pa.list_(pa.float64()), pa.list_(pa.uint16()), pa.int16()])
def test_a_profile_column_of_another_type_is_refused(built, kind):
    table = pq.read_table(built)
    i = table.column_names.index("profile")
    if pa.types.is_list(kind):
        column = table.column(i).cast(kind, safe=False)
    else:
        column = pa.nulls(table.num_rows, kind)
    table = table.set_column(i, pa.field("profile", kind), column)
    pq.write_table(table, built.parent / "bad-type.parquet")
    with pytest.raises(ValueError, match=r"bad-type\.parquet: column 'profile' has type .*, expected "
                                         r"list<item: int16>; rebuild the index"):
        open_index(built.parent / "bad-type.parquet", columns="all")


def test_an_index_needing_a_newer_reader_is_refused(built):
    meta = json.loads(pq.read_metadata(built).metadata[b"audiotree"])
    meta.update(format_version=[1, 5], min_reader_version=[1, 5])
    path = _rewrite(built, built.parent / "newer.parquet", meta=meta)
    with pytest.raises(ValueError, match=r"newer\.parquet: needs a reader of version >= 1\.5, but this reader is "
                                         r"1\.4; upgrade audiotree"):
        open_index(path)

"""An index's metadata is not trusted with its root or its profiles (issue 29): a forged value is an error."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf

from audiotree.index import build_index, open_index

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


@pytest.mark.parametrize("damage,message", [
    (lambda p: p[:1], r"holds 1 blocks, but \d+ frames make \d+"),
    (lambda p: [float("nan")] + p[1:], "not finite, non-negative"),
    (lambda p: [float("inf")] + p[1:], "not finite, non-negative"),
    (lambda p: [-1.0] + p[1:], "not finite, non-negative"),
], ids=["one-block", "nan", "inf", "negative"])
def test_a_profile_that_does_not_describe_its_file_is_an_error_naming_the_index_and_row(built, damage, message):
    profiles = _profiles(built)
    profiles[1] = damage(profiles[1])
    path = _rewrite(built, built.parent / "bad-profile.parquet", profile=profiles)
    with pytest.raises(ValueError, match=r"bad-profile\.parquet: row 1 has a loudness profile .*" + message):
        open_index(path, columns="all")
    # A dataset that plans loud excerpts from the profiles refuses it too, before any item.
    from audiotree.sources import ExcerptConfig, create_audio_dataset

    with pytest.raises(ValueError, match=r"bad-profile\.parquet: row 1"):
        create_audio_dataset(index=path, sample_rate=RATE, duration=1.0,
                             excerpt=ExcerptConfig(strategy="loudest", lufs_cutoff=-40))

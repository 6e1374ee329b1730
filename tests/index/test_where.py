"""``Corpus(where=...)``: the expression syntax, its errors, and rows kept across Grain workers and a resume."""

from __future__ import annotations

import itertools
from pathlib import Path

import grain
import numpy as np
import pytest
import soundfile

from audiotree import AudioTree
from audiotree.index import build_index
from audiotree.index.where import evaluate, parse_where
from audiotree.sources import Corpus, create_audio_dataset, create_balanced_audio_dataset

RATE = 16_000
SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


def test_the_expression_syntax_and_its_missing_values():
    cols = {"a": np.array([1.0, 2.0, np.nan, 4.0]), "b": np.array([0.0, 5.0, 5.0, 1.0])}
    run = lambda text: evaluate(parse_where(text), cols.__getitem__).tolist()  # noqa: E731
    assert run("a >= 2") == [False, True, False, True]
    assert run("a >= 2 and b > 2") == [False, True, False, False]
    assert run("a < 2 or b == 5") == [True, True, True, False]
    assert run("not a >= 2") == [True, False, True, False]  # a missing value compares false; `not` flips it
    assert run("a != 2") == [True, False, False, True]
    assert run("1 < a <= 4") == [False, True, False, True]
    assert run("a > -1e1 and (b < 1 or b > 4.5)") == [True, True, False, False]
    assert run("a < b") == [False, True, False, False]


@pytest.mark.parametrize("text, token", [
    ("a + 1 > 2", "a + 1"), ("__import__('os')", "__import__('os')"), ("a > 'x'", "'x'"), ("a in (1, 2)", "a in (1, 2)"),
    ("a > True", "True"), ("a.real > 1", "a.real"), ("1 < 2", "1 < 2"), ("a", "a"), ("a > b()", "b()"),
])
def test_anything_else_is_refused_naming_the_token(text, token):
    with pytest.raises(ValueError, match="is not allowed") as info:
        parse_where(text)
    assert repr(token) in str(info.value)


def test_a_syntax_error_is_a_value_error():
    with pytest.raises(ValueError, match=r"not a valid expression"):
        parse_where("a >= ")
    with pytest.raises(ValueError, match=r"non-empty expression"):
        parse_where("  ")


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    """12 files: 6 native 16 kHz noise, 6 upsampled from 4 kHz (bandwidth ~2 kHz), in two groups."""
    import soxr

    root = tmp_path_factory.mktemp("where")
    rng = np.random.default_rng(3)
    for group in ("a", "b"):
        (root / group).mkdir()
        for k in range(6):
            if k % 2:
                x = soxr.resample(0.1 * rng.standard_normal(4000 * 2), 4000, RATE)
            else:
                x = 0.1 * rng.standard_normal(RATE * 2)
            soundfile.write(root / group / f"{'up' if k % 2 else 'full'}{k}.wav", x.astype(np.float32), RATE)
    out = root / "ix.parquet"
    build_index({"a": str(root / "a"), "b": str(root / "b")}, out, executor="serial", show_progress=False)
    return out


def _names(ds, n):
    return [Path(ds[i].filepath[0]).name for i in range(n)]


def test_where_keeps_the_matching_rows(index):
    ds = create_audio_dataset(corpus=Corpus(index=index, where="bandwidth_hz >= 6000 and clip_share < 1e-4"),
                              num_epochs=1, shuffle=False, sample_rate=RATE, duration=0.5)
    assert len(ds) == 6 and all(name.startswith("full") for name in _names(ds, 6))
    ds = create_audio_dataset(corpus=Corpus(index=index, where="bandwidth_hz < 4800 and sample_rate == 16000"),
                              num_epochs=1, shuffle=False, sample_rate=RATE, duration=0.5)
    assert sorted(_names(ds, len(ds))) == sorted(f"up{k}.wav" for k in (1, 3, 5) for _ in "ab")
    balanced = create_balanced_audio_dataset(corpus=Corpus(index=index, group_by="group", where="bandwidth_hz > 6000"),
                                             num_epochs=None, sample_rate=RATE, duration=0.5)
    assert all(Path(balanced[i].filepath[0]).name.startswith("full") for i in range(12))


def test_errors_name_the_unknown_column_and_options_need_an_index(index, tmp_path):
    with pytest.raises(ValueError, match=r"unknown column 'bandwith_hz'.*bandwidth_hz"):
        create_audio_dataset(corpus=Corpus(index=index, where="bandwith_hz > 1"), sample_rate=RATE, duration=0.5)
    with pytest.raises(RuntimeError, match=r"none is readable where snr_db > 1000"):
        create_audio_dataset(corpus=Corpus(index=index, where="snr_db > 1000"), sample_rate=RATE, duration=0.5)
    with pytest.raises(ValueError, match=r"need Corpus\(index=...\)"):
        create_audio_dataset(tmp_path, corpus=Corpus(where="snr_db > 10"), sample_rate=RATE, duration=0.5)
    header_only = tmp_path / "h.parquet"
    build_index(str(index.parent / "a"), header_only, loudness=False, executor="serial", show_progress=False)
    with pytest.raises(ValueError, match=r"needs the index's quality columns"):
        create_audio_dataset(corpus=Corpus(index=header_only, where="snr_db > 10"), sample_rate=RATE, duration=0.5)
    # Base columns need no quality columns.
    ds = create_audio_dataset(corpus=Corpus(index=header_only, where="duration >= 1 and channels == 1"),
                              sample_rate=RATE, duration=0.5)
    assert len(ds) == 6


def _batches(ds, workers: int):
    it = ds.to_iter_dataset(SYNC)
    if workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return iter(it.batch(2, batch_fn=AudioTree.batch))


def _keys(batches) -> list:
    return [(Path(b.filepath[k]).name, round(float(b.offset[k]), 6), float(np.asarray(b.waveform[k]).sum()))
            for b in batches for k in range(b.batch_size)]


@pytest.mark.slow
@pytest.mark.parametrize("options", [dict(where="bandwidth_hz >= 6000"),
                                     dict(weight_by=lambda c: (c["bandwidth_hz"] >= 6000) * 1.0)])
def test_filtered_items_are_the_same_for_0_and_2_workers_and_resume_exactly(index, options):
    ds = create_audio_dataset(corpus=Corpus(index=index, **options), num_epochs=None,
                              shuffle=True, shuffle_seed=7, sample_rate=RATE, duration=0.5)
    reference = _keys(itertools.islice(_batches(ds, 0), 6))
    assert {name for name, *_ in reference} <= {f"full{k}.wav" for k in (0, 2, 4)}
    # One iterator gives the whole run, its state taken after 2 batches (taking it changes nothing it gives).
    it = _batches(ds, 2)
    head = [next(it) for _ in range(2)]
    state = it.get_state()
    got = head + [next(it) for _ in range(4)]
    it.close()
    assert _keys(got) == reference
    fresh = _batches(ds, 2)
    fresh.set_state(state)
    tail = [next(fresh) for _ in range(4)]
    fresh.close()
    assert _keys(head) + _keys(tail) == reference


def _cli(*args):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "AUDIOTREE_DEBUG"}
    return subprocess.run([sys.executable, "-m", "audiotree.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.slow
def test_cli_where_renders_only_the_matching_rows_and_needs_an_index(index, tmp_path):
    from audiotree.sources import open_render

    out = tmp_path / "render"
    result = _cli("render", "--index", index, "--where", "bandwidth_hz >= 6000", "--epoch", "--format", "tree",
                  "--out", out, "--duration", "0.5", "--sample-rate", RATE, "--no-shuffle")
    assert result.returncode == 0, result.stderr
    ds = open_render(out)
    assert len(ds) == 6
    assert {Path(ds[i].filepath[0]).name for i in range(len(ds))} == {f"full{k}.wav" for k in (0, 2, 4)}
    bad = _cli("render", "--index", index, "--where", "bandwith_hz >= 6000", "--epoch", "--out", tmp_path / "bad",
               "--duration", "0.5")
    assert bad.returncode != 0 and "unknown column 'bandwith_hz'" in bad.stderr
    folders = _cli("preview", str(index.parent / "a"), "--where", "snr_db > 1", "--out", tmp_path / "p")
    assert folders.returncode != 0 and "--where needs a corpus index" in folders.stderr


def _row_counts(ds) -> dict:
    from collections import Counter

    return Counter(f"{Path(ds[i].filepath[0]).parent.name}/{Path(ds[i].filepath[0]).name}" for i in range(len(ds)))


def test_weight_by_a_column_or_a_function_draws_rows_by_their_share(index):
    ds = create_audio_dataset(corpus=Corpus(index=index, weight_by="bandwidth_hz"), num_epochs=1, shuffle=False,
                              sample_rate=RATE, duration=0.25)
    counts = _row_counts(ds)
    assert len(ds) == 12  # the pool keeps its size; full-band rows (4x the bandwidth) fill ~4/5 of it
    assert sum(v for k, v in counts.items() if "/full" in k) in (9, 10)
    ds = create_audio_dataset(corpus=Corpus(index=index, weight_by=lambda c: (c["bandwidth_hz"] > 6000) * 1.0),
                              num_epochs=1, shuffle=False, sample_rate=RATE, duration=0.25)
    assert set(_row_counts(ds).values()) == {2} and all("/full" in k for k in _row_counts(ds))
    # Within each group of a balanced dataset: every group keeps its own rows.
    groups = indexed_groups(index, weight_by="bandwidth_hz")
    assert {name: len(rows) for name, rows in groups.items()} == {"a": 6, "b": 6}
    with pytest.raises(ValueError, match=r"unknown column 'snr'"):
        create_audio_dataset(corpus=Corpus(index=index, weight_by="snr"), sample_rate=RATE, duration=0.25)
    with pytest.raises(ValueError, match=r"weights must be finite and >= 0"):
        create_audio_dataset(corpus=Corpus(index=index, weight_by=lambda c: c["dc_offset"] * 0 - 1), sample_rate=RATE,
                             duration=0.25)


def indexed_groups(index, **kwargs):
    from audiotree.sources.indexed import rows_by_group

    return rows_by_group(index, "group", **kwargs)


@pytest.mark.slow
def test_cli_weight_by_renders_the_rows_the_python_api_draws(index, tmp_path):
    from collections import Counter

    from audiotree.sources import open_render

    out = tmp_path / "weighted"
    result = _cli("render", "--index", index, "--weight-by", "bandwidth_hz", "--epoch", "--format", "tree",
                  "--out", out, "--duration", "0.5", "--sample-rate", RATE, "--no-shuffle")
    assert result.returncode == 0, result.stderr
    rendered = open_render(out)
    expected = create_audio_dataset(corpus=Corpus(index=index, weight_by="bandwidth_hz"), num_epochs=1, shuffle=False,
                                    sample_rate=RATE, duration=0.5)
    assert Counter(rendered[i].filepath[0] for i in range(len(rendered))) == \
        Counter(expected[i].filepath[0] for i in range(len(expected)))
    assert len(set(Counter(expected[i].filepath[0] for i in range(len(expected))).values())) > 1  # weights differ
    folders = _cli("preview", str(index.parent / "a"), "--weight-by", "snr_db", "--out", tmp_path / "p")
    assert folders.returncode != 0 and "--weight-by needs a corpus index" in folders.stderr

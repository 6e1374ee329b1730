"""The HTML preview: the renderer's files, and the page loaded in real headless Chromium."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args, cwd=None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "audiotree.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


# ------------------------------------------------------------------ the renderer (Python API)
def _dataset(corpus, **kwargs):
    from audiotree.excerpts.config import ExcerptConfig
    from audiotree.sources import create_balanced_audio_dataset

    return create_balanced_audio_dataset(
        {k: [str(v)] for k, v in corpus.items()}, duration=0.3, sample_rate=8000,
        excerpt=ExcerptConfig(strategy="loudest", lufs_cutoff=-35), **kwargs)


def test_render_preview_files_and_manifest(corpus, tmp_path):
    import soundfile

    from audiotree.preview import render_preview

    ds = _dataset(corpus)
    result = render_preview(ds, tmp_path / "p", n=5, lufs_cutoff=-35, image_format="svg")
    assert len(result) == 5 and result.image_format == "svg"
    page = result.index.read_text()
    assert page.count("<audio controls") == 5 and 'id="media-status"' in page
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert sorted(r["index"] for r in manifest["excerpts"]) == list(range(5))
    by_index = {r["index"]: r for r in manifest["excerpts"]}
    for i in range(5):
        record, item = by_index[i], ds[i]
        assert record["source"] == item.source[0] and record["filepath"] == item.filepath[0]
        # Relative links, and the WAV is the pipeline's excerpt (16-bit).
        assert not os.path.isabs(record["wav"]) and f'src="{record["wav"]}"' in page
        audio, rate = soundfile.read(tmp_path / "p" / record["wav"], dtype="float32", always_2d=True)
        assert rate == 8000 and audio.shape == (2400, 1)
        np.testing.assert_allclose(audio.T, np.asarray(item.waveform)[0], atol=1 / 2**15 + 1e-6)
        svg = (tmp_path / "p" / record["image"]).read_text()
        assert svg.startswith("<svg") and "cutoff -35" in svg and "<polyline" in svg
        assert "data:image/png;base64," in svg  # the spectrogram, embedded
        assert record["lufs"] == pytest.approx(float(item.lufs[0]), abs=1e-3)
        assert record["excerpt_method"] == "search" and "(search)" in svg  # how loudest chose it
    # Sections are grouped by source.
    sections = re.findall(r'<section data-group="[^"]*" data-source="([^"]+)"', page)
    assert len(sections) == len(set(sections)) == len({r["source"] for r in manifest["excerpts"]})


def test_render_preview_png_replaces_an_earlier_preview(corpus, tmp_path):
    pytest.importorskip("matplotlib")
    from audiotree.preview import render_preview

    out = tmp_path / "p"
    render_preview(_dataset(corpus), out, n=4, image_format="svg")
    result = render_preview(_dataset(corpus, shuffle_seed=3), out, n=2, lufs_cutoff=-35)
    assert result.image_format == "png"
    for record in result.excerpts:
        assert (out / record["image"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.rglob("*.svg"))  # the earlier preview's files are gone
    assert len(list(out.rglob("*.wav"))) == 2


def test_a_stale_manifest_never_deletes_through_a_symlink(corpus, tmp_path):
    """Issue 29: only regular files inside the output folder that the old manifest names are deleted."""
    from audiotree.preview import render_preview

    out, outside = tmp_path / "p", tmp_path / "outside"
    outside.mkdir()
    victims = [outside / "victim.wav", outside / "linked.wav", outside / "deep.wav"]
    for victim in victims:
        victim.write_bytes(b"keep me")
    render_preview(_dataset(corpus), out, n=2, image_format="svg")
    (out / "escape").symlink_to(outside, target_is_directory=True)  # a folder inside --out linked outside
    (out / "link.wav").symlink_to(outside / "linked.wav")  # a file link: removing it would be harmless, keep it
    (out / "real").mkdir()
    (out / "real" / "hop").symlink_to(outside, target_is_directory=True)
    (out / "stale.wav").write_bytes(b"old")  # a regular file the manifest names: deleted
    (out / "unlisted.wav").write_bytes(b"mine")  # not named by the manifest: kept
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["excerpts"].append({"wav": "escape/victim.wav", "image": "link.wav"})
    manifest["excerpts"].append({"wav": "real/hop/deep.wav", "image": "stale.wav"})
    manifest["excerpts"].append({"wav": "escape", "image": "real"})  # folders are never deleted
    (out / "manifest.json").write_text(json.dumps(manifest))
    render_preview(_dataset(corpus), out, n=2, image_format="svg")
    assert all(victim.read_bytes() == b"keep me" for victim in victims)
    assert (out / "link.wav").is_symlink() and (out / "escape").is_symlink() and (out / "real").is_dir()
    assert not (out / "stale.wav").exists() and (out / "unlisted.wav").read_bytes() == b"mine"


def test_render_preview_takes_iterables_and_checks_arguments(corpus, tmp_path):
    import grain

    from audiotree import AudioTree
    from audiotree.preview import render_preview

    batches = _dataset(corpus).to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)).batch(
        2, batch_fn=AudioTree.batch)
    result = render_preview(batches, tmp_path / "it", n=3, image_format="svg")
    assert len(result) == 3
    with pytest.raises(ValueError, match="n must be"):
        render_preview(_dataset(corpus), tmp_path / "x", n=0)
    with pytest.raises(ValueError, match="image_format"):
        render_preview(_dataset(corpus), tmp_path / "x", image_format="gif")


# ------------------------------------------------------------------ the page in a real browser
@pytest.mark.slow
def test_preview_command_opens_from_disk_in_headless_chromium(corpus, tmp_path):
    from browser import chromium_or_skip, page_status, screenshot

    chromium = chromium_or_skip()
    out = tmp_path / "preview"
    n = 6
    result = run_cli("preview", *[f"{k}={v}" for k, v in corpus.items()], "--out", out, "-n", n,
                     "--duration", "0.5", "--sample-rate", "16000", "--strategy", "loudest", "--num-tries", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Wrote {n} excerpts" in result.stdout
    assert len(list(out.rglob("*.png"))) == n and len(list(out.rglob("*.wav"))) == n
    manifest = json.loads((out / "manifest.json").read_text())

    # file:// with no server: every player loads, every picture decodes at the size the manifest states.
    status = page_status(chromium, out / "index.html", tmp_path / "profile")
    assert status["players"] == n and status["loaded"] == n and status["errors"] == 0, status
    assert all(d == pytest.approx(0.5, abs=0.01) for d in status["durations"]), status
    assert status["images"] == n and status["decoded"] == n and status["broken"] == 0, status
    expected = {r["image"]: (r["width"], r["height"]) for r in manifest["excerpts"]}
    assert {s["src"]: (s["width"], s["height"]) for s in status["sizes"]} == expected
    assert set(expected.values()) == {(640, 360)}

    shot = screenshot(chromium, out / "index.html", tmp_path / "profile2", tmp_path / "preview-page.png",
                      width=1400, height=1000)
    assert shot.stat().st_size > 10_000


@pytest.mark.slow
def test_a_broken_picture_is_reported_by_the_page(corpus, tmp_path):
    """The page's own check can fail: a picture that does not decode is counted as broken."""
    from browser import chromium_or_skip, page_status

    from audiotree.preview import render_preview

    chromium = chromium_or_skip()
    result = render_preview(_dataset(corpus), tmp_path / "p", n=2, image_format="svg")
    (tmp_path / "p" / result.excerpts[1]["image"]).write_text("not an image")
    status = page_status(chromium, result.index, tmp_path / "profile")
    assert status["images"] == 2 and status["decoded"] == 1 and status["broken"] == 1, status
    assert status["loaded"] == 2, status


def test_render_preview_of_items_whose_file_is_gone(tmp_path):
    from audiotree import AudioTree
    from audiotree.preview import render_preview

    t = np.arange(8000, dtype=np.float32) / 8000
    tree = AudioTree.create((0.3 * np.sin(2 * np.pi * 440 * t))[None], 8000, filepath=str(tmp_path / "gone.wav"),
                            source="tones", offset=2.0)
    result = render_preview([tree], tmp_path / "p", n=1, image_format="svg")
    [record] = result.excerpts
    assert record["file_duration"] is None and record["offset"] == 2.0 and record["duration"] == 1.0
    assert "<polyline" in (tmp_path / "p" / record["image"]).read_text()  # the excerpt's own loudness curve


def test_render_preview_gives_up_on_a_dataset_of_dropped_items(tmp_path):
    import grain

    from audiotree.preview import render_preview

    nothing = grain.MapDataset.range(10**9).map(lambda i: None)
    with pytest.raises(RuntimeError, match="no excerpts"):
        render_preview(nothing, tmp_path / "p", n=2)


def test_without_matplotlib_png_is_a_clear_error_and_svg_still_works(corpus, tmp_path, monkeypatch):
    from audiotree.preview import render_preview

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails: a broken install
    for image_format in ("auto", "png"):
        with pytest.raises(RuntimeError, match=r"matplotlib, which audiotree depends on.*image_format='svg'"):
            render_preview(_dataset(corpus), tmp_path / image_format, n=1, image_format=image_format)
        assert not (tmp_path / image_format).exists() or not list((tmp_path / image_format).iterdir())
    result = render_preview(_dataset(corpus), tmp_path / "svg", n=1, image_format="svg")
    assert result.image_format == "svg" and result.excerpts[0]["image"].endswith(".svg")


# ------------------------------------------------------------------ labels, groups, gaps
def _labelled_trees(tmp_path):
    """Six excerpts of two files, carrying the kind of labels a corpus index adds (ids + a vocabulary)."""
    import soundfile

    from audiotree import AudioTree

    rate = 8000
    t = np.arange(rate * 2) / rate
    tone = 0.4 * np.sin(2 * np.pi * 440 * t)
    noise = 0.2 * np.random.default_rng(0).standard_normal(t.size)
    soundfile.write(tmp_path / "tone.wav", tone.astype(np.float32), rate)
    soundfile.write(tmp_path / "noise.flac", noise.astype(np.float32), rate)
    trees = []
    for i in range(6):
        name = "tone.wav" if i % 2 == 0 else "noise.flac"
        trees.append(AudioTree.from_file(
            tmp_path / name, offset=0.1 * i, duration=0.5, source="corpus", pitch=[60.0 + i],
            extras={"speaker": np.array([i % 3]), "meta": {"lang": "fr" if i < 3 else "de"}, "emb": np.ones((1, 4))},
        ))
    return trees


def test_cards_show_labels_and_group_by_any_column(tmp_path):
    from audiotree.preview import item_labels, render_preview

    trees = _labelled_trees(tmp_path)
    vocab = {"speaker": ["alice", "bob", "carol"]}
    assert item_labels(trees[4], vocab) == {"pitch": 64.0, "speaker": "bob", "meta.lang": "de"}  # emb is no label
    assert item_labels(trees[4]) == {"pitch": 64.0, "speaker": 1, "meta.lang": "de"}

    result = render_preview(trees, tmp_path / "p", n=6, image_format="svg", group_by="speaker", vocabularies=vocab)
    page = result.index.read_text()
    assert re.findall(r'<section data-group="([^"]+)"', page) == ["alice", "bob", "carol"]
    assert [r["group"] for r in result.excerpts] == ["alice", "alice", "bob", "bob", "carol", "carol"]
    assert [r["index"] for r in result.excerpts] == [0, 3, 1, 4, 2, 5]
    assert "<b>speaker</b> bob" in page and "<b>meta.lang</b> de" in page and "<b>pitch</b> 64" in page
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert manifest["group_by"] == "speaker" and manifest["excerpts"][2]["labels"]["speaker"] == "bob"
    assert all((tmp_path / "p" / r["image"]).exists() and r["image"].startswith(r["group"] + "/")
               for r in result.excerpts)

    # Built-in columns, a nested extras key, numbers in numeric order, and one section for everything.
    by_format = render_preview(trees, tmp_path / "f", n=6, image_format="svg", group_by="format")
    assert [r["group"] for r in by_format.excerpts] == ["flac"] * 3 + ["wav"] * 3
    by_lang = render_preview(trees, tmp_path / "l", n=6, image_format="svg", group_by="meta.lang")
    assert [r["group"] for r in by_lang.excerpts] == ["de"] * 3 + ["fr"] * 3
    by_pitch = render_preview(trees[::-1], tmp_path / "n", n=6, image_format="svg", group_by="pitch")
    assert [r["group"] for r in by_pitch.excerpts] == [60.0, 61.0, 62.0, 63.0, 64.0, 65.0]
    flat = render_preview(trees, tmp_path / "a", n=6, image_format="svg", group_by=None)
    assert flat.index.read_text().count("<section") == 1 and [r["index"] for r in flat.excerpts] == list(range(6))


def test_group_by_an_unknown_column_names_the_columns(tmp_path, corpus):
    from audiotree.preview import render_preview

    trees = _labelled_trees(tmp_path)
    with pytest.raises(ValueError, match=r"'speakr' is not a column.*'source', 'folder', 'format', 'meta.lang'"):
        render_preview(trees, tmp_path / "p", n=2, image_format="svg", group_by="speakr")
    with pytest.raises(TypeError, match="vocabularies"):
        render_preview(trees, tmp_path / "p", n=2, image_format="svg", vocabularies=["alice"])
    result = run_cli("preview", f"speech={corpus['speech']}", "--out", tmp_path / "cli", "-n", 1, "--duration", "0.25",
                     "--sample-rate", "8000", "--group-by", "speaker")
    assert result.returncode == 2 and "'speaker' is not a column" in result.stderr and "folder" in result.stderr


def test_silence_is_a_gap_not_a_line_to_the_bottom(tmp_path):
    """Digital silence measures -inf LUFS: the curve must break there, in both drawings."""
    import soundfile

    from audiotree import AudioTree
    from audiotree.plots.card import gaps, level_limits
    from audiotree.preview import _card, render_preview

    rate = 8000
    t = np.arange(rate * 6) / rate
    x = (0.5 * np.sin(2 * np.pi * 300 * t) * ((t < 2) | (t >= 4))).astype(np.float32)  # tone, 2 s silence, tone
    soundfile.write(tmp_path / "gap.wav", x, rate)
    card = _card(x[:, None], rate, 0.0, (0.0, 1.0), None, -30.0, None, "")
    assert np.isneginf(card.loudness).any()
    low, high = level_limits(card)
    assert high == 0 and -90 <= low <= -40  # -inf does not drag the scale down
    drawn = gaps(card.loudness, low)
    silent = (card.loud_t > 2.3) & (card.loud_t < 3.7)
    assert np.isnan(drawn[silent]).all() and np.isfinite(drawn[card.loud_t < 1.5]).all()

    tree = AudioTree.from_file(tmp_path / "gap.wav", offset=1.0, duration=3.0)
    result = render_preview([tree], tmp_path / "p", n=1, image_format="svg", lufs_cutoff=-30)
    svg = (tmp_path / "p" / result.excerpts[0]["image"]).read_text()
    lines = re.findall(r'<polyline points="([^"]+)"', svg)
    assert len(lines) == 2  # one piece of curve each side of the silence
    bottom = max(float(p.split(",")[1]) for line in lines for p in line.split())
    assert bottom < 190  # no point sits on the panel's bottom edge (y = 196)
    if _has_matplotlib():
        png = render_preview([tree], tmp_path / "q", n=1, image_format="png", lufs_cutoff=-30)
        assert (tmp_path / "q" / png.excerpts[0]["image"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def test_png_card_has_the_stated_size_and_a_spectrogram_that_tells_tone_from_noise(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    from audiotree.preview import render_preview

    trees = _labelled_trees(tmp_path)[:2]  # a tone, then noise
    result = render_preview(trees, tmp_path / "p", n=2, group_by=None)
    rows = []
    for record in result.excerpts:
        with Image.open(tmp_path / "p" / record["image"]) as img:
            assert img.size == (record["width"], record["height"]) == (640, 360)
            pixels = np.asarray(img.convert("L"), dtype=np.float64)
        # The spectrogram panel (rows 214-322, columns 52-582): a tone lights one band, noise all of them.
        panel = pixels[220:318, 60:575]
        rows.append((panel.mean(axis=1) > 100).mean())  # bright rows: bands within ~40 dB of the loudest
    tone_rows, noise_rows = rows
    assert tone_rows < 0.35 and noise_rows > 0.9, rows


def test_matplotlib_is_a_base_dependency():
    # The README's own install (pip install -e .) must draw the PNG plots its examples show.
    import tomllib

    from conftest import REPO_ROOT

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("matplotlib") for dep in project["dependencies"])

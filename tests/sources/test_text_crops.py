"""A fixed-length crop of an utterance must not carry the whole utterance's transcript (issue 37, item 3).

The index is imported from a NeMo manifest and a Kaldi directory written with sox-made audio, as a recipe would;
the transcript is a text label there.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from audiotree.excerpts import ExcerptConfig
from audiotree.index import build_index, import_kaldi
from audiotree.sources import (Corpus, WindowConfig, create_audio_dataset, create_balanced_audio_dataset,
                               create_windowed_audio_dataset)


def _sox_files(folder):
    for i, seconds in enumerate((2.0, 2.5, 3.0)):
        subprocess.run(["sox", "-n", "-r", "16000", "-b", "16", "-c", "1", str(folder / f"u{i}.wav"), "synth",
                        str(seconds), "sine", str(300 + 100 * i)], check=True, capture_output=True)


TEXTS = ("one two", "three", "four five six")


@pytest.fixture()
def asr_index(tmp_path):
    """Three utterances and their transcripts (a labels CSV with a declared text column), indexed."""
    audio = tmp_path / "audio"
    audio.mkdir()
    _sox_files(audio)
    rows = "".join(f"audio/u{i}.wav,{text},s{i % 2}\n" for i, text in enumerate(TEXTS))
    (tmp_path / "labels.csv").write_text("path,text,speaker\n" + rows)
    out = str(tmp_path / "asr.parquet")
    build_index(str(audio), out, labels=str(tmp_path / "labels.csv"), text_columns=["text"], executor="serial",
                show_progress=False)
    return out


def test_a_crop_with_a_text_label_is_refused_naming_the_fix(asr_index):
    with pytest.raises(ValueError, match=r"labels \['text'\] .* are text .*duration=1.0 reads a 1.0 s crop.*3 of 3 "
                                         r"items longer.*duration=None.*Output\(pad_mode=.*allow_text_crops=True"):
        create_audio_dataset(corpus=Corpus(index=asr_index, labels=["text"]), sample_rate=16000)
    with pytest.raises(ValueError, match=r"group 'all'.*2 of 3 items longer.*duration=None"):
        create_balanced_audio_dataset({"all": asr_index}, corpus=Corpus(labels=["speaker", "text"]),
                                      duration=2.25, sample_rate=16000)


def test_whole_items_and_knowing_crops_pass(asr_index):
    whole = create_audio_dataset(corpus=Corpus(index=asr_index, labels=["text"]), duration=None, shuffle=False,
                                 sample_rate=16000)
    assert [whole[i].extras["text"][0] for i in range(3)] == ["one two", "three", "four five six"]
    assert [int(whole[i].lengths[0]) for i in range(3)] == [32000, 40000, 48000]
    crops = create_audio_dataset(corpus=Corpus(index=asr_index, labels=["text"]), excerpt=ExcerptConfig(
        allow_text_crops=True), shuffle=False, sample_rate=16000)
    assert crops[0].waveform.shape == (1, 1, 16000) and crops[0].extras["text"] == ["one two"]
    # Items no longer than the excerpt are read whole (padded), so their text is right.
    padded = create_audio_dataset(corpus=Corpus(index=asr_index, labels=["text"]), duration=3.0, shuffle=False,
                                  sample_rate=16000)
    assert padded[0].waveform.shape == (1, 1, 48000) and padded[0].extras["text"] == ["one two"]
    # A category label (a speaker) describes every part of the file: crops keep it without asking.
    speakers = create_audio_dataset(corpus=Corpus(index=asr_index, labels=["speaker"]), sample_rate=16000)
    assert np.asarray(speakers[0].extras["speaker"]).shape == (1,)


def test_windows_with_a_text_label_are_refused_naming_the_fix(asr_index):
    # Every window of a file carries the file's whole transcript: the same wrong CTC targets as a crop.
    with pytest.raises(ValueError, match=r"labels \['text'\] .* are text .*WindowConfig\(duration=1.0\) reads 1.0 s "
                                         r"windows.*3 of 3 items longer.*duration=None.*"
                                         r"WindowConfig\(allow_text_crops=True\)"):
        create_windowed_audio_dataset(corpus=Corpus(index=asr_index, labels=["text"]), sample_rate=16000)
    with pytest.raises(ValueError, match=r"group 'all'.*2 of 3 items longer.*WindowConfig\(allow_text_crops=True\)"):
        create_balanced_audio_dataset({"all": asr_index}, corpus=Corpus(labels=["speaker", "text"]),
                                      window=WindowConfig(duration=2.25), sample_rate=16000)


def test_knowing_windows_and_whole_rows_pass(asr_index):
    allowed = WindowConfig(duration=1.0, jitter=False, allow_text_crops=True)
    windows = create_windowed_audio_dataset(corpus=Corpus(index=asr_index, labels=["text"]), window=allowed,
                                            shuffle=False, sample_rate=16000)
    texts = sorted(windows[i].extras["text"][0] for i in range(len(windows)))
    assert windows[0].waveform.shape == (1, 1, 16000)
    assert texts == sorted(["one two"] * 2 + ["three"] * 2 + ["four five six"] * 3)
    balanced = create_balanced_audio_dataset({"all": asr_index}, corpus=Corpus(labels=["text"]), window=allowed,
                                             sample_rate=16000)
    assert balanced[0].waveform.shape == (1, 1, 16000) and balanced[0].extras["text"][0] in TEXTS
    # Files no longer than the window are one window, read whole (padded): their text is right.
    whole = create_windowed_audio_dataset(corpus=Corpus(index=asr_index, labels=["text"]),
                                          window=WindowConfig(duration=3.0), shuffle=False, sample_rate=16000)
    assert len(whole) == 3 and whole[0].waveform.shape == (1, 1, 48000)
    assert sorted(whole[i].extras["text"][0] for i in range(3)) == sorted(TEXTS)
    # A category label describes every window: no override needed.
    speakers = create_windowed_audio_dataset(corpus=Corpus(index=asr_index, labels=["speaker"]), sample_rate=16000)
    assert len(speakers) == 7


def test_the_kaldi_transcript_counts_as_text(tmp_path):
    subprocess.run(["sox", "-n", "-r", "16000", "-b", "16", "-c", "1", str(tmp_path / "rec.wav"), "synth", "4",
                    "sine", "440"], check=True, capture_output=True)
    data = tmp_path / "data"
    data.mkdir()
    (data / "wav.scp").write_text(f"rec {tmp_path}/rec.wav\n")
    (data / "segments").write_text("a rec 0.0 1.5\nb rec 2.0 3.5\n")
    (data / "text").write_text("a HELLO\nb WORLD\n")
    out = str(tmp_path / "k.parquet")
    import_kaldi(str(data), out, executor="serial", loudness=False)
    with pytest.raises(ValueError, match="allow_text_crops"):
        create_audio_dataset(corpus=Corpus(index=out, labels=["text"]), duration=0.5, sample_rate=16000)


def test_a_nemo_transcript_counts_as_text(tmp_path):
    from audiotree.index import import_nemo

    _sox_files(tmp_path)
    with open(tmp_path / "train.json", "w") as f:
        for i, (seconds, words) in enumerate(zip((2.0, 2.5, 3.0), TEXTS)):
            f.write(json.dumps({"audio_filepath": f"u{i}.wav", "duration": seconds, "text": words}) + "\n")
    out = str(tmp_path / "nemo.parquet")
    import_nemo(str(tmp_path / "train.json"), out, executor="serial", loudness=False)
    with pytest.raises(ValueError, match="allow_text_crops"):
        create_audio_dataset(corpus=Corpus(index=out, labels=["text"]), sample_rate=16000)


def test_the_setting_is_checked():
    with pytest.raises(ValueError, match="allow_text_crops must be True or False"):
        ExcerptConfig(allow_text_crops="yes")
    with pytest.raises(ValueError, match="strategy='full' reads whole items"):
        ExcerptConfig(strategy="full", allow_text_crops=True)
    with pytest.raises(ValueError, match="WindowConfig.allow_text_crops must be True or False"):
        WindowConfig(allow_text_crops=1)

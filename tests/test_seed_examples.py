"""Every code example of the seed documentation page runs verbatim as ``python script.py``.

The page is read from ``../shared/seeds/`` (or ``$AUDIOTREE_SEEDS_DIR``); without
it the whole module is skipped with one reason saying where it is expected. The only edits are the ones the
contract allows: real folders replace ``/data/...``, and loops over endless
streams are bounded with ``itertools.islice``. No ``__main__`` guard and no
``absl`` set-up line is added. Names the page leaves to the user's own program
(``train_step``, ``max_steps``, ``evaluate``) or that a fragment takes from an
earlier example on the page (``ds``, and imports such as ``grain``, ``jnp``,
``AudioTree``) get minimal definitions, only when the example uses them without
defining them.
"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

from conftest import seed_page_or_skip
from helpers import run_script

SEED_PAGE = seed_page_or_skip("000_9aba4dc486df387b.txt")

_CODE_LINE = re.compile(
    r"^(\s+\S|import |from \S+ import |#|@|[A-Za-z_][\w\.\[\]\"']*\s*(=|\(|\.|\[)|for |def |if |while |with |"
    r"return |print\(|[\)\]\}])"
)


def extract_examples(text: str) -> list[str]:
    """Maximal runs of code-looking lines that parse as Python (prose trimmed off)."""
    lines = text.splitlines()
    blocks, current = [], []
    for line in lines + ["END OF PAGE."]:
        if not line.strip() or _CODE_LINE.match(line):
            current.append(line)
            continue
        if any(l.strip() for l in current):
            blocks.append(current)
        current = []
    examples = []
    for block in blocks:
        while block and not block[0].strip():
            block = block[1:]
        while block and not block[-1].strip():
            block = block[:-1]
        # Trim leading prose that happens to look like code until the block parses.
        while block:
            try:
                ast.parse("\n".join(block))
                break
            except SyntaxError:
                block = block[1:]
        if block and any(l.strip() and not l.lstrip().startswith("#") for l in block):
            examples.append("\n".join(block) + "\n")
    return examples


def _undefined_names(code: str) -> set[str]:
    tree = ast.parse(code)
    bound, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, (ast.Store, ast.Del)) else used).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
            bound.update(a.arg for a in node.args.args) if isinstance(node, ast.FunctionDef) else None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return used - bound - set(dir(builtins))


def _placeholders(code: str, folders: dict[str, Path]) -> str:
    """Definitions for names the example uses but leaves to the user."""
    missing = _undefined_names(code)
    lines = []
    if "grain" in missing:
        lines.append("import grain")
    if "jnp" in missing:
        lines.append("import jax.numpy as jnp")
    if "AudioTree" in missing:
        lines.append("from audiotree import AudioTree")
    for name in ("create_audio_dataset", "create_balanced_audio_dataset", "ExcerptConfig"):
        if name in missing:
            lines.append(f"from audiotree.sources import {name}")
    if "max_steps" in missing:
        lines.append("max_steps = 3")
    if "train_step" in missing:
        lines.append("def train_step(waveform):\n    return float(waveform.mean())")
    if "evaluate" in missing:
        lines.append("def evaluate(batch):\n    return {'rms': float((batch.waveform ** 2).mean())}")
    if "ds" in missing:
        lines.append("from audiotree.sources import create_audio_dataset as _create")
        if '["src"]' in code:
            lines.append(
                f"ds = _create({str(folders['speech'])!r}, duration=1.0).map(lambda t: {{'src': t, 'tgt': t}})"
            )
        else:
            lines.append(f"ds = _create({str(folders['speech'])!r}, duration=1.0)")
    return "\n".join(lines) + ("\n" if lines else "")


def _substitute(code: str, folders: dict[str, Path], root: Path, bound: int) -> str:
    for name in ("speech", "music", "effects"):
        for prefix in ("/data/val_", "/data/", "/fast_storage/"):
            code = code.replace(f'"{prefix}{name}"', repr(str(folders[name])))
    code = code.replace('"/data/audio"', repr(str(root)))
    # Bound loops over (possibly endless) streams.
    code = re.sub(
        r"for (\w+(?:, \w+)?) in (enumerate\(\w+\)|\w+):",
        lambda m: f"for {m.group(1)} in __import__('itertools').islice({m.group(2)}, {bound}):",
        code,
    )
    code = re.sub(
        r"\[(.+) for (\w+) in (\w+)\]",
        lambda m: f"[{m.group(1)} for {m.group(2)} in __import__('itertools').islice({m.group(3)}, 2000)]",
        code,
    )
    return code


EXAMPLES = extract_examples(SEED_PAGE.read_text())


def test_seed_page_has_the_expected_examples():
    # Multithreading, mp_prefetch, combined, balanced, buffer sizes, worker count,
    # thread count, batching (2), training loop, validation, worker init, profiling, full pipeline.
    assert len(EXAMPLES) >= 14, [e.splitlines()[0] for e in EXAMPLES]
    joined = "\n".join(EXAMPLES)
    for needle in ("mp_prefetch(options=mp_options)", "worker_init_fn=worker_init_fn", "ExcerptConfig(", "batch_fn=AudioTree.batch"):
        assert needle in joined


def _reads_audio(code: str) -> bool:
    """Whether an example iterates (a ``for`` loop or a comprehension), so reads items; the others only
    configure a pipeline."""
    return any(isinstance(node, (ast.For, ast.comprehension)) for node in ast.walk(ast.parse(code)))


#: Every example runs on the synthetic corpus (WAV/FLAC/...); those that read items also run on the same three
#: groups as MP3s written by ffmpeg at mixed rates and channel counts (tests/conftest.py ``mp3_corpus``): before
#: issue 35's MP3 fix, each of them failed there (ffmpeg's MP3s but MPEG-1 stereo were refused). The examples that
#: only configure a pipeline read nothing, so a second corpus would test nothing more.
RUNS = [pytest.param(index, corpus_name, id=f"example{index:02d}-{label}")
        for index in range(len(EXAMPLES))
        for corpus_name, label in (("corpus", "synthetic"), ("mp3_corpus", "ffmpeg-mp3"))
        if corpus_name == "corpus" or _reads_audio(EXAMPLES[index])]


@pytest.mark.slow
@pytest.mark.parametrize(("index", "corpus_name"), RUNS)
def test_seed_example_runs_verbatim(index, corpus_name, request, tmp_path):
    corpus = request.getfixturevalue(corpus_name)
    example = EXAMPLES[index]
    root = next(iter(corpus.values())).parent
    code = _placeholders(example, corpus) + _substitute(example, corpus, root, bound=6)
    assert "__main__" not in code and "mark_as_parsed" not in code
    result = run_script(code, tmp_path, timeout=300)
    assert result.returncode == 0, f"example {index} failed:\n{code}\n--- stderr ---\n{result.stderr[-4000:]}"
    if "print(Counter(sources))" in example:
        counts = eval(re.search(r"Counter\((\{.*\})\)", result.stdout).group(1))  # noqa: S307 - our own output
        total = sum(counts.values())
        assert total == 2000
        assert abs(counts["speech"] / total - 0.7) < 0.04, counts
    if "print(batch.waveform.shape)" in example and 'batch["src"]' not in example:
        # One epoch of the 24-file corpus, batched by 32 with 1 s mono excerpts.
        assert result.stdout.splitlines()[0] == "(24, 1, 44100)"
    if 'batch["src"]' in example:
        assert result.stdout.splitlines()[0] == "(8, 1, 44100)"  # the 8 speech files

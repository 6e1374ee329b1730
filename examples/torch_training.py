"""Train a small PyTorch model on an audiotree stream, and find the num_workers knee.

    python examples/torch_training.py                 # writes a small synthetic corpus to a temp dir
    python examples/torch_training.py data/           # data/<group>/... : one class per sub-folder
    python examples/torch_training.py --workers 0 2 4 8 --epoch-items 1024

What it shows (the DataLoader-workers lesson, applied):

* Everything that does work sits under ``if __name__ == "__main__":``. Workers
  started by spawn or forkserver (macOS, Windows, Python 3.14 on Linux) re-import
  this file; the guard keeps them from starting a training run of their own.
  Classes and functions stay at module level so they pickle.
* ``persistent_workers=True`` (the default of ``audiotree.torch.create_dataloader``
  when ``num_workers > 0``): workers start once, so only epoch 0 pays the start-up
  tax. Every epoch still gets new excerpts, because the epoch travels to the
  workers with the data requests (see ``audiotree.torch``).
* ``pin_memory`` only when CUDA is available; on a CPU it buys nothing.
* Each process (a worker, or the main one with ``num_workers=0``) also decodes a
  batch's items on ``--read-threads`` threads, since decoding releases the GIL;
  ``--read-threads 0`` shows the pure process-per-worker picture.
* It measures instead of guessing: for each worker count it times epoch 0
  (start-up included) and the steady epochs after it, and how long the training
  loop sat waiting for data. The knee is the smallest worker count whose steady
  throughput is within 10% of the best. Past it, workers only cost memory.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

import audiotree.torch as att
from audiotree.sources import create_balanced_audio_dataset


class TinyClassifier(nn.Module):
    """Frames of raw mono audio through a small MLP, averaged over time.

    Deliberately light, so the data pipeline is what the worker count changes;
    swap in your model to find *your* knee.
    """

    def __init__(self, num_classes: int, frame: int = 256):
        super().__init__()
        self.frame = frame
        self.frames = nn.Sequential(nn.Linear(frame, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, num_classes)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:  # (B, 1, T) -> (B, classes)
        batch, _, length = waveform.shape
        frames = waveform[..., : length - length % self.frame].reshape(batch, -1, self.frame)
        return self.head(self.frames(frames).mean(dim=1))


def discover_groups(folder: Path) -> dict[str, Path]:
    groups = {p.name: p for p in sorted(folder.iterdir()) if p.is_dir() and not p.name.startswith(".")}
    if not groups:
        raise SystemExit(f"{folder} has no sub-folders; give one sub-folder per class.")
    return groups


def synthetic_corpus(root: Path) -> dict[str, Path]:
    from audiotree.synth import CorpusSpec, write_corpus

    return write_corpus(root, CorpusSpec(files_per_group=8, min_seconds=1.0, max_seconds=6.0, seed=0))


def run(groups: dict[str, Path], args: argparse.Namespace, num_workers: int, device: torch.device) -> dict:
    """Trains ``args.epochs`` epochs with ``num_workers`` workers; returns the timings."""
    names = sorted(groups)
    dataset = create_balanced_audio_dataset(  # endless and balanced; an "epoch" is epoch_items excerpts
        {name: [groups[name]] for name in names}, duration=args.duration, sample_rate=args.sample_rate,
        shuffle_seed=args.seed,
    )
    loader = att.create_dataloader(
        dataset, batch_size=args.batch_size, epoch_size=args.epoch_items, read_threads=args.read_threads,
        num_workers=num_workers,
        persistent_workers=num_workers > 0, pin_memory=device.type == "cuda",
        multiprocessing_context=args.start_method if num_workers > 0 else None,
    )
    torch.manual_seed(args.seed)
    model = TinyClassifier(len(names)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    label_of = {name: i for i, name in enumerate(names)}
    epochs = []
    for epoch in range(args.epochs):
        waited = items = 0.0
        loss = torch.zeros(())
        start = tick = time.perf_counter()
        for batch in loader:
            waited += time.perf_counter() - tick
            batch = batch.to(device, non_blocking=True)
            labels = torch.tensor([label_of[s] for s in batch.source], device=device)
            loss = nn.functional.cross_entropy(model(batch.waveform), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            items += batch.batch_size
            tick = time.perf_counter()
        seconds = time.perf_counter() - start
        epochs.append({"seconds": seconds, "items": items, "waited": waited, "loss": float(loss.detach())})
    del loader  # stops the persistent workers now rather than at exit
    return {"workers": num_workers, "epochs": epochs}


def report(results: list[dict]) -> None:
    print(f"\n{'workers':>7} | {'epoch 0 s':>9} | {'later epochs items/s':>20} | {'waiting for data':>16} | loss")
    steady = {}
    for r in results:
        first, rest = r["epochs"][0], r["epochs"][1:] or r["epochs"]
        rate = sum(e["items"] for e in rest) / sum(e["seconds"] for e in rest)
        wait = sum(e["waited"] for e in rest) / sum(e["seconds"] for e in rest)
        steady[r["workers"]] = rate
        print(f"{r['workers']:>7} | {first['seconds']:>9.2f} | {rate:>20.1f} | {wait:>15.0%} | {r['epochs'][-1]['loss']:.3f}")
    best = max(steady.values())
    knee = min(w for w, rate in steady.items() if rate >= 0.9 * best)
    print(f"\nKnee: num_workers={knee} (steady throughput within 10% of the best, {best:.1f} items/s).")
    print(f"This machine reports {os.cpu_count()} CPUs; epoch 0 includes worker start-up.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, help="one sub-folder of audio per class (default: synthetic)")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2, 4])
    parser.add_argument("--epochs", type=int, default=3, help="epoch 0 includes worker start-up (default 3)")
    parser.add_argument("--epoch-items", type=int, default=384, help="excerpts per epoch (default 384)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--duration", type=float, default=1.0, help="excerpt seconds (default 1.0)")
    parser.add_argument("--read-threads", type=int, default=att.DEFAULT_READ_THREADS,
                        help=f"reader threads per process (default {att.DEFAULT_READ_THREADS}; 0 = one item at a time)")
    parser.add_argument("--sample-rate", type=int, default=16_000)
    parser.add_argument("--start-method", choices=("fork", "spawn", "forkserver"), default=None,
                        help="worker start method (default: the platform's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"device={device}, pin_memory={device.type == 'cuda'}, read_threads={args.read_threads}, "
          f"torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        groups = discover_groups(args.folder) if args.folder else synthetic_corpus(Path(tmp))
        print(f"classes: {sorted(groups)}; {args.epochs} epochs of {args.epoch_items} excerpts of {args.duration} s")
        results = []
        for num_workers in args.workers:
            results.append(run(groups, args, num_workers, device))
            print(f"  num_workers={num_workers}: " + ", ".join(f"{e['seconds']:.2f} s" for e in results[-1]["epochs"]))
        report(results)


if __name__ == "__main__":  # workers started by spawn/forkserver import this file: keep all work below
    main()

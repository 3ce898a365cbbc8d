"""Data-plane transfer benchmark (issue 3, XingTian §5.1): the same code as ``nimbus bench transfer``.

N sender processes each push 20 messages of S bytes to one asynchronous receiver over every
transport (memcpy, multiprocessing.Queue, Ray object store, Redis, nimbus Channel with a fresh
segment per body and with pre-touched pool slots), side by side; MB/s min/median/max over repeats,
latency p50/p95, ratio to memcpy; LZ4 cells on random floats and on Atari-like frames.

Run:  python benchmarks/transfer.py            (default grid: 1 and 4 senders × 64 KiB, 1 MiB, 16 MiB)
      python benchmarks/transfer.py --full     (1, 2, 4, 8 senders × 64 KiB … 64 MiB)
Writes benchmarks/results/transfer.json (or --json PATH).
"""

from __future__ import annotations

import sys

from nimbus.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "transfer", *sys.argv[1:]]))

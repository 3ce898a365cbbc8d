"""Sampling throughput benchmark (issue 3): the same code as ``nimbus bench sample``.

Env steps/s of N actor functions (PPO's 64×64 MLP policy inference, N warm LocalRuntime workers)
against N × the single-process rate of the same actor code, CartPole-v1 and Hopper-v5; min/median/max
over repeats, each repeat measuring both side by side. Goal: ratio ≥ 0.85 with N = cores.

Run:  python benchmarks/sample.py [--actors N] [--repeats 3]   (writes benchmarks/results/sample.json)
"""

from __future__ import annotations

import sys

from nimbus.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "sample", *sys.argv[1:]]))

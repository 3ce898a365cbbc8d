"""Benchmark payloads: incompressible random floats, and compressible Atari-like uint8 frames.

Atari frames (84×84 grayscale, as after the usual preprocessing) are mostly flat background with a
few sprites, so LZ4 shrinks them many-fold; standard-normal float32 noise does not shrink at all.
The generator is synthetic (no ROMs needed) but has that structure: a few horizontal bands of
constant intensity, a score strip, two paddles and a ball that move from frame to frame.

Example::

    frames = make_payload(kind="atari", nbytes=1 << 20, seed=0)    # uint8, 1 MiB
    noise = make_payload(kind="random", nbytes=1 << 20, seed=0)    # float32, 1 MiB
"""

from __future__ import annotations

from typing import Literal

import numpy as np

PayloadKind = Literal["random", "atari"]
FRAME = 84


def make_payload(*, kind: PayloadKind, nbytes: int, seed: int) -> np.ndarray:
    """A 1-D array of exactly ``nbytes`` bytes of the given kind (pre-touched, ready to send)."""
    rng = np.random.default_rng(seed)
    if kind == "random":
        out = rng.standard_normal(nbytes // 4, dtype=np.float32)
        if nbytes % 4:
            out = np.concatenate([out.view(np.uint8), np.zeros(nbytes % 4, np.uint8)])
        return out
    if kind == "atari":
        frames = -(-nbytes // (FRAME * FRAME))
        return _atari_frames(count=frames, rng=rng).reshape(-1)[:nbytes].copy()
    raise ValueError(f"unknown payload kind {kind!r}; expected 'random' or 'atari'")


def _atari_frames(*, count: int, rng: np.random.Generator) -> np.ndarray:
    base = np.zeros((FRAME, FRAME), np.uint8)
    base[:10] = 236                              # score strip
    base[10:14] = 144                            # top wall
    base[14:78] = 87                             # playfield
    base[78:] = 144                              # bottom wall
    frames = np.repeat(base[None], count, axis=0)
    t = np.arange(count)
    left = 20 + (np.sin(t / 7.0) * 20).astype(int)
    right = 20 + (np.cos(t / 5.0) * 20).astype(int)
    ball_y = 16 + (t * 3) % 58
    ball_x = 8 + (t * 5) % 68
    for i in range(count):
        frames[i, 14 + left[i]:30 + left[i], 4:6] = 213
        frames[i, 14 + right[i]:30 + right[i], 78:80] = 92
        frames[i, ball_y[i]:ball_y[i] + 2, ball_x[i]:ball_x[i] + 2] = 236
        frames[i, 2:8, 20:26] = 0 if rng.random() < 0.5 else 236  # a score digit that changes
    return frames

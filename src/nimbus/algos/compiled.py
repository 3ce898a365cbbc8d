"""Compiled minibatch losses: ``torch.compile`` of a learner's forward and loss (its backward compiled with it by
AOTAutograd), cached for the life of the process, so a warm learner worker compiles once, not per invocation.

Modes (``COMPILE_MODES``):

- ``off``: eager (the default: see docs/benchmarks.md for what compile buys and what its first call costs);
- ``compile``: ``torch.compile`` (inductor);
- ``graphs``: ``torch.compile(mode="reduce-overhead")``: on CUDA the compiled forward and backward replay as CUDA
  graphs; elsewhere it is ``compile``.

The optimizer step stays eager: on CUDA it is the fused Adam (one kernel for every tensor) and the non-finite
guard around it (algos/step.py) has no host read to hide. Inductor keeps its compiled kernels on disk as well
(``TORCHINDUCTOR_CACHE_DIR``, by default under the temp folder), so a fresh worker on the same machine reuses them
instead of generating them again.

A compiled function is keyed by the mode and what its caller passes as ``key`` (the loss's configuration); torch
guards on the model it is called with and on the shapes, so a new model or minibatch shape recompiles once.

Example::

    terms = compiled(fn=minibatch_terms_fn, key=("ppo", config_json), mode="compile")
    loss, parts = terms(model, minibatch, clip_coef_tensor)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch

CompileMode = Literal["off", "compile", "graphs"]
COMPILE_MODES: tuple[str, ...] = ("off", "compile", "graphs")
_COMPILED: dict[tuple[Any, ...], Callable[..., Any]] = {}   # (mode, key) -> compiled fn: lives as long as the worker


def compiled(*, fn: Callable[..., Any], key: tuple[Any, ...], mode: str) -> Callable[..., Any]:
    """``fn`` itself for ``off``, else its compiled form for ``mode``, made on the first call with this key."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode {mode!r}; known: {list(COMPILE_MODES)}")
    if mode == "off":
        return fn
    cache_key = (mode, key)
    if cache_key not in _COMPILED:
        _COMPILED[cache_key] = torch.compile(fn, mode="reduce-overhead" if mode == "graphs" else None, dynamic=False)
    return _COMPILED[cache_key]

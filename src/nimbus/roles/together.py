"""Greedy evaluation episodes played many at once: which env plays which episode, shared by roles/evaluate.py (one
policy, gymnasium envs) and marless/batched_eval.py (agents, PettingZoo parallel envs).

Episode ``k`` is played on an env reset with seed ``seed + k``, as one-at-a-time evaluation plays it, but up to
``len(envs)`` episodes run together: each step the caller's ``act`` chooses every live episode's actions at once (one
forward over their rows), then each env steps (``step``); an env whose episode ends starts the next unplayed episode
there and then. Live episodes are handed to ``act`` in their envs' order. Greedy actions draw no random numbers, so
an episode depends only on its seed and the policies, not on which env plays it or beside which episodes, up to the
rounding of a forward over many rows (it sums in another order than a one-row forward, and the rows' order moves Box
actions in their last bits). Torch runs on one thread
meanwhile: forwards of a few to ~100 rows, where two threads' barrier on a loaded machine cost ms a call.

Example (roles/evaluate.py ``_greedy_together``, whose ``_Episode`` keeps an env, its last observation, its return and
``over``)::

    played = play_together(envs=envs, episodes=100, seed=30_000, start=_start, step=_step,
                           act=lambda live: policy.actions(obs=np.stack([e.obs for e in live]), explore=False))
    played[7].total     # episode 7's return (its env reset with seed 30_007)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import torch


class Episode(Protocol):
    """What ``start`` makes of one episode: whatever the caller keeps, and whether the episode has ended."""

    over: bool


E = TypeVar("E", bound=Episode)


def play_together(*, envs: list[Any], episodes: int, seed: int, start: Callable[..., E],
                  act: Callable[[list[E]], Any], step: Callable[[E, Any], None]) -> list[E]:
    """Episodes ``0 .. episodes - 1`` in episode order, each as ``start(env=, seed=)`` began it (the env reset with
    seed ``seed + k``) and ``step(episode, action)`` played it until its ``over``; ``act(live)``: the live episodes'
    actions, one per episode, in their envs' order. An episode ``over`` as it starts is not stepped (its env takes
    the next)."""
    played: list[Any] = [None] * episodes
    pending = iter(range(episodes))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        slots = [_next(env=env, pending=pending, played=played, seed=seed, start=start) for env in envs]
        while live := [position for position, episode in enumerate(slots) if episode is not None]:
            for position, action in zip(live, act([slots[position] for position in live])):
                episode = slots[position]
                step(episode, action)
                if episode.over:
                    slots[position] = _next(env=envs[position], pending=pending, played=played, seed=seed,
                                            start=start)
    finally:
        torch.set_num_threads(threads)
    return played


def _next(*, env: Any, pending: Iterator[int], played: list[Any], seed: int, start: Callable[..., E]) -> E | None:
    """The next unplayed episode ``k``, started on ``env`` (reset with seed ``seed + k``), kept in ``played[k]``;
    one over as it starts is skipped; None: no episode left for ``env``."""
    for index in pending:
        episode = played[index] = start(env=env, seed=seed + index)
        if not episode.over:
            return episode
    return None

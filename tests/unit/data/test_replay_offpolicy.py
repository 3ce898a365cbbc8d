"""Off-policy replay strategies: Uniform, Prioritized, NStep, FIFO (hand-computed cases and properties)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from protocol_helpers import assert_implements

from nimbus.algos.base import KeySpec
from nimbus.data.buffer import Buffer
from nimbus.data.fragment_replay import FIFO, Circular
from nimbus.data.replay import NStep, Prioritized, ReplayBatch, ReplayStrategy, Uniform, nstep_returns

SPEC = {"x": KeySpec(shape=(), dtype="int64"), "rewards": KeySpec(shape=(), dtype="float32"),
        "terminated": KeySpec(shape=(), dtype="bool"), "truncated": KeySpec(shape=(), dtype="bool")}


def make_buffer(capacity: int) -> Buffer:
    return Buffer.create(spec=SPEC, capacity_rows=capacity, max_actors=8)


def ingest(buf: Buffer, *, x: np.ndarray, actor: int = 0, version: int = 0, rewards: np.ndarray | None = None,
           terminated: np.ndarray | None = None, truncated: np.ndarray | None = None) -> None:
    n = len(x)
    buf.ingest(invocation_id=uuid.uuid4().hex, actor_rank=actor, policy_version=version, arrays={
        "x": x, "rewards": np.ones(n, np.float32) if rewards is None else rewards,
        "terminated": np.zeros(n, bool) if terminated is None else terminated,
        "truncated": np.zeros(n, bool) if truncated is None else truncated})


def test_every_strategy_is_a_replay_strategy() -> None:
    for strategy in (Uniform(batch_rows=4), Prioritized(capacity_rows=8, batch_rows=4),
                     NStep(inner=Uniform(batch_rows=4), n=3, gamma=0.9, segment_rows=4), FIFO(fragment_rows=4)):
        assert_implements(strategy, ReplayStrategy, methods=("select", "consumed"))


# ------------------------------------------------------------------------------------------ Uniform
def test_uniform_waits_for_min_rows_then_draws_held_rows_only() -> None:
    with make_buffer(16) as buf:
        strategy = Uniform(batch_rows=64, min_rows=5, seed=0)
        ingest(buf, x=np.arange(4))
        assert strategy.sample(buffer=buf) is None
        ingest(buf, x=np.arange(4, 8))
        batch = strategy.sample(buffer=buf)
        assert batch is not None and batch.indices.shape == (64,)
        assert set(buf.read(indices=batch.indices)["x"]) == set(range(8))  # 64 draws over 8 rows: all seen
        assert np.array_equal(batch.seqs, batch.indices)                    # no wrap yet: seq = position
        assert strategy.sample(buffer=buf, rows=3).indices.shape == (3,)


def test_uniform_guard_skips_the_rows_the_next_ingests_overwrite() -> None:
    with make_buffer(8) as buf:
        ingest(buf, x=np.arange(8))                   # full: the next 4 ingested rows overwrite x = 0..3
        batch = Uniform(batch_rows=500, seed=1, guard_rows=4).sample(buffer=buf)
        assert set(buf.read(indices=batch.indices)["x"]) == {4, 5, 6, 7}
        ingest(buf, x=np.arange(8, 10))               # positions 0, 1 now hold x = 8, 9; oldest is x = 2
        batch = Uniform(batch_rows=500, seed=1, guard_rows=4).sample(buffer=buf)
        assert set(buf.read(indices=batch.indices)["x"]) == {6, 7, 8, 9}


# -------------------------------------------------------------------------------------- Prioritized
def test_prioritized_new_rows_get_max_priority_and_td_errors_set_priorities() -> None:
    with make_buffer(4) as buf:
        strategy = Prioritized(capacity_rows=4, batch_rows=2, alpha=1.0, beta0=0.5, beta_anneal_rows=8, eps=1e-12)
        ingest(buf, x=np.arange(4))
        batch = strategy.sample(buffer=buf)
        assert np.allclose(strategy.tree.get(indices=np.arange(4)), 1.0)       # max priority so far: 1
        assert np.allclose(batch.columns["weights"], 1.0)                      # equal priorities
        fixed = ReplayBatch(indices=np.array([0, 1, 2, 3]), seqs=np.array([0, 1, 2, 3]))
        assert strategy.update_priorities(buffer=buf, batch=fixed, td_errors=np.array([1.0, -3.0, 2.0, 4.0])) == 4
        assert np.allclose(strategy.tree.get(indices=np.arange(4)), [1, 3, 2, 4])
        assert strategy.beta(buffer=buf) == pytest.approx(0.5 + 0.5 * 4 / 8)
        batch = strategy.sample(buffer=buf, rows=4)
        # w_i = (p_i / p_min)^-β with p_min = 1, β = 0.75
        expected = np.power(strategy.tree.get(indices=batch.indices) / 1.0, -0.75)
        assert np.allclose(batch.columns["weights"], expected)
        ingest(buf, x=np.array([10]))                                          # overwrites position 0
        strategy.sample(buffer=buf)
        assert strategy.tree.get(indices=np.array([0]))[0] == pytest.approx(4.0)  # enters at the max (4)


def test_prioritized_skips_rows_overwritten_since_sampling() -> None:
    with make_buffer(4) as buf:
        strategy = Prioritized(capacity_rows=4, batch_rows=2, alpha=1.0, eps=1e-12)
        ingest(buf, x=np.arange(4))
        batch = ReplayBatch(indices=np.array([0, 1]), seqs=np.array([0, 1]))
        ingest(buf, x=np.array([10]))                                          # position 0 now holds seq 4
        assert strategy.update_priorities(buffer=buf, batch=batch, td_errors=np.array([7.0, 5.0])) == 1
        assert strategy.tree.get(indices=np.array([1]))[0] == pytest.approx(5.0)


@settings(max_examples=25, deadline=None)
@given(priorities=st.lists(st.floats(min_value=0.05, max_value=10.0), min_size=2, max_size=12),
       alpha=st.sampled_from([0.5, 1.0]))
def test_prioritized_sampling_frequencies_follow_the_priorities(priorities: list[float], alpha: float) -> None:
    n = len(priorities)
    with make_buffer(n) as buf:
        strategy = Prioritized(capacity_rows=n, batch_rows=1, alpha=alpha, eps=1e-12, seed=3)
        ingest(buf, x=np.arange(n))
        strategy.update_priorities(buffer=buf, batch=ReplayBatch(indices=np.arange(n), seqs=np.arange(n)),
                                   td_errors=np.array(priorities))
        draws = 20_000
        counts = np.bincount(strategy.sample(buffer=buf, rows=draws).indices, minlength=n)
        p = np.power(priorities, alpha)
        expected = p / p.sum()
        assert np.abs(counts / draws - expected).max() < 0.02


# -------------------------------------------------------------------------------------------- NStep
def test_nstep_returns_hand_computed() -> None:
    gamma = 0.5
    rewards = np.array([[1.0, 2.0, 4.0],     # no end: 1 + 0.5·2 + 0.25·4 = 3, discount 0.125
                        [1.0, 2.0, 4.0],     # terminated at step 1: 1 + 0.5·2 = 2, discount 0
                        [1.0, 2.0, 4.0],     # truncated at step 0: 1, discount 0.5 (bootstrap)
                        [1.0, 2.0, 4.0]])    # fragment ends after 2 steps: 1 + 1 = 2, discount 0.25
    terminated = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 0]], bool)
    truncated = np.array([[0, 0, 0], [0, 0, 0], [1, 0, 0], [0, 0, 0]], bool)
    returns, discount, last = nstep_returns(rewards=rewards, terminated=terminated, truncated=truncated,
                                            valid_steps=np.array([3, 3, 3, 2]), gamma=gamma)
    assert np.allclose(returns, [3.0, 2.0, 1.0, 2.0])
    assert np.allclose(discount, [0.125, 0.0, 0.5, 0.25])
    assert np.array_equal(last, [2, 1, 0, 1])


class _Fixed(Uniform):
    """A sampler that returns the given positions (to test NStep on chosen rows)."""

    def __init__(self, positions: list[int]) -> None:
        super().__init__(batch_rows=len(positions))
        self.positions = np.array(positions)

    def sample(self, *, buffer: Buffer, rows: int | None = None) -> ReplayBatch | None:
        return ReplayBatch(indices=self.positions, seqs=buffer.read_meta(indices=self.positions)["ingest_seq"])


def test_nstep_on_the_buffer_respects_fragments_and_episode_ends() -> None:
    with make_buffer(16) as buf:
        # one ingest of 2 envs × 4 steps, env-major: env 0 = rows 0-3, env 1 = rows 4-7; env 1 terminates at 5
        ingest(buf, x=np.arange(8), rewards=np.arange(1, 9, dtype=np.float32),
               terminated=np.array([0, 0, 0, 0, 0, 1, 0, 0], bool))
        strategy = NStep(inner=_Fixed([0, 2, 4, 6]), n=3, gamma=0.5, segment_rows=4)
        batch = strategy.sample(buffer=buf)
        # row 0: 1 + 0.5·2 + 0.25·3 = 2.75 → next_obs of row 2; row 2: 3 + 0.5·4 (fragment end) → row 3
        # row 4: 5 + 0.5·6 (terminated) → row 5, discount 0; row 6: 7 + 0.5·8 → row 7
        assert np.allclose(batch.columns["returns_n"], [2.75, 5.0, 8.0, 11.0])
        assert np.allclose(batch.columns["discount_n"], [0.125, 0.25, 0.0, 0.25])
        assert np.array_equal(batch.next_indices, [2, 3, 5, 7])
        assert np.array_equal(batch.next_seqs, [2, 3, 5, 7])


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.integers(1, 5), segment=st.integers(1, 6))
def test_nstep_matches_a_step_by_step_reference(data, n: int, segment: int) -> None:
    rows = 3 * segment
    rewards = np.array(data.draw(st.lists(st.integers(-3, 3), min_size=rows, max_size=rows)), np.float32)
    ends = data.draw(st.lists(st.sampled_from(["", "term", "trunc"]), min_size=rows, max_size=rows))
    terminated, truncated = np.array([e == "term" for e in ends]), np.array([e == "trunc" for e in ends])
    with make_buffer(rows) as buf:
        ingest(buf, x=np.arange(rows), rewards=rewards, terminated=terminated, truncated=truncated)
        batch = NStep(inner=_Fixed(list(range(rows))), n=n, gamma=0.9, segment_rows=segment).sample(buffer=buf)
    for t in range(rows):
        ret, k = 0.0, 0
        while True:
            ret += 0.9 ** k * rewards[t + k]
            k += 1
            if terminated[t + k - 1] or truncated[t + k - 1] or k == n or (t + k) % segment == 0:
                break
        assert batch.columns["returns_n"][t] == pytest.approx(ret, abs=1e-4)
        assert batch.next_indices[t] == t + k - 1
        assert batch.columns["discount_n"][t] == pytest.approx(0.0 if terminated[t + k - 1] else 0.9 ** k)


# --------------------------------------------------------------------------------------------- FIFO
def test_fifo_takes_whole_fragments_oldest_first_once() -> None:
    with make_buffer(32) as buf:
        strategy = FIFO(fragment_rows=4, fragments_per_batch=2)
        ingest(buf, x=np.arange(0, 4), actor=1)
        assert strategy.sample(buffer=buf) is None and strategy.pending_fragments(buffer=buf) == 1
        ingest(buf, x=np.arange(4, 8), actor=0)
        ingest(buf, x=np.arange(8, 12), actor=1)
        batch = strategy.sample(buffer=buf)
        assert list(buf.read(indices=batch.indices)["x"]) == list(range(8))
        assert strategy.pending_fragments(buffer=buf) == 1 and strategy.sample(buffer=buf) is None
        ingest(buf, x=np.arange(12, 16), actor=0)
        assert list(buf.read(indices=strategy.sample(buffer=buf).indices)["x"]) == list(range(8, 16))


def test_fifo_skips_and_counts_fragments_overwritten_before_taken() -> None:
    with make_buffer(8) as buf:
        strategy = FIFO(fragment_rows=4, fragments_per_batch=1)
        for start in range(0, 16, 4):
            ingest(buf, x=np.arange(start, start + 4))
        batch = strategy.sample(buffer=buf)
        assert list(buf.read(indices=batch.indices)["x"]) == [8, 9, 10, 11] and strategy.lost_fragments == 2


@settings(max_examples=30, deadline=None)
@given(order=st.lists(st.integers(0, 3), min_size=1, max_size=24))
def test_fifo_keeps_each_actors_order_and_takes_every_fragment_once(order: list[int]) -> None:
    with make_buffer(4 * 64) as buf:
        strategy, sent, taken = FIFO(fragment_rows=4, fragments_per_batch=1), {}, []
        for actor in order:
            k = sent.get(actor, 0)
            sent[actor] = k + 1
            ingest(buf, x=np.full(4, actor * 1000 + k), actor=actor)
        while (batch := strategy.sample(buffer=buf)) is not None:
            taken.append(int(buf.read(indices=batch.indices)["x"][0]))
    assert sorted(taken) == sorted(a * 1000 + k for a, c in sent.items() for k in range(c))
    for actor in sent:
        mine = [v for v in taken if v // 1000 == actor]
        assert mine == sorted(mine)


def test_prioritized_refuses_a_zero_eps() -> None:
    with pytest.raises(ValueError, match="eps > 0"):
        Prioritized(capacity_rows=4, batch_rows=2, eps=0.0)


def test_prioritized_guard_skips_the_rows_the_next_ingests_overwrite() -> None:
    with make_buffer(8) as buf:
        strategy = Prioritized(capacity_rows=8, batch_rows=500, alpha=1.0, seed=1, guard_rows=4)
        ingest(buf, x=np.arange(8))                   # full: the next 4 ingested rows overwrite x = 0..3
        strategy.sample(buffer=buf)
        everywhere = ReplayBatch(indices=np.arange(8), seqs=np.arange(8))
        strategy.update_priorities(buffer=buf, batch=everywhere, td_errors=np.array([50.0] * 4 + [1.0] * 4))
        batch = strategy.sample(buffer=buf)           # x = 0..3 hold most of the mass, yet are never drawn
        assert set(buf.read(indices=batch.indices)["x"]) == {4, 5, 6, 7}
        assert np.allclose(strategy.tree.get(indices=np.arange(4)), 50.0)     # their priorities are kept
        assert np.all(batch.columns["weights"] > 0)


# ------------------------------------------------------------------------------- Circular (IMPACT)
def test_circular_replays_each_fifo_batch_k_times_round_robin() -> None:
    with make_buffer(64) as buf:
        strategy = Circular(inner=FIFO(fragment_rows=4), batches=2, replays=3)
        assert strategy.sample(buffer=buf) is None
        for i in range(3):
            ingest(buf, x=np.arange(4 * i, 4 * i + 4))
        firsts = [int(strategy.sample(buffer=buf).seqs[0]) for _ in range(8)]
        # slots hold fragments 0 and 4; each is used 3 times, then fragment 8 takes the free slot
        assert firsts == [0, 4, 0, 4, 0, 4, 8, 8]
        assert strategy.taken_rows == 12 and strategy.replayed_batches == 5
        assert strategy.pending_fragments(buffer=buf) == 1                 # fragment 8 still has a use left

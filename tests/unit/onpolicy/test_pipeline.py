"""ARTOS pipelines: the pipelined PPO update equals the unpipelined one (issue 3), and TransferTrigger."""

from __future__ import annotations

import copy
import random
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.data.triggers import TransferTrigger
from nimbus.envs.spaces import EnvSpaces
from nimbus.onpolicy.loader import DeviceLoader
from nimbus.onpolicy.pipeline import GAE_KEYS, STAGES, TRAIN_KEYS, PipelineOptions, StreamingPPOUpdate, run_unpipelined

NUM_ENVS, STEPS = 3, 20  # a block = one actor's fragment: 3 envs × 20 steps, env-major


def _setup(*, continuous: bool, seed: int = 0) -> tuple[PPO, torch.nn.Module]:
    algo = PPO(config=PPOConfig(num_epochs=3, minibatch_size=16, target_kl=None, hidden_sizes=(16, 16)))
    action = gym.spaces.Box(-1, 1, (2,), np.float32) if continuous else gym.spaces.Discrete(3)
    torch.manual_seed(seed)
    model = algo.make_model(spaces=EnvSpaces(observation=gym.spaces.Box(-5, 5, (4,), np.float32), action=action))
    return algo, model


def _block(*, algo: PPO, model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    rows = NUM_ENVS * STEPS
    obs = torch.randn(rows, 4, generator=g)
    with torch.no_grad():
        out = algo.act(model=model, obs=obs, explore=True)
    terminated = torch.rand(rows, generator=g) < 0.05
    cut = terminated | (torch.rand(rows, generator=g) < 0.03)
    cut.view(NUM_ENVS, STEPS)[:, -1] = True  # every env's fragment ends: GAE never crosses a block
    return {"obs": obs, "actions": torch.as_tensor(out.actions), "log_prob": torch.as_tensor(out.extras["log_prob"]),
            "values": torch.as_tensor(out.extras["values"]), "rewards": torch.randn(rows, generator=g),
            "next_values": torch.randn(rows, generator=g), "terminated": terminated, "cut": cut}


def _fresh(algo: PPO, model: torch.nn.Module) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    clone = copy.deepcopy(model)
    return clone, algo.make_optimizer(model=clone)


def _assert_same(a: torch.nn.Module, b: torch.nn.Module, *, atol: float = 1e-6) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, atol=atol, rtol=0, msg=name)


def _stream(*, algo, model, optimizer, blocks, options, arrival_order, delay_s=0.0):
    """Feed blocks from a producer thread in ``arrival_order``, stage by stage when dual_stage."""
    update = StreamingPPOUpdate(algo=algo, model=model, optimizer=optimizer,
                                block_rows=[len(b["rewards"]) for b in blocks], options=options, progress=0.25,
                                generator=torch.Generator().manual_seed(11))

    def produce() -> None:
        for index in arrival_order:
            stages = STAGES if options.dual_stage else (tuple(blocks[index]),)
            for keys in stages:
                time.sleep(delay_s)
                update.add_stage(block=index, arrays={key: blocks[index][key] for key in keys})

    producer = threading.Thread(target=produce)
    producer.start()
    producer.join()
    return update


@pytest.mark.parametrize("continuous", [False, True])
def test_dual_stage_equals_postprocess_plus_ppo_update(continuous: bool) -> None:
    algo, model = _setup(continuous=continuous)
    blocks = [_block(algo=algo, model=model, seed=s) for s in range(3)]
    reference, ref_opt = _fresh(algo, model)
    batch = algo.postprocess(batch={key: torch.cat([b[key] for b in blocks]) for key in blocks[0]})
    ref_stats = algo.update(model=reference, optimizer=ref_opt, batch=batch, progress=0.25,
                            generator=torch.Generator().manual_seed(11))
    piped, opt = _fresh(algo, model)
    update = _stream(algo=algo, model=piped, optimizer=opt, blocks=blocks,
                     options=PipelineOptions(dual_stage=True), arrival_order=[2, 0, 1])
    got_batch, stats = update.finish()
    torch.testing.assert_close(got_batch["advantages"], batch["advantages"], atol=1e-6, rtol=0)
    torch.testing.assert_close(got_batch["returns"], batch["returns"], atol=1e-6, rtol=0)
    _assert_same(piped, reference)
    assert stats.num_gradient_steps == ref_stats.num_gradient_steps
    assert stats.policy_loss == pytest.approx(ref_stats.policy_loss, abs=1e-6)


@pytest.mark.parametrize("dual_stage", [False, True])
@pytest.mark.parametrize("loader", [False, True])
def test_minibatch_pipeline_equals_the_unpipelined_update(dual_stage: bool, loader: bool) -> None:
    algo, model = _setup(continuous=True, seed=3)
    blocks = [_block(algo=algo, model=model, seed=10 + s) for s in range(4)]
    options = PipelineOptions(minibatch=True, dual_stage=dual_stage, loader=loader)
    reference, ref_opt = _fresh(algo, model)
    ref_batch, ref_stats = run_unpipelined(algo=algo, model=reference, optimizer=ref_opt, blocks=blocks,
                                           options=options, progress=0.25, generator=torch.Generator().manual_seed(11))
    piped, opt = _fresh(algo, model)
    order = list(range(4))
    random.Random(5).shuffle(order)  # actors finish in any order
    update = _stream(algo=algo, model=piped, optimizer=opt, blocks=blocks, options=options, arrival_order=order,
                     delay_s=0.002)
    batch, stats = update.finish()
    _assert_same(piped, reference)
    torch.testing.assert_close(batch["advantages"], ref_batch["advantages"], atol=1e-6, rtol=0)
    assert stats.num_gradient_steps == ref_stats.num_gradient_steps
    assert stats.num_epochs_done == ref_stats.num_epochs_done
    assert stats.value_loss == pytest.approx(ref_stats.value_loss, abs=1e-6)


def test_minibatch_pipeline_steps_before_the_last_block_arrives() -> None:
    algo, model = _setup(continuous=False)
    blocks = [_block(algo=algo, model=model, seed=s) for s in range(3)]
    piped, opt = _fresh(algo, model)
    update = StreamingPPOUpdate(algo=algo, model=piped, optimizer=opt, block_rows=[60, 60, 60],
                                options=PipelineOptions(minibatch=True, dual_stage=True), progress=0.0,
                                generator=torch.Generator().manual_seed(0))
    update.add_stage(block=1, arrays={key: blocks[1][key] for key in GAE_KEYS + TRAIN_KEYS})
    assert update.attempts == 0  # block 0 comes first in the schedule
    update.add_stage(block=0, arrays={key: blocks[0][key] for key in GAE_KEYS})
    assert update.attempts == 0 and update.gae_done[0]  # GAE ran on stage 1 alone
    update.add_stage(block=0, arrays={key: blocks[0][key] for key in TRAIN_KEYS})
    assert update.attempts == 7  # 120 rows ready → 7 full minibatches of 16
    with pytest.raises(ValueError, match=r"blocks \[2\]"):
        update.finish()
    update.add_stage(block=2, arrays=blocks[2])
    assert update.attempts == 12  # epoch 1 done: ceil(180 / 16)
    _, stats = update.finish()
    assert stats.num_gradient_steps == 36


def test_device_loader_yields_the_gathers_in_order_and_stops_cleanly() -> None:
    batch = {"x": torch.arange(100.0).reshape(50, 2), "y": torch.arange(50)}
    chunks = [torch.randperm(50)[:8] for _ in range(10)]
    got = list(DeviceLoader(batch=batch, index_batches=chunks, device=torch.device("cpu")))
    for minibatch, rows in zip(got, chunks):
        torch.testing.assert_close(minibatch["y"], rows)
    assert len(got) == 10
    for _ in DeviceLoader(batch=batch, index_batches=chunks, device=torch.device("cpu"), depth=1):
        break  # an abandoned loader must not leave its thread blocked


def test_transfer_trigger_sends_stages_in_order_when_their_keys_are_cached() -> None:
    trigger = TransferTrigger(keys_in_order=(("rewards", "values"), ("obs",)))
    trigger.offer(arrays={"obs": np.zeros(3), "rewards": np.ones(3)})
    assert not trigger.check(now_s=0.0)  # stage 1 lacks "values"; stage 2 must wait for stage 1
    trigger.offer(arrays={"values": np.ones(3), "ignored": np.ones(3)})
    assert trigger.check(now_s=0.0) and sorted(trigger.take()) == ["rewards", "values"]
    assert trigger.check(now_s=0.0) and list(trigger.take()) == ["obs"]
    assert trigger.done and not trigger.check(now_s=0.0)
    with pytest.raises(RuntimeError):
        trigger.take()
    with pytest.raises(ValueError):
        TransferTrigger(keys_in_order=(("a",), ("a", "b")))


def test_a_non_finite_minibatch_is_skipped_and_counted_and_the_weights_kept() -> None:
    """NaN rewards make every minibatch's loss NaN: each step is skipped on the device (no weight or Adam state
    changes), and the one read at ``finish`` counts them."""
    algo, model = _setup(continuous=False)
    blocks = [_block(algo=algo, model=model, seed=s) for s in range(2)]
    blocks[1]["rewards"][0] = float("nan")   # block 1's advantages, hence every minibatch of epochs 2..K, NaN
    piped, opt = _fresh(algo, model)
    update = _stream(algo=algo, model=piped, optimizer=opt, blocks=blocks,
                     options=PipelineOptions(minibatch=True, dual_stage=True), arrival_order=[0, 1])
    _, stats = update.finish()
    assert stats.num_skipped_steps > 0 and stats.num_gradient_steps + stats.num_skipped_steps == update.attempts
    assert all(torch.isfinite(p).all() for p in piped.parameters())
    assert all(torch.isfinite(t).all() for s in opt.state.values() for t in s.values())

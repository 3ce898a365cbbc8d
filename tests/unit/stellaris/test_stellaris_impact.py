"""Stellaris with IMPACT: gradient tasks of whole env columns, the learner's IMPACT gradient (target network,
cross-learner truncation of π/μ) and the parameter function's target refresh, on a real ShmStore."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nimbus.algos.impala.algorithm import Impala
from nimbus.algos.impala.config import ImpalaConfig
from nimbus.algos.impala.loss import batch_loss
from nimbus.algos.ppo.config import PPOConfig
from nimbus.data.codec import Message
from nimbus.data.store import ShmStore
from nimbus.models.weights import load_model, weights_key
from nimbus.stellaris.gradients import ImpactGradients, PPOGradients
from nimbus.stellaris.learner import GRAD_PREFIX, GradientRequest, gradient_learner_function
from nimbus.stellaris.parameter import ParameterRequest, parameter_function
from tests.unit.function_helpers import cartpole_spaces, ctx, on_store, publish

T, COLUMNS = 8, 6
CONFIG = ImpalaConfig(variant="impact", rollout_length=T, hidden_sizes=(8,), lr=0.01, target_update_interval=2)


def model_fields(*, version: int, peers=(), truncation: str = "none", key: str = "") -> GradientRequest:
    return GradientRequest(env_id="CartPole-v1", env_kwargs={}, algo=CONFIG.model_dump(mode="json"), policy="main",
                           policy_version=version, batch_key="batch/main/r0", grad_key=key, peer_versions=list(peers),
                           truncation=truncation, rho=1.0, progress=0.0, device="cpu", torch_threads=1)


def grad(store: ShmStore, *, version: int, key: str, columns, peers=(), truncation: str = "none") -> Message:
    request = model_fields(version=version, peers=peers, truncation=truncation, key=key)
    return gradient_learner_function(context=ctx("gradient_learner"),
                                     request=on_store(request.to_task_message(positions=np.asarray(columns)), store))


def apply(store: ShmStore, *, version: int, keys) -> Message:
    request = ParameterRequest(model=dict(vars(model_fields(version=version))), policy_version=version,
                               has_optimizer_state=version > 0, keys=list(keys), scales=[1.0] * len(keys),
                               separate_steps=False, progress=0.0)
    return parameter_function(context=ctx("parameter"), request=on_store(request.to_message(), store))


def flat_rows(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """COLUMNS env fragments of T steps, env-major (as the actors write them); μ is the model's policy with noise
    (an actor's older version), so π/μ is on both sides of 1."""
    rng = np.random.default_rng(0)
    n = T * COLUMNS
    obs = rng.normal(size=(n, 4)).astype(np.float32)
    actions = rng.integers(0, 2, size=n)
    with torch.no_grad():
        dist = model.net.distribution(torch.as_tensor(obs))
        behaviour = dist.log_prob(torch.as_tensor(actions)).numpy() + rng.normal(scale=0.3, size=n)
    terminated = np.zeros(n, bool)
    terminated[[5, 20]] = True
    return {"obs": obs, "actions": actions.astype(np.int64), "rewards": np.ones(n, np.float32),
            "next_obs": rng.normal(size=(n, 4)).astype(np.float32), "terminated": terminated,
            "truncated": np.zeros(n, bool), "behaviour_log_prob": behaviour.astype(np.float32)}


@pytest.fixture
def model(store):
    torch.manual_seed(0)
    model = Impala(config=CONFIG).make_model(spaces=cartpole_spaces())
    with torch.no_grad():   # π ≠ π_target from the start, so the surrogate's ratio is not 1
        for param in model.net.parameters():
            param.add_(0.3 * torch.randn_like(param))
    publish(store, model=model, version=0)
    store.put(key="batch/main/r0", message=Message(header={}, arrays=flat_rows(model)))
    return model


def test_impact_slices_are_whole_columns_shared_by_the_learners_and_replayed_k_times():
    config = ImpalaConfig(variant="impact", rollout_length=32, circular_buffer_replays=2)
    impact = ImpactGradients()
    assert impact.unit_rows(config=config) == 32 and impact.passes(config=config) == 2
    # 16 columns, 3 learners: slices of 6 columns (the last of a round 4), as the tasks before slices
    assert impact.default_slice_rows(config=config, batch_rows=16 * 32, learners=3) == 6 * 32
    assert impact.positions(config=config, rows=6 * 32).tolist() == list(range(6))


def test_ppo_slices_are_its_minibatches_learned_for_each_epoch():
    config = PPOConfig(num_epochs=3, minibatch_size=64)
    ppo = PPOGradients()
    assert ppo.default_slice_rows(config=config, batch_rows=256, learners=3) == 64 and ppo.passes(config=config) == 3
    assert ppo.positions(config=config, rows=64).tolist() == list(range(64))


def test_the_learner_puts_the_impact_gradient_of_its_columns_and_no_target_gradient(store, model):
    result = grad(store, version=0, key="grad/main/0", columns=[1, 4])
    assert not result.header["nonfinite"] and result.header["rows"] == 2 * T
    assert result.header["stats"]["losses/target_log_ratio_max"] > 0   # the loss saw π ≠ π_target
    stored = store.get(key="grad/main/0").arrays
    assert stored and all(name.startswith(GRAD_PREFIX + "net.") for name in stored)
    # the same loss by hand on the time-major batch's columns 1 and 4
    rows = {k: torch.as_tensor(np.array(v)) for k, v in store.get(key="batch/main/r0").arrays.items()}
    time_major = Impala(config=CONFIG).postprocess(batch=rows)
    batch_loss(model=model, batch={k: v[:, [1, 4]] for k, v in time_major.items()}, config=CONFIG).loss.backward()
    for name, param in model.net.named_parameters():
        assert np.allclose(stored[GRAD_PREFIX + "net." + name], param.grad.numpy(), atol=1e-6), name


@pytest.mark.parametrize("form", ["paper", "code"])
def test_a_peer_truncates_the_impact_ratio(store, model, form):
    drifted = Impala(config=CONFIG).make_model(spaces=cartpole_spaces())
    drifted.load_state_dict(model.state_dict())
    with torch.no_grad():
        for param in drifted.net.parameters():
            param.add_(0.5 * torch.randn_like(param))
    publish(store, model=drifted, version=1)
    plain = grad(store, version=0, key="grad/main/a", columns=[0, 2, 3])
    cut = grad(store, version=0, key="grad/main/b", columns=[0, 2, 3], peers=[1], truncation=form)
    assert cut.header["stats"]["truncated_fraction"] > 0.1
    assert "truncated_fraction" not in plain.header["stats"]
    a, b = store.get(key="grad/main/a").arrays, store.get(key="grad/main/b").arrays
    assert any(not np.allclose(a[k], b[k]) for k in a)


def test_the_parameter_function_refreshes_the_target_every_n_steps_and_publishes_it(store, model):
    def published(version: int) -> torch.nn.Module:
        held = Impala(config=CONFIG).make_model(spaces=cartpole_spaces())
        load_model(model=held, message=store.get(key=weights_key(policy="main", version=version)))
        return held

    def same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
        return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))

    target_0 = published(0).target_net
    for version in (0, 1):
        grad(store, version=version, key=f"grad/main/{version}", columns=[0, 1, 2])
        result = apply(store, version=version, keys=[f"grad/main/{version}"])
        assert result.header["published"] and result.header["applied"] == 1 and not result.header["refused"]
    v1, v2 = published(1), published(2)
    assert int(v1.num_grad_steps) == 1 and int(v2.num_grad_steps) == 2
    assert same(v1.target_net, target_0) and not same(v1.net, v1.target_net)   # step 1 of N = 2: not refreshed
    assert same(v2.net, v2.target_net) and not same(v2.target_net, target_0)   # step 2: π copied into the target

"""Stellaris's learner (gradient) and parameter functions, called in-process on a real ShmStore."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.data.codec import Message
from nimbus.data.store import ShmStore
from nimbus.models.weights import load_model, optim_key, weights_key
from nimbus.stellaris.learner import GRAD_PREFIX, GradientRequest, gradient_learner_function
from nimbus.stellaris.parameter import ParameterRequest, parameter_function
from tests.unit.function_helpers import cartpole_spaces, ctx, on_store, publish

ROWS = 64


def algo() -> PPO:
    return PPO(config=PPOConfig(hidden_sizes=(8,), minibatch_size=ROWS, lr=0.01))


def batch(store: ShmStore, model: torch.nn.Module) -> str:
    generator = np.random.default_rng(0)
    obs = generator.normal(size=(ROWS, 4)).astype(np.float32)
    actions = generator.integers(0, 2, size=ROWS)
    with torch.no_grad():
        log_prob, _, values = model.evaluate(torch.as_tensor(obs), actions=torch.as_tensor(actions))
    arrays = {"obs": obs, "actions": actions.astype(np.int64), "log_prob": log_prob.numpy(),
              "values": values.numpy(), "next_values": values.numpy(), "rewards": np.ones(ROWS, np.float32),
              "terminated": np.zeros(ROWS, bool), "truncated": np.zeros(ROWS, bool),
              "cut": (np.arange(ROWS) % 16 == 15)}
    store.put(key="batch/main/r0", message=Message(header={}, arrays=arrays))
    return "batch/main/r0"


def grad_request(store: ShmStore, *, version: int, key: str, peers=(), truncation="paper") -> Message:
    request = GradientRequest(env_id="CartPole-v1", env_kwargs={}, algo=algo().config.model_dump(mode="json"),
                              policy="main", policy_version=version, batch_key="batch/main/r0", grad_key=key,
                              peer_versions=list(peers), truncation=truncation, rho=1.0, progress=0.0, device="cpu",
                              torch_threads=1)
    return on_store(request.to_task_message(positions=np.arange(ROWS)), store)


def param_request(store: ShmStore, *, version: int, keys, scales, separate=False) -> Message:
    model = dict(vars(GradientRequest(env_id="CartPole-v1", env_kwargs={}, algo=algo().config.model_dump(mode="json"),
                                      policy="main", policy_version=version, batch_key="", grad_key="",
                                      peer_versions=(), truncation="none", rho=1.0, progress=0.0, device="cpu",
                                      torch_threads=1)))
    return on_store(ParameterRequest(model=model, policy_version=version, has_optimizer_state=False, keys=list(keys),
                                     scales=list(scales), separate_steps=separate, progress=0.0).to_message(), store)


@pytest.fixture(name="model")   # the function named apart: a module that imports it may still take `model`
def model_fixture(store):
    torch.manual_seed(0)
    model = algo().make_model(spaces=cartpole_spaces())
    publish(store, model=model, version=0)
    batch(store, model)
    return model


def test_learner_puts_the_gradient_of_the_ppo_loss_and_steps_nothing(store, model):
    result = gradient_learner_function(context=ctx("gradient_learner"),
                                       request=grad_request(store, version=0, key="grad/main/0", truncation="none"))
    assert result.header["read_version"] == 0 and not result.header["nonfinite"]
    stored = store.get(key="grad/main/0")
    assert stored.header["read_version"] == 0
    # the same gradient computed here by hand
    reference = algo()
    rows = {k: torch.as_tensor(np.array(v)) for k, v in store.get(key="batch/main/r0").arrays.items()}
    from nimbus.algos.ppo.learner import minibatch_loss
    out = minibatch_loss(model=model, batch=reference.postprocess(batch=rows), config=reference.config, clip_coef=0.2)
    out.loss.backward()
    for name, param in model.named_parameters():
        assert np.allclose(stored.arrays[GRAD_PREFIX + name], param.grad.numpy(), atol=1e-6), name
    assert store.keys(prefix="weights/main") == [weights_key(policy="main", version=0)]


def test_a_retry_of_the_same_invocation_replaces_its_own_gradient(store, model):
    context = ctx("gradient_learner", invocation="inv-1")
    for _ in range(2):   # the second attempt of one invocation: one gradient under the key, no KeyExists
        gradient_learner_function(context=context, request=grad_request(store, version=0, key="grad/main/0"))
    assert store.keys(prefix="grad/main") == ["grad/main/0"]


def test_truncation_by_a_peer_changes_the_gradient(store, model):
    drifted = algo().make_model(spaces=cartpole_spaces())
    drifted.load_state_dict(model.state_dict())
    with torch.no_grad():
        for param in drifted.parameters():
            param.add_(0.5 * torch.randn_like(param))
    publish(store, model=drifted, version=1)
    plain = gradient_learner_function(context=ctx("g"), request=grad_request(store, version=0, key="grad/main/a",
                                                                              truncation="none"))
    cut = gradient_learner_function(context=ctx("g"), request=grad_request(store, version=0, key="grad/main/b",
                                                                            peers=[1]))
    assert cut.header["stats"]["truncated_fraction"] > 0.1
    assert "truncated_fraction" not in plain.header["stats"]
    a, b = store.get(key="grad/main/a").arrays, store.get(key="grad/main/b").arrays
    assert any(not np.allclose(a[k], b[k]) for k in a)


def test_parameter_function_applies_the_scaled_mean_once(store, model):
    for key in ("grad/main/0", "grad/main/1"):
        gradient_learner_function(context=ctx("g"), request=grad_request(store, version=0, key=key, truncation="none"))
    result = parameter_function(context=ctx("parameter"),
                                request=param_request(store, version=0, keys=["grad/main/0", "grad/main/1"],
                                                      scales=[1.0, 0.5]))
    assert result.header["published"] and result.header["policy_version"] == 1 and result.header["applied"] == 2
    # by hand (Eq. 4 as the update's learning rate): p.grad = (1.0·g + 0.5·g) / 1.5 = g, clipped to 0.5, then one
    # Adam step at lr α0 · mean(1.0, 0.5) = 0.75 α0
    grads = store.get(key="grad/main/0").arrays
    expected = algo().make_model(spaces=cartpole_spaces())
    expected.load_state_dict(model.state_dict())
    optimizer = algo().make_optimizer(model=expected)
    for group in optimizer.param_groups:
        group["lr"] = 0.75 * algo().config.lr
    for name, param in expected.named_parameters():
        param.grad = torch.as_tensor(np.array(grads[GRAD_PREFIX + name]))
    torch.nn.utils.clip_grad_norm_(expected.parameters(), 0.5)
    optimizer.step()
    published = algo().make_model(spaces=cartpole_spaces())
    load_model(model=published, message=store.get(key=weights_key(policy="main", version=1)))
    for (name, want), got in zip(expected.state_dict().items(), published.state_dict().values()):
        assert torch.allclose(want, got, atol=1e-6), name


def test_the_adam_step_of_a_stale_gradient_shrinks_by_eq_4s_factor(store, model):
    """Issue 26 item 7: one gradient at staleness 2 (v 3) scaled by 2^(-1/3) = 0.794; its Adam step must shrink by
    that factor, as a learning rate of α0/δ^(1/v) gives. Scaling the gradient instead (the code before) left Adam's
    first step unchanged (ratio 1.0: Adam divides the factor out)."""
    gradient_learner_function(context=ctx("g"), request=grad_request(store, version=0, key="grad/main/0",
                                                                      truncation="none"))
    steps = []
    for scale in (1.0, 2.0 ** (-1.0 / 3.0)):
        parameter_function(context=ctx("parameter"),
                           request=param_request(store, version=0, keys=["grad/main/0"], scales=[scale]))
        published = algo().make_model(spaces=cartpole_spaces())
        load_model(model=published, message=store.get(key=weights_key(policy="main", version=1)))
        steps.append(torch.cat([(p - q).flatten() for p, q in zip(published.parameters(), model.parameters())]))
        store.delete(key=weights_key(policy="main", version=1))
        store.delete(key=optim_key(policy="main", version=1))
    moved = steps[0].abs() > 1e-6
    ratio = steps[1][moved] / steps[0][moved]
    assert torch.allclose(ratio, torch.full_like(ratio, 2.0 ** (-1.0 / 3.0)), rtol=1e-3), ratio


def test_separate_steps_take_one_optimizer_step_per_gradient(store, model):
    for key in ("grad/main/0", "grad/main/1"):
        gradient_learner_function(context=ctx("g"), request=grad_request(store, version=0, key=key, truncation="none"))
    parameter_function(context=ctx("parameter"),
                       request=param_request(store, version=0, keys=["grad/main/0", "grad/main/1"], scales=[1, 1],
                                             separate=True))
    state = store.get(key=optim_key(policy="main", version=1)).header["scalars"]
    assert {values["step"] for values in state.values()} == {2.0}


@pytest.mark.parametrize("bad", ["nan", "shape"])
def test_a_bad_gradient_is_refused_and_the_weights_do_not_change(store, model, bad):
    gradient_learner_function(context=ctx("g"), request=grad_request(store, version=0, key="grad/main/0"))
    arrays = {k: np.array(v) for k, v in store.get(key="grad/main/0").arrays.items()}
    name = next(iter(arrays))
    arrays[name] = np.full_like(arrays[name], np.nan) if bad == "nan" else np.zeros((3, 3), np.float32)
    store.put(key="grad/main/bad", message=Message(header={"read_version": 0}, arrays=arrays))
    result = parameter_function(context=ctx("parameter"),
                                request=param_request(store, version=0, keys=["grad/main/bad"], scales=[1.0]))
    assert not result.header["published"] and result.header["policy_version"] == 0
    assert [r["key"] for r in result.header["refused"]] == ["grad/main/bad"]
    assert weights_key(policy="main", version=1) not in store.keys(prefix="weights/main")

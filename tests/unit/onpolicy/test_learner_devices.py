"""The learner-side functions on a CUDA-like device, proved on CPU (issue 25.2): each runs in-process under
tests/device_audit.py (which fails any op CUDA refuses: a CPU/device mix, numpy() of a device tensor), with
the lease's device from its context, and names the device it used. The numerics on a real GPU are the
``gpu`` tests' (tests/gpu/)."""

from __future__ import annotations

import dataclasses
import uuid

import gymnasium as gym
import numpy as np
import torch

from nimbus.algos.dqn import DQN, DQNConfig
from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.algos.sac import SAC, SACConfig
from nimbus.data.buffer import Buffer
from nimbus.data.codec import Message
from nimbus.data.replay import Uniform
from nimbus.data.store import ShmStore
from nimbus.data.stores import STORE_HEADER
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.weights import model_to_message, optim_key, weights_key
from nimbus.offpolicy.learner import OffPolicyLearnerRequest, offpolicy_learner_function
from nimbus.onpolicy.learner import learner_function
from nimbus.roles.learner import LearnerRequest
from nimbus.roles.probe import ProbeRequest
from nimbus.runtime.base import FunctionContext
from tests.algo_batches import host_batch
from tests.device_audit import DeviceAudit
from tests.unit.function_helpers import cartpole_spaces, on_store, publish

PROBE = ProbeRequest(subset_size=32, max_iterations=4, tolerance=1e-3).to_header()


def spaces_of(env_id: str) -> EnvSpaces:
    env = gym.make(env_id)
    return EnvSpaces(observation=env.observation_space, action=env.action_space)


def leased_context(*, cache: dict | None = None) -> FunctionContext:
    return FunctionContext(worker_id="w0", function="learner", invocation_id=uuid.uuid4().hex, attempt=1,
                           cache={} if cache is None else cache, device="cpu:0")


def _filled(*, algo, spaces: EnvSpaces) -> Buffer:
    buffer = Buffer.create(spec=algo.buffer_spec(spaces=spaces), capacity_rows=64, max_actors=2)
    rows = host_batch(algo=algo, spaces=spaces, seed=0)
    if "obs" in rows:
        rows["obs"] = rows["obs"][:, :spaces.observation.shape[0]]
    buffer.ingest(invocation_id=uuid.uuid4().hex, actor_rank=0, policy_version=0, arrays=rows)
    return buffer


def _published_on_cpu(store: ShmStore, *, version: int) -> None:
    for key in (weights_key(policy="main", version=version), optim_key(policy="main", version=version)):
        for array in store.get(key=key).arrays.values():
            assert isinstance(array, np.ndarray) and array.flags["C_CONTIGUOUS"]


def test_the_ppo_learner_and_its_hessian_probe_mix_no_devices(store: ShmStore) -> None:
    spaces = spaces_of("CartPole-v1")
    algo = PPO(config=PPOConfig(num_epochs=2, minibatch_size=32))
    store.put(key=weights_key(policy="main", version=0),
              message=model_to_message(model=algo.make_model(spaces=spaces), version=0))
    cache: dict = {}
    with _filled(algo=algo, spaces=spaces) as buffer:
        for version in (0, 1):   # the second one warm: its model was placed by the first
            request = LearnerRequest(env_id="CartPole-v1", env_kwargs={}, algo=algo.config.model_dump(mode="json"),
                                     policy="main", policy_version=version, has_optimizer_state=version > 0,
                                     buffer=buffer.descriptor(), progress=0.0, seed=0, device="cuda",
                                     torch_threads=1, probe=PROBE).to_message(indices=np.arange(64))
            request.header[STORE_HEADER] = {"backend": "shm", "namespace": store.namespace}
            with DeviceAudit():
                result = learner_function(context=leased_context(cache=cache), request=request)
            assert result.header["device"] == "cpu"   # the lease (cpu:0), not learner.device (cuda)
            assert np.isfinite(result.header["extras"]["hessian_lambda_max"])
            _published_on_cpu(store, version=version + 1)


def _offpolicy(*, store: ShmStore, algo, env_id: str, td_errors: bool) -> Message:
    spaces = spaces_of(env_id)
    store.put(key=weights_key(policy="main", version=0),
              message=model_to_message(model=algo.make_model(spaces=spaces), version=0))
    with _filled(algo=algo, spaces=spaces) as buffer:
        batch = Uniform(batch_rows=32, seed=0).sample(buffer=buffer)
        request = OffPolicyLearnerRequest(
            env_id=env_id, env_kwargs={}, algo=algo.config.model_dump(mode="json"), policy="main",
            policy_version=0, has_optimizer_state=False, buffer=buffer.descriptor(), progress=0.5, seed=0,
            device="cuda", torch_threads=1, return_td_errors=td_errors, probe=PROBE).to_batch_message(batch=batch)
        request.header[STORE_HEADER] = {"backend": "shm", "namespace": store.namespace}
        with DeviceAudit():
            result = offpolicy_learner_function(context=leased_context(), request=request)
    assert result.header["device"] == "cpu"
    _published_on_cpu(store, version=1)
    return result


def test_the_dqn_learner_with_td_errors_mixes_no_devices(store: ShmStore) -> None:
    algo = DQN(config=DQNConfig(hidden_sizes=(8,), batch_size=16, buffer_capacity=64, prioritized=True))
    result = _offpolicy(store=store, algo=algo, env_id="CartPole-v1", td_errors=True)
    assert result.arrays["td_errors"].shape == (32,)


def test_the_sac_learner_mixes_no_devices(store: ShmStore) -> None:
    algo = SAC(config=SACConfig(hidden_sizes=(8,), batch_size=16, buffer_capacity=64, learning_starts=0))
    result = _offpolicy(store=store, algo=algo, env_id="Pendulum-v1", td_errors=False)
    assert result.header["stats"]["num_gradient_steps"] == 2


def test_the_multi_agent_critic_and_policy_learners_mix_no_devices(store: ShmStore) -> None:
    """MAPPO (centralised critic, ValueNorm) then the policy with its probe, on a leased device."""
    from nimbus.marless.learner import critic_function, policy_function, postprocess_function
    from tests.unit.marless.marless_harness import ctx
    from tests.unit.marless.test_marless_learner import MAPPO, request, round_zero

    agents, _ = round_zero(store, algo=MAPPO, agent_policy=dict.fromkeys(["agent_0", "agent_1", "agent_2"],
                                                                          "p_agent_0"))
    req = request(store, algo=MAPPO, agents=agents, probe={"subset_size": 32, "max_iterations": 4, "tolerance": 1e-3})
    postprocess_function(context=ctx("postprocess"), request=req)
    for function in (critic_function, policy_function):
        context = ctx(function.__name__)
        context.device = "cpu:0"
        with DeviceAudit():
            header = function(context=context, request=req).header
        assert header["device"] == "cpu"


def test_the_multi_agent_value_learner_mixes_no_devices(store: ShmStore) -> None:
    """VDN's team function (marless/team_learner.py): every policy's nets, their targets and the joint replay on
    the leased device, twice (the second warm, from the first's versions), with the probe."""
    from nimbus.algos.multiagent.config import VDNConfig
    from nimbus.algos.multiagent.vdn import VDN
    from nimbus.marless.team_learner import team_value_function
    from nimbus.marless.value_learner import team_post_key
    from tests.unit.marless import test_marless_value_learner as harness

    algo = VDN(config=harness.small(VDNConfig, gradient_steps=3, batch_size=16))
    harness.setup_policies(store=store, algo=algo, agent_policy=harness.OWN)
    policies = harness.load_policies(store=store, algo=algo, agent_policy=harness.OWN, versions={"p_agent_0": 0,
                                                                                                   "p_agent_1": 0})
    harness.put_round(store=store, algo=algo, round=0, agent_policy=harness.OWN, rows=harness.game_rows(
        policies=policies, algo=algo, num_envs=8, rng=np.random.default_rng(0)))
    worker = leased_context()
    for version in (0, 1):
        request = harness.team_request(algo=algo, round=0, agent_policy=harness.OWN,
                                       versions={"p_agent_0": version, "p_agent_1": version},
                                       replay_keys=[team_post_key(round=0)])
        request = dataclasses.replace(request, probe={"subset_size": 16, "max_iterations": 4, "tolerance": 1e-3})
        with DeviceAudit():
            header = team_value_function(context=worker, request=on_store(request.to_message(), store)).header
        assert header["device"] == "cpu"
        assert {p: s["gradient_steps_run"] for p, s in header["policies"].items()} == {"p_agent_0": 3, "p_agent_1": 3}


def test_the_stellaris_gradient_and_parameter_functions_mix_no_devices(store: ShmStore) -> None:
    """PPO gradients with truncation by a peer (its model on the device too), then the parameter function."""
    from tests.unit.stellaris import test_stellaris_functions as harness

    torch.manual_seed(0)
    model = harness.algo().make_model(spaces=cartpole_spaces())
    publish(store, model=model, version=0)
    publish(store, model=model, version=5)   # a peer's version (truncation reads it)
    harness.batch(store, model)
    cache: dict = {}
    for key in ("grad/main/0", "grad/main/1"):
        with DeviceAudit():
            header = learner_header(harness.gradient_learner_function, cache=cache,
                                    request=harness.grad_request(store, version=0, key=key, peers=[5]))
        assert header["device"] == "cpu" and not header["nonfinite"]
    with DeviceAudit():
        header = learner_header(harness.parameter_function, cache={}, request=harness.param_request(
            store, version=0, keys=["grad/main/0", "grad/main/1"], scales=[1.0, 0.5]))
    assert header["published"] and header["device"] == "cpu"
    _published_on_cpu(store, version=1)


def learner_header(function, *, cache: dict, request: Message) -> dict:
    return function(context=leased_context(cache=cache), request=request).header

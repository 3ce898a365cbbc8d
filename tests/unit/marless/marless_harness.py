"""Test harness for the multi-agent functions: an in-process ShmStore, a FunctionContext, and the driver's side of
a round written out by hand (put version 0, assemble a policy's batch from actor results, run the roles)."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from nimbus.algos.multiagent import initial_messages, multiagent_algo_from_dict
from nimbus.data.codec import Message
from nimbus.data.store import ShmStore
from nimbus.data.stores import STORE_HEADER
from nimbus.envs.parallel import agent_spaces, global_state, make_parallel_env
from nimbus.marless.actor import MultiAgentActorRequest
from nimbus.marless.learner import MarlessLearnerRequest, critic_function, policy_function, postprocess_function
from nimbus.models.weights import weights_key
from nimbus.runtime.base import FunctionContext

SPREAD = "mpe2:simple_spread_v3"
ROLE_FUNCTIONS = {"postprocess": postprocess_function, "critic": critic_function, "policy": policy_function}


def ctx(name: str, invocation: str | None = None, cache: dict | None = None) -> FunctionContext:
    return FunctionContext(worker_id="w0", function=name, invocation_id=invocation or uuid.uuid4().hex, attempt=1,
                           cache=cache if cache is not None else {})


def addressed(message: Message, store: ShmStore) -> Message:
    message.header[STORE_HEADER] = {"backend": "shm", "namespace": store.namespace}
    return message


def put_version_zero(*, store: ShmStore, algo: dict[str, Any], env_id: str, env_kwargs: dict[str, Any],
                     agent_policy: dict[str, str], seed: int = 0) -> None:
    """weights/<p>/0 (and critic/<p>/0) for every policy, built on its first agent's spaces."""
    marless = multiagent_algo_from_dict(algo=algo)
    env = make_parallel_env(env_id=env_id, seed=0, kwargs=env_kwargs)
    env.reset()
    spaces, state_dim = agent_spaces(env=env), int(global_state(env=env).shape[0])
    for i, policy in enumerate(sorted(set(agent_policy.values()))):
        agent = min(a for a, p in agent_policy.items() if p == policy)
        messages = initial_messages(algo=marless, spaces=spaces[agent], state_dim=state_dim,
                                    num_agents=len(agent_policy), seed=seed + i)
        for kind, message in messages.items():
            store.put(key=f"{kind}/{policy}/0", message=message)


def actor_request(*, store: ShmStore, algo: dict[str, Any], agent_policy: dict[str, str], versions: dict[str, int],
                  rank: int = 0, slot_seq: int = 0, num_envs: int = 2, steps: int = 10, seed: int = 0,
                  env_id: str = SPREAD, env_kwargs: dict[str, Any] | None = None, snapshot: bool = False,
                  restore: Any = None) -> Message:
    request = MultiAgentActorRequest(
        env_id=env_id, env_kwargs=env_kwargs if env_kwargs is not None else {"N": 3, "max_cycles": 25},
        num_envs=num_envs, fragment_steps=steps, seed=seed, actor_rank=rank, slot_seq=slot_seq,
        agent_policy=agent_policy, weights_keys={p: weights_key(policy=p, version=v) for p, v in versions.items()},
        algo=algo, snapshot=snapshot)
    return addressed(request.to_message(restore=restore), store)


def assemble_batch(*, results: list[Message], agents: list[str], all_agents: list[str],
                   centralised: bool) -> Message:
    """The driver's batch/<policy>/r<k>: the rows of each agent of the policy (agent order, actors in rank order)
    concatenated, plus agent_index and, centralised, state / next_state."""
    columns: dict[str, list[np.ndarray]] = {}
    ordered = sorted(results, key=lambda r: r.header["actor_rank"])
    for agent in agents:
        for result in ordered:
            names = [key.split("/", 1)[1] for key in result.arrays if key.startswith(f"{agent}/")]
            for name in names:
                columns.setdefault(name, []).append(np.asarray(result.arrays[f"{agent}/{name}"]))
            rows = len(result.arrays[f"{agent}/rewards"])
            columns.setdefault("agent_index", []).append(np.full(rows, all_agents.index(agent), np.int64))
            if centralised:
                columns.setdefault("state", []).append(np.asarray(result.arrays["state"]))
                columns.setdefault("next_state", []).append(np.asarray(result.arrays["next_state"]))
    return Message(header={}, arrays={name: np.concatenate(parts) for name, parts in columns.items()})


def learner_request(*, store: ShmStore, algo: dict[str, Any], policy: str, round_: int, agents: dict[str, int],
                    all_agents: list[str], weights_version: int, critic_version: int, probe: Any = False,
                    env_id: str = SPREAD, env_kwargs: dict[str, Any] | None = None, seed: int = 0) -> Message:
    env_kwargs = env_kwargs if env_kwargs is not None else {"N": 3, "max_cycles": 25}
    request = MarlessLearnerRequest(env_id=env_id, env_kwargs=env_kwargs,
                                    algo=algo, policy=policy, round=round_, agents=agents, all_agents=all_agents,
                                    batch_key=f"batch/{policy}/r{round_}", weights_version=weights_version,
                                    critic_version=critic_version, seed=seed, probe=probe)
    return addressed(request.to_message(), store)


class _FailingStep:
    """simple_spread whose step number ``fail_step`` (counted over the env's life) raises RuntimeError."""

    def __new__(cls, *, fail_step: int, **kwargs: Any):
        from mpe2 import simple_spread_v3
        from pettingzoo.utils.wrappers import BaseParallelWrapper

        class Failing(BaseParallelWrapper):
            steps = 0

            def step(self, actions):
                Failing.steps += 1
                if Failing.steps == fail_step:
                    raise RuntimeError(f"injected failure at step {fail_step}")
                return self.env.step(actions)

        return Failing(simple_spread_v3.parallel_env(**kwargs))


def failing_spread(**kwargs: Any):
    return _FailingStep(**kwargs)

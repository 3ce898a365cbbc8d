"""Helpers shared by the function tests that call a function in-process on a real ShmStore (the ``store``
fixture is this folder's conftest.py's)."""

from __future__ import annotations

import uuid

import gymnasium as gym
import torch

from nimbus.data.codec import Message
from nimbus.data.store import ShmStore
from nimbus.data.stores import STORE_HEADER
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.weights import model_to_message, weights_key
from nimbus.runtime.base import FunctionContext


def cartpole_spaces() -> EnvSpaces:
    env = gym.make("CartPole-v1")
    return EnvSpaces(observation=env.observation_space, action=env.action_space)


def ctx(name: str, invocation: str | None = None) -> FunctionContext:
    """A first attempt of ``name`` on worker w0; a fresh invocation id unless ``invocation`` names one."""
    return FunctionContext(worker_id="w0", function=name, invocation_id=invocation or uuid.uuid4().hex, attempt=1)


def publish(store: ShmStore, *, model: torch.nn.Module, version: int) -> None:
    store.put(key=weights_key(policy="main", version=version), message=model_to_message(model=model, version=version))


def on_store(message: Message, store: ShmStore) -> Message:
    """``message`` with the header that tells the function which shm store to open."""
    message.header[STORE_HEADER] = {"backend": "shm", "namespace": store.namespace}
    return message

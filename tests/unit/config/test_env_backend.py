"""actors.env_backend's config rules: what EnvPool cannot serve is refused at load time, naming the key."""

from __future__ import annotations

import pytest

from nimbus.config import parse_config
from nimbus.envs.batched import envpool_installed
from nimbus.errors import ConfigError


def _config(**sections: dict) -> dict:
    data = {"name": "t", "algo": {"name": "ppo", "minibatch_size": 64}, "actors": {"env_backend": "envpool"}}
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return data


def test_the_default_backend_is_the_per_env_loop() -> None:
    assert parse_config(data={"name": "t", "algo": {"name": "ppo"}}).actors.env_backend == "gymnasium"


@pytest.mark.skipif(not envpool_installed(), reason="the envpool extra is not installed here")
def test_envpool_on_cartpole_is_accepted() -> None:
    assert parse_config(data=_config()).actors.env_backend == "envpool"


@pytest.mark.parametrize(("sections", "message"), [
    ({"train": {"exact_resume": True}}, "envpool cannot snapshot its envs"),
    ({"actors": {"restore_slots": True}}, "envpool cannot snapshot its envs"),
    ({"env": {"id": "MountainCarContinuous-v0"}}, "envpool has no twin of env.id"),
    ({"env": {"wrappers": ["gymnasium.wrappers:ClipReward"]}}, "env.imports, env.wrappers and env.kwargs"),
])
def test_what_envpool_cannot_serve_is_refused(sections: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(data=_config(**sections))


def test_vector_keeps_snapshots() -> None:
    config = parse_config(data=_config(actors={"env_backend": "vector", "restore_slots": True}))
    assert config.actors.restore_slots


def test_a_workflow_whose_actor_does_not_batch_refuses_it() -> None:
    data = {"name": "t", "algo": {"name": "dqn"}, "train": {"workflow": "offpolicy"},
            "actors": {"env_backend": "vector"}}
    with pytest.raises(ConfigError, match="actors.env_backend: vector is read by the on-policy actor"):
        parse_config(data=data)


def test_an_atari_ids_clip_rewards_is_the_one_kwarg_envpool_takes() -> None:
    atari = {"id": "nimbus/AtariQbert-v5", "kwargs": {"clip_rewards": True}}
    if envpool_installed():
        assert parse_config(data=_config(env=atari)).env.kwargs == {"clip_rewards": True}
    with pytest.raises(ConfigError, match="but an Atari id's clip_rewards"):
        parse_config(data=_config(env={"id": "nimbus/AtariQbert-v5", "kwargs": {"frame_stack": 2}}))

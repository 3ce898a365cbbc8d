from __future__ import annotations

import pydantic
import pytest

from nimbus.algos.ppo.config import PPOConfig


def test_defaults() -> None:
    config = PPOConfig()
    assert (config.name, config.gamma, config.gae_lambda, config.clip_coef, config.lr) == ("ppo", 0.99, 0.95, 0.2, 3e-4)
    assert (config.num_epochs, config.minibatch_size) == (10, 64)
    assert (config.hidden_sizes, config.activation) == ((64, 64), "tanh")
    assert config.vf_clip is None and config.target_kl is None and config.normalize_advantages
    assert config.adam_eps == 1e-5 and config.max_grad_norm == 0.5 and not config.normalize_obs


def test_frozen_and_unknown_keys_rejected() -> None:
    config = PPOConfig()
    with pytest.raises(pydantic.ValidationError):
        config.lr = 1.0  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError, match="learning_rate"):
        PPOConfig(learning_rate=1e-3)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "field, value",
    [("gamma", 0.0), ("gamma", 1.5), ("gae_lambda", -0.1), ("num_epochs", 0), ("minibatch_size", -64),
     ("lr", 0.0), ("clip_coef", -0.2), ("vf_clip", 0.0), ("target_kl", -1.0), ("max_grad_norm", 0.0),
     ("hidden_sizes", ()), ("hidden_sizes", (64, 0)), ("activation", "gelu"), ("lr_schedule", "cosine"),
     ("name", "dqn")],
)
def test_invalid_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(pydantic.ValidationError, match=field):
        PPOConfig(**{field: value})


def test_yaml_style_input_is_coerced() -> None:
    config = PPOConfig.model_validate({"hidden_sizes": [32, 16], "vf_clip": 0.2, "gamma": 1})
    assert config.hidden_sizes == (32, 16) and config.vf_clip == 0.2 and config.gamma == 1.0

"""QMIX (algos/multiagent/qmix.py): the mixer is monotonic in every agent's Q, the config, version 0."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from nimbus.algos.multiagent import MULTIAGENT_ALGO_CONFIGS, make_multiagent_algo, qmix
from nimbus.algos.multiagent.config import QMIXConfig
from nimbus.algos.multiagent.qmix import QMIX, initial_mixer_message, mixer_key, mixer_keys
from nimbus.models.weights import load_model


def smallest_partial(*, mixer: torch.nn.Module, seed: int, num_agents: int, state_dim: int) -> float:
    """min over rows and agents of ∂Q_tot/∂Q_a, by autograd on random Q values and states."""
    generator = torch.Generator().manual_seed(seed)
    agent_qs = (10 * torch.randn(512, num_agents, generator=generator)).requires_grad_(True)
    states = 3 * torch.randn(512, state_dim, generator=generator)
    q_tot = mixer(agent_qs, states)
    assert q_tot.shape == (512,)
    (grad,) = torch.autograd.grad(q_tot.sum(), agent_qs)   # rows are independent: row b's grad is ∂Q_tot_b/∂Q_b
    return float(grad.min())


@pytest.mark.parametrize("seed", range(5))
def test_q_tot_is_monotonic_in_every_agents_q(seed: int) -> None:
    torch.manual_seed(seed)
    mixer = QMIX(config=QMIXConfig(mixing_embed_dim=8, hypernet_embed=16)).make_mixer(state_dim=6, num_agents=3)
    assert smallest_partial(mixer=mixer, seed=seed, num_agents=3, state_dim=6) >= 0.0


def test_the_check_catches_a_mixer_without_abs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: mixing weights used as the hypernetworks give them (no |·|) -> some ∂Q_tot/∂Q_a < 0."""
    monkeypatch.setattr(qmix, "_nonnegative", lambda weights: weights)
    torch.manual_seed(0)
    mixer = QMIX(config=QMIXConfig(mixing_embed_dim=8, hypernet_embed=16)).make_mixer(state_dim=6, num_agents=3)
    assert smallest_partial(mixer=mixer, seed=0, num_agents=3, state_dim=6) < 0.0


def test_config_and_protocol() -> None:
    assert MULTIAGENT_ALGO_CONFIGS["qmix"] is QMIXConfig and QMIXConfig().name == "qmix"
    assert (QMIXConfig().mixing_embed_dim, QMIXConfig().hypernet_embed) == (32, 64)   # pymarl's defaults
    algo = make_multiagent_algo(config=QMIXConfig())
    assert isinstance(algo, QMIX)
    assert (algo.roles, algo.centralised, algo.on_policy, algo.joint) == (("postprocess", "policy"), True, False, True)
    with pytest.raises(ValidationError):
        QMIXConfig(mixing_embed_dim=0)


def test_initial_mixer_is_seeded_and_loads() -> None:
    algo = QMIX(config=QMIXConfig(mixing_embed_dim=4, hypernet_embed=8))
    first = initial_mixer_message(algo=algo, state_dim=5, num_agents=2, seed=3)
    again = initial_mixer_message(algo=algo, state_dim=5, num_agents=2, seed=3)
    assert first.header == {"policy_version": 0, "grad_steps": 0}
    assert all(torch.equal(torch.as_tensor(first.arrays[k]), torch.as_tensor(again.arrays[k])) for k in first.arrays)
    load_model(model=algo.make_mixer(state_dim=5, num_agents=2), message=first)
    assert mixer_key(part="target", version=4) == "mixer/target/4"
    assert mixer_keys(version=-1) == [] and mixer_keys(version=2) == ["mixer/weights/2", "mixer/optim/2",
                                                                       "mixer/target/2"]

"""QMIX (Rashid et al. 2018) as a MARLess algorithm: a monotonic mixing network over the global state.

Agents act ε-greedily on their own Q-networks, exactly as in IQL and VDN. The team's joint action value is
Q_tot(s, u) = f_s(Q_1(o_1, u_1), …, Q_A(o_A, u_A)), where f_s is a two-layer mixing network whose weights are
produced from the global state s by hypernetworks and made non-negative by an absolute value (so
∂Q_tot/∂Q_a ≥ 0: the greedy joint action is each agent's greedy action). As pymarl's ``QMixer``
(``modules/mixers/qmix.py``: ``hypernet_layers`` 2): W1 = |hyper_w1(s)| (A × E), b1 = hyper_b1(s),
h = ELU(Q W1 + b1), W2 = |hyper_w2(s)| (E × 1), V(s) a 2-layer state bias, Q_tot = h W2 + V(s).

The learner is VDN's joint update (marless/team_learner.py) with the mixer in place of the sum: one TD loss
on the team reward, y = R + γ(1 − terminated) · f̄_{s'}(Q̄_1(o'_1, a*_1), …), f̄ the target mixer (a hard copy
every ``target_update_period`` steps, as the agents' targets). The mixer lives in the Store beside the
policies: ``mixer/weights/<v>``, ``mixer/optim/<v>`` and ``mixer/target/<v>`` (``mixer_key``), one version a round.

Example::

    algo = QMIX(config=QMIXConfig())
    mixer = algo.make_mixer(state_dim=54, num_agents=3)
    q_tot = mixer(agent_qs, states)        # [B, A], [B, S] → [B]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch
from torch import nn

from nimbus.algos.multiagent.iql import ValueAlgorithm
from nimbus.algos.step import make_adam, param_device

if TYPE_CHECKING:
    from nimbus.data.codec import Message



def mixer_key(*, part: Literal["weights", "optim", "target"], version: int) -> str:
    """The Store key of the mixer's weights, optimizer state or target network at ``version``."""
    return f"mixer/{part}/{version}"


def mixer_keys(*, version: int) -> list[str]:
    """Every Store key of the mixer's ``version`` (none for a negative version)."""
    return [mixer_key(part=part, version=version) for part in ("weights", "optim", "target")] if version >= 0 else []


def _nonnegative(weights: torch.Tensor) -> torch.Tensor:
    """The mixing weights' sign constraint (|·|): what makes Q_tot monotonic in every agent's Q."""
    return torch.abs(weights)


class QMixer(nn.Module):
    """f_s(Q_1..Q_A): [B, A] agent Q values and [B, S] states → [B] Q_tot, monotonic in every Q_a."""

    def __init__(self, *, state_dim: int, num_agents: int, embed_dim: int, hypernet_embed: int) -> None:
        super().__init__()
        self.num_agents, self.embed_dim = num_agents, embed_dim
        self.hyper_w1 = nn.Sequential(nn.Linear(state_dim, hypernet_embed), nn.ReLU(),
                                      nn.Linear(hypernet_embed, embed_dim * num_agents))
        self.hyper_w2 = nn.Sequential(nn.Linear(state_dim, hypernet_embed), nn.ReLU(),
                                      nn.Linear(hypernet_embed, embed_dim))
        self.hyper_b1 = nn.Linear(state_dim, embed_dim)
        self.state_value = nn.Sequential(nn.Linear(state_dim, embed_dim), nn.ReLU(), nn.Linear(embed_dim, 1))

    def forward(self, agent_qs: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        batch = agent_qs.shape[0]
        states = states.reshape(batch, -1).float()
        w1 = _nonnegative(self.hyper_w1(states)).view(batch, self.num_agents, self.embed_dim)
        b1 = self.hyper_b1(states).view(batch, 1, self.embed_dim)
        hidden = nn.functional.elu(torch.bmm(agent_qs.view(batch, 1, self.num_agents), w1) + b1)
        w2 = _nonnegative(self.hyper_w2(states)).view(batch, self.embed_dim, 1)
        return (torch.bmm(hidden, w2) + self.state_value(states).view(batch, 1, 1)).view(batch)


class QMIX(ValueAlgorithm):
    name = "qmix"
    roles = ("postprocess", "policy")
    centralised = True    # the actors record the global state (the mixer's input)
    joint = True          # one team learner invocation a round (marless/team_learner.py)

    def make_mixer(self, *, state_dim: int, num_agents: int) -> QMixer:
        c = self.config
        return QMixer(state_dim=state_dim, num_agents=num_agents, embed_dim=c.mixing_embed_dim,
                      hypernet_embed=c.hypernet_embed)

    def make_mixer_optimizer(self, *, mixer: nn.Module) -> torch.optim.Optimizer:
        return make_adam(params=mixer.parameters(), lr=self.config.lr, device=param_device(mixer))


def initial_mixer_message(*, algo: QMIX, state_dim: int, num_agents: int, seed: int) -> Message:
    """Version 0 of the mixer (header ``grad_steps`` 0); its target at version 0 is itself."""
    from nimbus.models.weights import model_to_message  # on first use: importing the config loads no data code

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        message = model_to_message(model=algo.make_mixer(state_dim=state_dim, num_agents=num_agents), version=0)
    message.header["grad_steps"] = 0
    return message

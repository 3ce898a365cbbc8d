"""VDN (value-decomposition networks, Sunehag et al. 2018) as a MARLess algorithm (MARLess §4.2, Fig. 5c).

The team's joint action value is the sum of the agents' Q values, Q_tot(o, u) = Σ_a Q_{policy(a)}(o_a, u_a),
trained with one TD loss on the team reward (the sum of the agents' rewards). Agents act ε-greedily on
their own Q-network, exactly as in IQL (algos/multiagent/iql.py); only the learner differs. Its roles: a
*post-processing function* that aligns the team's per-agent rows of a round into joint rows
(``post/team/r<k>``), then one *policy function* for the whole team (marless/team_learner.py): every
gradient step is one optimizer step on the summed Q over all the team's policies, however many there are.

Example::

    algo = VDN(config=VDNConfig())
    model = algo.make_policy(spaces=spaces)
"""

from __future__ import annotations

import torch

from nimbus.algos.multiagent.iql import ValueAlgorithm


class VDN(ValueAlgorithm):
    name = "vdn"
    roles = ("postprocess", "policy")
    joint = True          # one team learner invocation a round (marless/team_learner.py)


def vdn_targets(*, team_rewards: torch.Tensor, next_values_per_agent: torch.Tensor,
                terminated_per_agent: torch.Tensor, gamma: float) -> torch.Tensor:
    """y = R + γ Σ_a (1 − terminated_a)·Q̄_a(o'_a, a*_a). ``*_per_agent`` are [A, B]; returns [B]."""
    alive = 1.0 - terminated_per_agent.float()
    return team_rewards.float() + gamma * (alive * next_values_per_agent).sum(dim=0)


def vdn_q_tot(*, q_taken_per_agent: torch.Tensor, alive_per_agent: torch.Tensor | None = None) -> torch.Tensor:
    """Q_tot = Σ_a alive_a · Q_a(o_a, u_a): [A, B] → [B]. ``alive_per_agent`` [A, B] (bool): an agent that finished
    before the team contributes nothing (its rows until the team's episode ends are padding); None: all live."""
    if alive_per_agent is not None:
        q_taken_per_agent = torch.where(alive_per_agent.bool(), q_taken_per_agent,
                                        torch.zeros_like(q_taken_per_agent))
    return q_taken_per_agent.sum(dim=0)

"""Every single-agent update skips a non-finite minibatch on the device (algos/step.py): NaN rewards leave the
weights and the optimizer's state as they were, no step is counted, and the statistics say so."""

from __future__ import annotations

import math

import pytest
import torch

from tests.algo_batches import make_case


def _state(case) -> list[torch.Tensor]:
    """The trained weights (a target network follows them on its own cadence) and the optimizer's state."""
    weights = [p.detach().clone() for name, p in case.model.named_parameters() if "target" not in name]
    return weights + [value.clone() for state in case.optimizer.state.values() for value in state.values()
                      if isinstance(value, torch.Tensor)]


@pytest.mark.parametrize("name", ["dqn", "sac", "impala", "impact"])
def test_nan_rewards_change_no_weight_and_no_optimizer_state(name: str) -> None:
    case = make_case(name=name, device=torch.device("cpu"), seed=0)
    generator = torch.Generator().manual_seed(0)
    case.algo.update(model=case.model, optimizer=case.optimizer, batch=case.algo.postprocess(batch=case.batch),
                     progress=0.5, generator=generator)  # Adam's state exists from here on
    before = _state(case)
    poisoned = {**case.batch, "rewards": torch.full_like(case.batch["rewards"], float("nan"))}
    stats = case.algo.update(model=case.model, optimizer=case.optimizer, batch=case.algo.postprocess(batch=poisoned),
                             progress=0.5, generator=generator)
    after = _state(case)
    assert len(after) == len(before) > 0
    for old, new in zip(before, after, strict=True):
        torch.testing.assert_close(new, old, rtol=0, atol=0)
    if name in ("dqn", "sac"):
        assert stats.num_gradient_steps == 0
    assert math.isnan(stats.qf_loss if name == "sac" else stats.td_loss if name == "dqn" else stats.value_loss)

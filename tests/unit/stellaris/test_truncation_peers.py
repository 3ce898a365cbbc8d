"""Issue 26 item 9: a gradient's IS truncation (Eq. 2) uses the policies of the learners aggregated with it, not
those in flight when its learner was launched.

A learner cannot know at launch which gradients will be aggregated with its own, so it computes with ρ alone (no
peers: what Eq. 2 gives a gradient aggregated alone), and the parameter function recomputes a member whose
aggregation holds other versions, truncated by exactly those versions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from nimbus.config import load_config
from nimbus.models.weights import load_model, optim_key, weights_key
from nimbus.run.loop import train
from nimbus.stellaris import learner as learner_module, parameter as parameter_module
from nimbus.stellaris.learner import gradient_learner_function
from nimbus.stellaris.parameter import ParameterRequest, parameter_function
from tests.unit.function_helpers import cartpole_spaces, ctx, on_store, publish
from tests.unit.stellaris.test_stellaris_functions import ROWS, algo, grad_request, model_fixture  # noqa: F401 (fixture)

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "stellaris-cartpole.yaml"


def _drifted(store, model, version: int) -> None:
    drifted = algo().make_model(spaces=cartpole_spaces())
    drifted.load_state_dict(model.state_dict())
    torch.manual_seed(version)
    with torch.no_grad():
        for param in drifted.parameters():
            param.add_(0.5 * torch.randn_like(param))
    publish(store, model=drifted, version=version)


def _published(store, version: int) -> dict[str, torch.Tensor]:
    """Version ``version``'s weights, taken out of the Store (so the next call may publish it again)."""
    net = algo().make_model(spaces=cartpole_spaces())
    load_model(model=net, message=store.get(key=weights_key(policy="main", version=version)))
    store.delete(key=weights_key(policy="main", version=version))
    store.delete(key=optim_key(policy="main", version=version))
    return net.state_dict()


def _parameter(store, *, key: str, recompute=None, positions=None):
    model = dict(vars(learner_module.GradientRequest(
        env_id="CartPole-v1", env_kwargs={}, algo=algo().config.model_dump(mode="json"), policy="main",
        policy_version=0, batch_key="", grad_key="", peer_versions=(), truncation="none", rho=1.0, progress=0.0,
        device="cpu", torch_threads=1)))
    request = ParameterRequest(model=model, policy_version=0, has_optimizer_state=False, keys=[key], scales=[1.0],
                               separate_steps=False, progress=0.0, recompute=[recompute])
    return parameter_function(context=ctx("parameter"),
                              request=on_store(request.to_message(positions=[positions]), store))


def test_the_parameter_function_truncates_a_member_by_the_versions_aggregated_with_it(store, model):
    """Recomputed with peers [5] from the learner's untruncated-by-peers gradient, the step equals the step on the
    gradient a learner computed with peer 5: the truncation is the co-members', computed where they are known."""
    _drifted(store, model, version=5)
    gradient_learner_function(context=ctx("g"), request=grad_request(store, version=0, key="grad/main/alone"))
    gradient_learner_function(context=ctx("g"), request=grad_request(store, version=0, key="grad/main/cut",
                                                                      peers=[5]))
    _parameter(store, key="grad/main/cut")
    want = _published(store, version=1)
    recompute = {"batch_key": "batch/main/r0", "read_version": 0, "peer_versions": [5], "truncation": "paper",
                 "rho": 1.0, "progress": 0.0}
    result = _parameter(store, key="grad/main/alone", recompute=recompute, positions=np.arange(ROWS))
    assert result.header["recomputed"] == 1
    got = _published(store, version=1)
    assert all(torch.allclose(want[name], got[name], atol=1e-6) for name in want)
    _parameter(store, key="grad/main/alone")     # and it differs from the step without the peer
    plain = _published(store, version=1)
    assert any(not torch.allclose(want[name], plain[name], atol=1e-6) for name in want)


@pytest.mark.timeout(200)
def test_in_a_run_learners_get_no_peers_and_each_aggregation_truncates_by_its_members(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real run (3 learners, inline, the stellaris rule, truncation paper): every learner request
    carries no peers, and every recomputed member's peers are the other versions of its aggregation. Fails on the
    code before: learners were given the versions in flight at their launch."""
    learners, aggregations = {}, []
    to_task_message = learner_module.GradientRequest.to_task_message
    monkeypatch.setattr(learner_module.GradientRequest, "to_task_message",
                        lambda self, *, positions: learners.__setitem__(self.grad_key, self)
                        or to_task_message(self, positions=positions))
    param_to_message = parameter_module.ParameterRequest.to_message
    monkeypatch.setattr(parameter_module.ParameterRequest, "to_message",
                        lambda self, *, positions=(): aggregations.append(self)
                        or param_to_message(self, positions=positions))
    config = load_config(path=CONFIG, overrides=[
        "train.max_rounds=4", f"output.root_dir={tmp_path}", "output.loggers=[]", "output.report=false",
        "output.status_line=false", "train.eval_episodes=0",
        "runtime.backend=inline"])   # submission order: which aggregations mix versions does not depend on timing
    train(config=config)
    assert learners and all(list(req.peer_versions) == [] for req in learners.values())
    several = 0
    for request in aggregations:
        versions = [learners[key].policy_version for key in request.keys]
        for version, redo in zip(versions, request.recompute):
            peers = sorted(set(versions) - {version})
            assert (redo is None) if not peers else (redo["peer_versions"] == peers and redo["read_version"] == version)
            several += bool(peers)
    assert several > 0, "no aggregation held several versions: the run did not exercise the truncation"

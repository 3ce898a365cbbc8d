import pytest
import torch

from nimbus.data.codec import decode, encode
from nimbus.models.weights import load_model, load_optimizer, model_to_message, optimizer_to_message


def test_model_and_adam_state_round_trip_through_the_codec() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-5)
    model(torch.randn(8, 3)).sum().backward()
    optimizer.step()
    weights = decode(encode(model_to_message(model=model, version=7)), copy=True)
    optim = decode(encode(optimizer_to_message(optimizer=optimizer, version=7)), copy=True)

    clone = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    clone_opt = torch.optim.Adam(clone.parameters(), lr=1e-3, eps=1e-5)
    load_model(model=clone, message=weights)
    load_optimizer(optimizer=clone_opt, message=optim)
    for a, b in zip(model.parameters(), clone.parameters()):
        assert torch.equal(a, b)
    # one more identical step on both must stay bitwise equal (optimizer state restored exactly)
    x = torch.randn(8, 3)
    for m, o in ((model, optimizer), (clone, clone_opt)):
        o.zero_grad()
        m(x).sum().backward()
        o.step()
    for a, b in zip(model.parameters(), clone.parameters()):
        assert torch.equal(a, b)


def test_load_model_copies_in_place_from_read_only_views_and_keeps_errors() -> None:
    """The actors' fast path (copy into the model's own tensors) loads the same values as load_state_dict,
    from the Store's read-only views, and a mismatch still raises load_state_dict's error."""
    import numpy as np
    import pytest

    torch.manual_seed(0)
    source = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    target = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    message = decode(encode(model_to_message(model=source, version=1, extra={"x": np.ones(2, np.float32)})))
    params_before = [p for p in target.parameters()]
    extras = load_model(model=target, message=message)
    assert all(torch.equal(a, b) for a, b in zip(source.parameters(), target.parameters()))
    assert all(a is b and a.requires_grad for a, b in zip(params_before, target.parameters()))  # same tensors
    assert list(extras) == ["x"]
    message.arrays["param.0.weight"] = np.zeros((5, 3), np.float32)  # wrong shape: no broadcasting, an error
    with pytest.raises(RuntimeError, match="size mismatch"):
        load_model(model=target, message=message)


IMPLEMENTATION = {"foreach": {"foreach": True}, "fused": {"fused": True}}   # the CPU's Adam, the GPU's


def _saved_adam(*, kind: str) -> tuple[torch.optim.Optimizer, object]:
    """An Adam of ``kind`` after one step, and its state as a message."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, **IMPLEMENTATION[kind])
    model(torch.ones(4, 3)).sum().backward()
    optimizer.step()
    return optimizer, optimizer_to_message(optimizer=optimizer, version=1)


@pytest.mark.parametrize(("saver_kind", "loader_kind"), [("foreach", "fused"), ("fused", "foreach")])
def test_load_optimizer_keeps_the_loaders_implementation_flags(saver_kind: str, loader_kind: str) -> None:
    """torch's load_state_dict takes the saver's fused/foreach/capturable with the groups; the loader keeps its own
    (chosen for its device), and the state itself is the saver's."""
    saver, message = _saved_adam(kind=saver_kind)
    loader = torch.optim.Adam(torch.nn.Linear(3, 2).parameters(), lr=1e-2, **IMPLEMENTATION[loader_kind])
    own = [{flag: group[flag] for flag in ("fused", "foreach", "capturable")} for group in loader.param_groups]
    load_optimizer(optimizer=loader, message=message)
    assert [{flag: group[flag] for flag in own[0]} for group in loader.param_groups] == own
    for saved, loaded in zip(saver.state.values(), loader.state.values(), strict=True):
        assert torch.equal(saved["exp_avg"], loaded["exp_avg"]) and float(saved["step"]) == float(loaded["step"])


def test_a_fused_adam_loaded_from_a_foreach_state_still_skips_a_nan_step() -> None:
    """Why the flags matter: a GPU worker's fused Adam loading a CPU worker's state must still skip a NaN step in
    its kernel (``found_inf``); with the saver's foreach flags in its groups the guarded step fails instead."""
    from nimbus.algos.step import guarded_step

    _, message = _saved_adam(kind="foreach")
    model = torch.nn.Linear(3, 2)
    loader = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
    load_optimizer(optimizer=loader, message=message)
    before = [p.detach().clone() for p in model.parameters()]
    moments = [state["exp_avg"].clone() for state in loader.state.values()]
    outcome = guarded_step(optimizer=loader, params=list(model.parameters()),
                           loss=model(torch.full((4, 3), float("nan"))).sum(), max_grad_norm=1.0)
    assert not bool(outcome.finite)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))   # the NaN step was not applied
    assert all(torch.equal(a, state["exp_avg"]) for a, state in zip(moments, loader.state.values()))

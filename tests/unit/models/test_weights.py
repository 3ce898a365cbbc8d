import numpy as np
import pytest
import torch

from nimbus.data.codec import Message, decode, encode
from nimbus.data.store import KeyNotFound
from nimbus.models.weights import (
    load_model,
    load_optimizer,
    load_version,
    model_to_message,
    optim_key,
    optimizer_to_message,
    version_items,
    weights_key,
)


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


class DictStore:
    """The Store's get and put over a dict, each value through the codec as a real Store would."""

    def __init__(self) -> None:
        self.encoded: dict[str, bytes] = {}

    def get(self, *, key: str) -> Message:
        if key not in self.encoded:
            raise KeyNotFound(key)
        return decode(self.encoded[key], copy=True)

    def put(self, *, key: str, message: Message) -> None:
        self.encoded[key] = encode(message)


def _stepped_model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def _fresh_model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(1)
    model = torch.nn.Linear(3, 2)
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def test_version_items_are_the_weights_and_optimizer_state_under_their_keys() -> None:
    model, optimizer = _stepped_model()
    extra = {"obs_rms.mean": np.arange(3, dtype=np.float32)}
    items = version_items(policy="main", version=4, model=model, optimizer=optimizer, extra=extra,
                          weights_header={"grad_steps": 12})
    assert list(items) == [weights_key(policy="main", version=4), optim_key(policy="main", version=4)]
    weights, optim = items.values()
    expected = model_to_message(model=model, version=4, extra=extra)
    assert weights.header == {"policy_version": 4, "grad_steps": 12}
    assert list(weights.header) == ["policy_version", "grad_steps"]   # the bytes of a stored version keep their order
    assert encode(Message(header=expected.header, arrays=weights.arrays)) == encode(expected)
    assert encode(optim) == encode(optimizer_to_message(optimizer=optimizer, version=4))
    assert list(version_items(policy="main", version=4, model=None, optimizer=optimizer)) == [
        optim_key(policy="main", version=4)]
    assert list(version_items(policy="main", version=4, model=model, optimizer=None)) == [
        weights_key(policy="main", version=4)]


def test_load_version_reads_weights_extras_header_and_optimizer_state() -> None:
    model, optimizer = _stepped_model()
    store = DictStore()
    for key, message in version_items(policy="main", version=4, model=model, optimizer=optimizer,
                                      extra={"k": np.ones(2, np.float32)}, weights_header={"grad_steps": 3}).items():
        store.put(key=key, message=message)
    clone, clone_opt = _fresh_model()
    loaded = load_version(store=store, policy="main", version=4, model=clone, optimizer=clone_opt)
    assert loaded.header == {"policy_version": 4, "grad_steps": 3}
    assert list(loaded.extras) == ["k"] and np.array_equal(loaded.extras["k"], np.ones(2, np.float32))
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), clone.parameters()))
    assert encode(optimizer_to_message(optimizer=clone_opt, version=4)) == \
        encode(optimizer_to_message(optimizer=optimizer, version=4))
    with pytest.raises(KeyNotFound):   # another version: nothing stored
        load_version(store=store, policy="main", version=5, model=clone)


def test_load_version_without_optimizer_state_raises_unless_it_may_be_missing() -> None:
    model, _ = _stepped_model()
    store = DictStore()
    for key, message in version_items(policy="main", version=0, model=model, optimizer=None).items():
        store.put(key=key, message=message)
    clone, clone_opt = _fresh_model()
    with pytest.raises(KeyNotFound):
        load_version(store=store, policy="main", version=0, model=clone, optimizer=clone_opt)
    load_version(store=store, policy="main", version=0, model=clone, optimizer=clone_opt,
                 optimizer_may_be_missing=True)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), clone.parameters()))
    assert not clone_opt.state   # fresh
    load_version(store=store, policy="main", version=0, model=clone)   # no optimizer asked for: no optim read

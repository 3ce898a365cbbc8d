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

import torch

from nimbus.data.codec import decode, encode
from nimbus.train.weights import load_model, load_optimizer, model_to_message, optimizer_to_message


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

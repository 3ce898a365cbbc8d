"""The guarded optimizer step (algos/step.py): a non-finite minibatch changes neither the weights nor Adam's state,
decided without a host read; a finite one is bitwise the plain step."""

from __future__ import annotations

import math

import pytest
import torch

from nimbus.algos.step import DeviceStats, guarded_step, make_adam
from tests.host_reads import count_host_reads, decide_on_the_device

OPTIMIZERS = {
    "foreach": lambda params: torch.optim.Adam(params, lr=1e-2, foreach=True),   # an accelerator's other than CUDA
    "fused": lambda params: make_adam(params=params, lr=1e-2, device=torch.device("cpu")),   # nimbus's on CPU and CUDA
}


def test_nimbus_adam_is_fused_on_the_cpu_and_steps_with_no_host_read() -> None:
    """The fused form reads no step count on the host (foreach reads each parameter's with ``item()`` every step)."""
    net = _net()
    optimizer = make_adam(params=list(net.parameters()), lr=1e-2, device=torch.device("cpu"))
    assert optimizer.defaults["fused"]
    _loss(net, scale=1.0).backward()
    optimizer.step()
    with count_host_reads(optimizers=[optimizer]) as reads:
        optimizer.step()
    assert reads.total == 0 and reads.host_counters == 0, (reads.by_kind, reads.host_counters)


@pytest.fixture(params=["host", "device"])
def decision(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where a non-fused optimizer's guard is decided: read on the host (the CPU's way) or stepped and restored on
    the device (an accelerator's way, forced here on the CPU)."""
    if request.param == "device":
        decide_on_the_device(monkeypatch)
    return request.param


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _loss(net: torch.nn.Module, *, scale: float) -> torch.Tensor:
    x = torch.linspace(-1, 1, 12).reshape(4, 3)
    return (net(x) ** 2).mean() * scale


def _snapshot(net: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    state = [value.clone() for p in net.parameters() for value in optimizer.state.get(p, {}).values()]
    return [p.detach().clone() for p in net.parameters()] + state


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_step_changes_neither_weights_nor_adam_state(kind: str, bad: float, decision: str) -> None:
    net = _net()
    optimizer = OPTIMIZERS[kind](list(net.parameters()))
    guarded_step(optimizer=optimizer, params=list(net.parameters()), loss=_loss(net, scale=1.0), max_grad_norm=0.5)
    before = _snapshot(net, optimizer)
    outcome = guarded_step(optimizer=optimizer, params=list(net.parameters()), loss=_loss(net, scale=bad),
                           max_grad_norm=0.5)
    assert not bool(outcome.finite)
    after = _snapshot(net, optimizer)
    assert len(after) == len(before) == 4 + 3 * 4  # weights, then exp_avg, exp_avg_sq and step of each
    for old, new in zip(before, after, strict=True):
        torch.testing.assert_close(new, old, rtol=0, atol=0)


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_a_skipped_first_step_leaves_the_state_of_a_fresh_optimizer(kind: str, decision: str) -> None:
    """The first step creates Adam's state; skipped, it must leave what a fresh Adam would start from."""
    skipped, fresh = _net(), _net()
    opt_skipped = OPTIMIZERS[kind](list(skipped.parameters()))
    opt_fresh = OPTIMIZERS[kind](list(fresh.parameters()))
    guarded_step(optimizer=opt_skipped, params=list(skipped.parameters()), loss=_loss(skipped, scale=float("nan")),
                 max_grad_norm=0.5)
    for net, optimizer in ((skipped, opt_skipped), (fresh, opt_fresh)):
        guarded_step(optimizer=optimizer, params=list(net.parameters()), loss=_loss(net, scale=1.0), max_grad_norm=0.5)
    for a, b in zip(_snapshot(skipped, opt_skipped), _snapshot(fresh, opt_fresh), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_finite_step_is_bitwise_the_plain_step(decision: str) -> None:
    guarded, plain = _net(), _net()
    opt_guarded = OPTIMIZERS["foreach"](list(guarded.parameters()))
    opt_plain = torch.optim.Adam(plain.parameters(), lr=1e-2)   # the per-tensor loop torch picks on the CPU
    for _ in range(3):
        outcome = guarded_step(optimizer=opt_guarded, params=list(guarded.parameters()),
                               loss=_loss(guarded, scale=1.0), max_grad_norm=0.5)
        opt_plain.zero_grad()
        _loss(plain, scale=1.0).backward()
        norm = torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.5)
        opt_plain.step()
        assert float(outcome.grad_norm) == float(norm)
    for a, b in zip(_snapshot(guarded, opt_guarded), _snapshot(plain, opt_plain), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_guard_and_the_statistics_make_no_host_read() -> None:
    net = _net()
    optimizer = OPTIMIZERS["fused"](list(net.parameters()))
    stats = DeviceStats(keys=("loss", "grad_norm"), device=torch.device("cpu"))
    with count_host_reads() as reads:
        for scale in (1.0, float("nan"), 2.0):
            loss = _loss(net, scale=scale)
            outcome = guarded_step(optimizer=optimizer, params=list(net.parameters()), loss=loss, max_grad_norm=0.5)
            stats.add(row=torch.stack([loss.detach(), outcome.grad_norm]), where=outcome.finite)
    assert reads.total == 0, reads.by_kind
    with count_host_reads() as reads:
        means, steps, _ = stats.read()
    assert reads.total == 1 and steps == 2 and math.isfinite(means["loss"]) and math.isfinite(means["grad_norm"])


def test_on_the_cpu_a_non_fused_guard_reads_its_flag_instead_of_restoring_from_a_copy() -> None:
    """The CPU's path: one read of the finite flag per step, and no backup copy of the weights and Adam's state
    (which cost more than a small network's step)."""
    net = _net()
    optimizer = OPTIMIZERS["foreach"](list(net.parameters()))
    guarded_step(optimizer=optimizer, params=list(net.parameters()), loss=_loss(net, scale=1.0), max_grad_norm=0.5)
    copies = []
    original = torch._foreach_mul
    torch._foreach_mul = lambda *args, **kwargs: copies.append(1) or original(*args, **kwargs)
    try:
        with count_host_reads() as reads:
            guarded_step(optimizer=optimizer, params=list(net.parameters()), loss=_loss(net, scale=float("nan")),
                         max_grad_norm=0.5)
    finally:
        torch._foreach_mul = original
    assert copies == [] and reads.by_kind["scalar"] == 1, (copies, reads.by_kind)


def test_a_fused_optimizer_keeps_no_skip_flag_for_a_later_plain_step() -> None:
    net = _net()
    optimizer = OPTIMIZERS["fused"](list(net.parameters()))
    guarded_step(optimizer=optimizer, params=list(net.parameters()), loss=_loss(net, scale=float("nan")),
                 max_grad_norm=0.5)
    before = [p.detach().clone() for p in net.parameters()]
    optimizer.zero_grad()
    _loss(net, scale=1.0).backward()
    optimizer.step()   # e.g. another learner's code stepping the same optimizer directly
    assert any(not torch.equal(a, p) for a, p in zip(before, net.parameters()))


def test_all_finite_finds_a_nan_or_inf_in_any_tensor_with_one_host_read() -> None:
    from nimbus.algos.step import all_finite

    tensors = [torch.zeros(3), torch.ones(2, 2), torch.arange(4.0)]
    with count_host_reads() as reads:
        verdicts = [bool(all_finite(tensors=tensors))]
        for bad in (float("nan"), float("inf"), float("-inf")):
            tensors[1][1, 0] = bad
            verdicts.append(bool(all_finite(tensors=tensors)))
    assert verdicts == [True, False, False, False] and reads.total == 4, reads.by_kind
    assert bool(all_finite(tensors=[]))

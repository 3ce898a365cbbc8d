"""The authors' Hessian signal (``variant: authors_code``, nitro/probe_authors.py) against their code and exact maths.

References transcribed here from IntelliSys-Lab/Nitro at commit 2c725a94b033848726dbff0fbc958e6df317a444:

* ``_their_grid_ratio``: ``utils.py`` ``estimate_hessian_density.density_generate`` (num_bins=10000,
  sigma_squared=1e-5, overhead=0.01) and the two lines of ``eval_hessian`` that read the ratio off its grid.
* ``_their_density_lanczos``: ``pyhessian/hessian.py`` ``hessian.density`` with ``pyhessian/utils.py``'s
  ``group_product``, ``group_add``, ``normalization``, ``orthnormal``, ``hessian_vector_product``, on a list of
  parameter tensors (their layout), gradients kept with ``create_graph`` as ``hessian.__init__`` does. The only
  change: the Rademacher start vector is drawn from a seeded generator instead of the global RNG.

The probe on a real nimbus PPO model (27 parameters) is checked against the exact Hessian of the whole loss
(policy + value + entropy, raw advantages, every parameter) from ``torch.autograd.functional.hessian``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.func import functional_call

from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.envs.spaces import EnvSpaces
from nimbus.nitro.config import HessianProbeConfig, NitroScalingConfig
from nimbus.nitro.probe import probe_after_update
from nimbus.nitro.probe_authors import AUTHORS_SIGNAL_KEY, authors_parameters, lanczos_ritz_values, padded_grid_ratio
from nimbus.roles.probe import ProbeRequest

SPACES = EnvSpaces(observation=gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                   action=gym.spaces.Box(-1.0, 1.0, (1,), np.float32))


# --- their code, transcribed ---------------------------------------------------------------------------------------

def _their_grid_ratio(eigen_list_full: list[list[float]], weight_list_full: list[list[float]]) -> float:
    def gaussian(x, x0, sigma_squared):
        return np.exp(-(x0 - x)**2 / (2.0 * sigma_squared)) / np.sqrt(2 * np.pi * sigma_squared)

    def density_generate(eigenvalues, weights, num_bins=10000, sigma_squared=1e-5, overhead=0.01):
        eigenvalues = np.array(eigenvalues)
        weights = np.array(weights)
        lambda_max = np.mean(np.max(eigenvalues, axis=1), axis=0) + overhead
        lambda_min = np.mean(np.min(eigenvalues, axis=1), axis=0) - overhead
        grids = np.linspace(lambda_min, lambda_max, num=num_bins)
        sigma = sigma_squared * max(1, (lambda_max - lambda_min))
        num_runs = eigenvalues.shape[0]
        density_output = np.zeros((num_runs, num_bins))
        for i in range(num_runs):
            for j in range(num_bins):
                x = grids[j]
                tmp_result = gaussian(eigenvalues[i, :], x, sigma)
                density_output[i, j] = np.sum(tmp_result * weights[i, :])
        density = np.mean(density_output, axis=0)
        normalization = np.sum(density) * (grids[1] - grids[0])
        density = density / normalization
        return density, grids

    density, grids = density_generate(eigen_list_full, weight_list_full)
    eigenvalue_list, _density_list = grids, density          # estimate_hessian_density returns (grids, density)
    eigenvalue_list = np.real(eigenvalue_list)
    return - max(eigenvalue_list) / min(eigenvalue_list)


def _group_product(xs, ys):
    return sum([torch.sum(x * y) for (x, y) in zip(xs, ys)])


def _group_add(params, update, alpha=1):
    for i, _p in enumerate(params):
        params[i].data.add_(update[i] * alpha)
    return params


def _normalization(v):
    s = _group_product(v, v)
    s = s**0.5
    s = s.cpu().item()
    return [vi / (s + 1e-6) for vi in v]


def _orthnormal(w, v_list):
    for v in v_list:
        w = _group_add(w, v, alpha=-_group_product(w, v))
    return _normalization(w)


def _their_density_lanczos(*, loss: torch.Tensor, params: list[torch.Tensor], iter: int, generator) -> list[float]:
    grads = torch.autograd.grad(loss, params, create_graph=True)        # loss.backward(create_graph=True)
    gradsH = [g + 0. for g in grads]

    def hessian_vector_product(gradsH, params, v):
        return torch.autograd.grad(gradsH, params, grad_outputs=v, only_inputs=True, retain_graph=True)

    n = sum(p.numel() for p in params)
    flat = (2.0 * torch.randint(0, 2, (n,), generator=generator).to(params[0].dtype) - 1.0)
    v = [chunk.view_as(p).clone() for chunk, p in zip(flat.split([p.numel() for p in params]), params)]
    v = _normalization(v)
    v_list = [v]
    w_list = []
    alpha_list = []
    beta_list = []
    for i in range(iter):
        w_prime = [torch.zeros(p.size()) for p in params]
        if i == 0:
            w_prime = hessian_vector_product(gradsH, params, v)
            alpha = _group_product(w_prime, v)
            alpha_list.append(alpha.cpu().item())
            w = _group_add(list(w_prime), v, alpha=-alpha)
            w_list.append(w)
        else:
            beta = torch.sqrt(_group_product(w, w))
            beta_list.append(beta.cpu().item())
            if beta_list[-1] != 0.:
                v = _orthnormal(w, v_list)
                v_list.append(v)
            else:
                w = [torch.randn(p.size()) for p in params]
                v = _orthnormal(w, v_list)
                v_list.append(v)
            w_prime = hessian_vector_product(gradsH, params, v)
            alpha = _group_product(w_prime, v)
            alpha_list.append(alpha.cpu().item())
            w_tmp = _group_add(list(w_prime), v, alpha=-alpha)
            w = _group_add(w_tmp, v_list[-2], alpha=-beta)
    T = torch.zeros(iter, iter)
    for i in range(len(alpha_list)):
        T[i, i] = alpha_list[i]
        if i < len(alpha_list) - 1:
            T[i + 1, i] = beta_list[i]
            T[i, i + 1] = beta_list[i]
    a_, b_ = torch.linalg.eig(T)
    return list(np.real(a_.numpy()))


# --- a real nimbus PPO model (float32: ActorCritic casts observations) ---------------------------------------------

def _ppo(*, rows: int = 40, seed: int = 0, normalize_advantages: bool = True):
    torch.manual_seed(seed)
    algo = PPO(config=PPOConfig(hidden_sizes=(3,), ent_coef=0.05, vf_coef=0.5,
                                normalize_advantages=normalize_advantages))
    model = algo.make_model(spaces=SPACES)
    obs = torch.randn(rows, 2)
    with torch.no_grad():
        actions, log_prob, values = model.act(obs, explore=True)
    batch = {"obs": obs, "actions": actions, "log_prob": log_prob + 0.3 * torch.randn(rows), "values": values,
             "advantages": 3.0 + 2.0 * torch.randn(rows), "returns": torch.randn(rows), "rewards": torch.randn(rows)}
    return algo, model, batch


def _whole_loss(model, batch, *, ent_coef: float = 0.05, vf_coef: float = 0.5, normalize: bool = False):
    """nimbus's PPO training loss written out by hand: clipped surrogate + vf_coef · ½ MSE − ent_coef · entropy."""
    new_log_prob, entropy, values = model.evaluate(batch["obs"], actions=batch["actions"])
    advantages = batch["advantages"]
    if normalize:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    ratio = (new_log_prob - batch["log_prob"]).exp()
    policy = torch.max(-advantages * ratio, -advantages * ratio.clamp(0.8, 1.2)).mean()
    value = 0.5 * ((values - batch["returns"]) ** 2).mean()
    return policy + vf_coef * value - ent_coef * entropy.mean()


class _Evaluate(torch.nn.Module):
    """``model.evaluate`` as a forward, so that ``functional_call`` can substitute the parameters."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, obs: torch.Tensor, actions: torch.Tensor):
        return self.model.evaluate(obs, actions=actions)


class _Substituted:
    def __init__(self, model: torch.nn.Module, params: dict[str, torch.Tensor]) -> None:
        self.wrapper, self.params = _Evaluate(model), {f"model.{n}": t for n, t in params.items()}

    def evaluate(self, obs: torch.Tensor, *, actions: torch.Tensor):
        return functional_call(self.wrapper, self.params, (obs, actions), strict=False)


def _exact_eigenvalues(model, batch, *, names: list[str] | None = None, normalize: bool = False) -> np.ndarray:
    """Eigenvalues of the exact Hessian (torch.autograd.functional.hessian) over the named parameters (all)."""
    named = dict(model.named_parameters())
    names = list(named) if names is None else names
    sizes = [named[n].numel() for n in names]
    flat0 = torch.cat([named[n].detach().reshape(-1) for n in names])

    def loss_of(flat: torch.Tensor) -> torch.Tensor:
        params = {n: c.view_as(named[n]) for n, c in zip(names, flat.split(sizes))}
        return _whole_loss(_Substituted(model, params), batch, normalize=normalize)

    hessian = torch.autograd.functional.hessian(loss_of, flat0)
    return np.linalg.eigvalsh(((hessian + hessian.T) / 2).double().numpy())


def _expected_ratio(eigenvalues: np.ndarray) -> float:
    return -(eigenvalues.max() + 0.01) / (eigenvalues.min() - 0.01)


def _probe(algo, model, batch, *, max_iterations: int = 100) -> dict[str, float]:
    header = ProbeRequest(subset_size=None, max_iterations=max_iterations, tolerance=1e-3,
                          signal="authors_code").to_header()
    return probe_after_update(algo=algo, model=model, batch=batch, probe=header, seed=3, policy_version=0)


# --- tests ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grid_ratio_equals_their_density_grid(seed: int) -> None:
    ritz = np.random.default_rng(seed).normal(size=30) * (0.05 if seed == 2 else 3.0)
    weights = np.full((1, 30), 1.0 / 30)
    grid_min, grid_max, ratio = padded_grid_ratio(ritz_values=ritz)
    assert ratio == pytest.approx(_their_grid_ratio([list(ritz)], list(weights)), rel=1e-12)
    assert (grid_min, grid_max) == pytest.approx((ritz.min() - 0.01, ritz.max() + 0.01), rel=1e-12)


def test_lanczos_equals_their_density_loop_on_a_partial_krylov_space() -> None:
    """8 steps on a 17-parameter quadratic (two tensors): the Ritz values depend on every step of the loop."""
    torch.manual_seed(0)
    a = torch.randn(17, 17, dtype=torch.float64)
    matrix = a @ a.T / 17 - 0.8 * torch.eye(17, dtype=torch.float64)
    params = [torch.randn(3, 4, dtype=torch.float64, requires_grad=True),
              torch.randn(5, dtype=torch.float64, requires_grad=True)]

    def loss():
        flat = torch.cat([p.reshape(-1) for p in params])
        return 0.5 * flat @ matrix @ flat

    theirs = _their_density_lanczos(loss=loss(), params=params, iter=8, generator=torch.Generator().manual_seed(5))
    ours = lanczos_ritz_values(hvp=lambda v: matrix @ v, num_params=17, iterations=8,
                               generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    exact = np.linalg.eigvalsh(matrix.numpy())
    assert np.sort(ours) == pytest.approx(np.sort(theirs), rel=1e-6, abs=1e-7)
    assert ours.max() < exact.max() - 1e-3 or ours.min() > exact.min() + 1e-3    # partial: not the exact extremes


def test_probe_is_the_padded_ratio_of_the_exact_whole_loss_hessian() -> None:
    """Whole loss (policy + value + entropy), every parameter (critic and log-std included), raw advantages, whole
    batch: the probe's R is −(λmax + 0.01)/(λmin − 0.01) of the exact Hessian
    (torch.autograd.functional.hessian)."""
    algo, model, batch = _ppo()
    extras = _probe(algo, model, batch)
    exact = _exact_eigenvalues(model, batch)
    assert len(exact) == sum(p.numel() for p in authors_parameters(model=model)) == 27
    assert extras["hessian_ratio"] == pytest.approx(_expected_ratio(exact), rel=1e-4)
    assert extras["hessian_lambda_max"] == pytest.approx(exact.max() + 0.01, rel=1e-4)
    assert extras["hessian_lambda_min"] == pytest.approx(exact.min() - 0.01, rel=1e-4)
    assert extras["hessian_num_hvps"] == 27 and extras["probe_rows"] == 40 and extras[AUTHORS_SIGNAL_KEY] == 0.01


def test_each_part_of_their_signal_changes_the_ratio() -> None:
    """The check above discriminates: the policy parameters alone, normalised advantages or no padding each give
    a ratio outside its tolerance."""
    algo, model, batch = _ppo()
    exact = _expected_ratio(_exact_eigenvalues(model, batch))
    policy_names = [n for n, _ in model.named_parameters() if not n.startswith("critic")]
    policy_only = _expected_ratio(_exact_eigenvalues(model, batch, names=policy_names))
    normalised = _expected_ratio(_exact_eigenvalues(model, batch, normalize=True))
    eigenvalues = _exact_eigenvalues(model, batch)
    unpadded = -eigenvalues.max() / eigenvalues.min()
    for other in (policy_only, normalised, unpadded):
        assert abs(other - exact) > 1e-3 * abs(exact)


def test_probe_turns_advantage_normalisation_off_without_touching_the_algorithm() -> None:
    algo, model, batch = _ppo(normalize_advantages=True)
    extras = _probe(algo, model, batch)
    assert extras["hessian_ratio"] == pytest.approx(_expected_ratio(_exact_eigenvalues(model, batch)), rel=1e-4)
    assert algo.config.normalize_advantages is True


def test_paper_request_still_runs_the_paper_probe() -> None:
    algo, model, batch = _ppo()
    header = ProbeRequest(subset_size=None, max_iterations=30, tolerance=1e-3).to_header()
    extras = probe_after_update(algo=algo, model=model, batch=batch, probe=header, seed=3, policy_version=0)
    assert AUTHORS_SIGNAL_KEY not in extras and "hessian_converged" in extras


def test_authors_code_refuses_a_subset() -> None:
    with pytest.raises(ValueError, match="subset_size must be null"):
        NitroScalingConfig(variant="authors_code", hessian=HessianProbeConfig(subset_size=256))
    NitroScalingConfig(variant="paper", hessian=HessianProbeConfig(subset_size=256))


def test_a_non_finite_loss_gives_a_nan_ratio() -> None:
    algo, model, batch = _ppo()
    batch = {**batch, "returns": batch["returns"] * float("nan")}
    assert np.isnan(_probe(algo, model, batch)["hessian_ratio"])

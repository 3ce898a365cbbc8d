"""``variant: authors_code`` against the public code (IntelliSys-Lab/Nitro ``Nitro.py``, ``utils.py``, ``config.py``).

``_reference`` is a second, independent transcription of the loop in ``Nitro.py`` (their names, their
deque, numpy and ``int()``), fed with the reciprocal of our R because their ``eval_hessian`` probes
``policy.loss``. Hypothesis compares it with ``AuthorsCodeNitroScaler`` on random R sequences.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nimbus.nitro.scaler_authors import AuthorsCodeNitroScaler


def _reference(our_ratios: list[float], *, lo: int = 8, hi: int = 64, window: int = 6, d: float = 0.96) -> list[int]:
    history = collections.deque(maxlen=window)              # hessian_history['ratio']
    counts = []
    for round_id, ours in enumerate(our_ratios, start=1):    # round_id = 1 before the first step
        hessian_eigen_ratio = 1.0 / ours                    # −max/min of the loss's eigenvalues
        decay_factor = d**round_id
        R = hessian_eigen_ratio * decay_factor
        history.append(R)
        if len(history) > 1:
            R_max, R_min = np.max(history), np.min(history)
            boost_score = 1.0 if R_max == R_min else (R - R_min) / (R_max - R_min)   # Nitro_local.py's guard
        else:
            boost_score = 1.0
        workers_min = int(np.clip(hi * decay_factor**round_id, lo, hi))
        counts.append(int(np.clip(hi * boost_score, workers_min, hi)))
        history.append(hessian_eigen_ratio)
    return counts


def _run(scaler: AuthorsCodeNitroScaler, make_metrics, ratios: list[float]) -> list[int]:
    return [scaler.decide(metrics=make_metrics(round=k, ratio=r)).num_actors for k, r in enumerate(ratios)]


@settings(max_examples=200, deadline=None)
@given(ratios=st.lists(st.floats(min_value=1e-3, max_value=1e3), min_size=1, max_size=40),
       window=st.integers(min_value=2, max_value=8), decay=st.floats(min_value=0.8, max_value=1.0))
def test_matches_an_independent_transcription_on_random_sequences(ratios, window, decay) -> None:
    from tests.unit.conftest import round_metrics
    scaler = AuthorsCodeNitroScaler(window=window, decay=decay)
    got = [scaler.decide(metrics=round_metrics(round=k, extras={"hessian_ratio": r})).num_actors
           for k, r in enumerate(ratios)]
    assert got == _reference(ratios, window=window, d=decay)


def test_first_round_runs_16_of_64_actors() -> None:
    assert AuthorsCodeNitroScaler().initial().num_actors == 16           # num_rollout_workers_serverful


def test_one_value_in_the_window_scores_one(make_metrics) -> None:
    decision = AuthorsCodeNitroScaler().decide(metrics=make_metrics(round=0, ratio=2.0))
    assert decision.signals["score"] == 1.0 and decision.num_actors == 64


def test_window_receives_the_decayed_and_the_raw_value(make_metrics) -> None:
    scaler = AuthorsCodeNitroScaler()
    scaler.decide(metrics=make_metrics(round=0, ratio=2.0))              # their round_id 1, R_code = 0.5
    assert scaler.window_values == (pytest.approx(0.5 * 0.96), 0.5)


def test_low_r_is_boostable_through_the_reciprocal(make_metrics) -> None:
    # round_id 2: W = [0.48, 0.5, 1/0.5·0.96² = 1.8432] -> R_code·d² is the maximum, S = 1 -> 64
    # (with R itself, 0.5·0.96² = 0.4608 would be the minimum and score 0)
    scaler = AuthorsCodeNitroScaler()
    assert _run(scaler, make_metrics, [2.0, 0.5]) == [64, 64]
    assert scaler.window_values[-2] == pytest.approx(2.0 * 0.96**2)


def test_counts_are_truncated_not_rounded(make_metrics) -> None:
    # round_id 3 onwards the floor is 64·0.96^9 = 44.3 -> int 44; a score giving 64·S = 59.x must give 59.
    scaler = AuthorsCodeNitroScaler()
    _run(scaler, make_metrics, [1.0, 1.0])
    low, high = min(scaler.window_values), max(scaler.window_values)
    target_value = low + 0.93 * (high - low)          # S = 0.93 -> 59.52 -> 59
    our_ratio = 1.0 / (target_value / 0.96**3)
    decision = scaler.decide(metrics=make_metrics(round=2, ratio=our_ratio))
    assert decision.signals["score"] == pytest.approx(0.93)
    assert decision.num_actors == 59


def test_floor_front_loads_spending(make_metrics) -> None:
    # Constant R: each round's r·d^k is the window minimum (d < 1), S = 0; the floor int(64·d^(k²)) decides.
    counts = _run(AuthorsCodeNitroScaler(), make_metrics, [1.0] * 9)
    assert counts[0] == 64                                     # one value: S = 1
    assert counts[1:] == [int(np.clip(64 * 0.96 ** (k * k), 8, 64)) for k in range(2, 10)]
    assert counts[1:4] == [54, 44, 33]


def test_unusable_probe_falls_back_to_min_actors(make_metrics) -> None:
    scaler = AuthorsCodeNitroScaler()
    decision = scaler.decide(metrics=make_metrics(round=0, ratio=0.0))
    assert (decision.num_actors, decision.signals["skipped_probes"]) == (8, 1.0)
    assert scaler.window_values == ()

"""``variant: authors_code``'s scaler against the public code: IntelliSys-Lab/Nitro ``Nitro.py`` and ``config.py`` at
commit 2c725a94b033848726dbff0fbc958e6df317a444.

``_reference`` is a second, independent transcription of the loop in ``Nitro.py`` (their names, their deque,
numpy and ``int()``). Its ``hessian_eigen_ratio`` is the row's ``hessian_ratio`` as it is: the authors' probe
(nitro/probe_authors.py, tests/unit/nitro/test_probe_authors.py) computes their R, so no reciprocal is taken.
Hypothesis compares it with ``AuthorsCodeNitroScaler`` on random R sequences.
"""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nimbus.nitro.probe_authors import AUTHORS_SIGNAL_KEY, GRID_PADDING
from nimbus.nitro.scaler import MissingSignalError
from nimbus.nitro.scaler_authors import AuthorsCodeNitroScaler
from tests.unit.conftest import round_metrics


def _reference(ratios: list[float], *, lo: int = 8, hi: int = 64, window: int = 6, d: float = 0.96) -> list[int]:
    history = collections.deque(maxlen=window)              # hessian_history['ratio']
    counts = []
    for round_id, hessian_eigen_ratio in enumerate(ratios, start=1):    # round_id = 1 before the first step
        decay_factor = d**round_id
        R = hessian_eigen_ratio * decay_factor
        history.append(R)
        if len(history) > 1:
            R_max, R_min = np.max(history), np.min(history)
            boost_score = 1.0 if R_max == R_min else (R - R_min) / (R_max - R_min)   # 0/0 raises in Nitro.py
        else:
            boost_score = 1.0
        workers_min = int(np.clip(hi * decay_factor**round_id, lo, hi))
        counts.append(int(np.clip(hi * boost_score, workers_min, hi)))
        history.append(hessian_eigen_ratio)
    return counts


def _row(*, round: int, ratio: float, cost_usd: float = 0.0):
    """A row as the authors' probe writes it: their R and the grid padding key."""
    return round_metrics(round=round, cost_usd=cost_usd,
                         extras={"hessian_ratio": ratio, AUTHORS_SIGNAL_KEY: GRID_PADDING})


def _run(scaler: AuthorsCodeNitroScaler, ratios: list[float]) -> list[int]:
    return [scaler.decide(metrics=_row(round=k, ratio=r)).num_actors for k, r in enumerate(ratios)]


@settings(max_examples=200, deadline=None)
@given(ratios=st.lists(st.floats(min_value=-1e3, max_value=1e3), min_size=1, max_size=40),
       window=st.integers(min_value=2, max_value=8), decay=st.floats(min_value=0.8, max_value=1.0))
def test_matches_an_independent_transcription_on_random_sequences(ratios, window, decay) -> None:
    scaler = AuthorsCodeNitroScaler(window=window, decay=decay)
    assert _run(scaler, ratios) == _reference(ratios, window=window, d=decay)


def test_first_round_runs_16_of_64_actors() -> None:
    assert AuthorsCodeNitroScaler().initial().num_actors == 16           # num_rollout_workers_serverful


def test_one_value_in_the_window_scores_one() -> None:
    decision = AuthorsCodeNitroScaler().decide(metrics=_row(round=0, ratio=2.0))
    assert decision.signals["score"] == 1.0 and decision.num_actors == 64


def test_window_receives_the_decayed_and_the_raw_value() -> None:
    scaler = AuthorsCodeNitroScaler()
    scaler.decide(metrics=_row(round=0, ratio=2.0))                      # their round_id 1
    assert scaler.window_values == (pytest.approx(2.0 * 0.96), 2.0)


def test_high_authors_ratio_is_boostable_as_read() -> None:
    # round_id 2: W = [1.92, 2.0, 4·0.96² = 3.6864] -> the new value is the maximum, S = 1 -> 64.
    # (Through a reciprocal, 0.25·0.96² = 0.2304 would be the minimum and score 0 -> the floor, 54.)
    scaler = AuthorsCodeNitroScaler()
    assert _run(scaler, [2.0, 4.0]) == [64, 64]
    assert scaler.window_values[-2] == pytest.approx(4.0 * 0.96**2)


def test_counts_are_truncated_not_rounded() -> None:
    # round_id 3 onwards the floor is 64·0.96^9 = 44.3 -> int 44; a score giving 64·S = 59.x must give 59.
    scaler = AuthorsCodeNitroScaler()
    _run(scaler, [1.0, 1.0])
    low, high = min(scaler.window_values), max(scaler.window_values)
    target_value = low + 0.93 * (high - low)          # S = 0.93 -> 59.52 -> 59
    decision = scaler.decide(metrics=_row(round=2, ratio=target_value / 0.96**3))
    assert decision.signals["score"] == pytest.approx(0.93)
    assert decision.num_actors == 59


def test_floor_front_loads_spending() -> None:
    # Constant R: each round's r·d^k is the window minimum (d < 1), S = 0; the floor int(64·d^(k²)) decides.
    counts = _run(AuthorsCodeNitroScaler(), [1.0] * 9)
    assert counts[0] == 64                                     # one value: S = 1
    assert counts[1:] == [int(np.clip(64 * 0.96 ** (k * k), 8, 64)) for k in range(2, 10)]
    assert counts[1:4] == [54, 44, 33]


@pytest.mark.parametrize("ratio", [math.nan, math.inf])
def test_non_finite_ratio_falls_back_to_min_actors(ratio: float) -> None:
    scaler = AuthorsCodeNitroScaler()
    decision = scaler.decide(metrics=_row(round=0, ratio=ratio))
    assert (decision.num_actors, decision.signals["skipped_probes"]) == (8, 1.0)
    assert scaler.window_values == ()


def test_zero_and_negative_ratios_enter_the_window_as_in_their_code() -> None:
    # Their loop has no guard: 0 and a negative R (a positive padded grid minimum) are scored like any other.
    scaler = AuthorsCodeNitroScaler()
    assert _run(scaler, [0.0, -1.0]) == _reference([0.0, -1.0])
    assert scaler.window_values == (0.0, 0.0, pytest.approx(-0.96**2), -1.0)


def test_a_paper_probe_row_is_refused(make_metrics) -> None:
    """A row without the authors' padding key (a paper probe's R) is a wiring bug, not a signal."""
    with pytest.raises(MissingSignalError, match=AUTHORS_SIGNAL_KEY):
        AuthorsCodeNitroScaler().decide(metrics=make_metrics(round=0, ratio=2.0))


def test_an_update_that_could_not_be_probed_is_skipped_not_refused() -> None:
    from nimbus.nitro.probe import probe_not_run
    decision = AuthorsCodeNitroScaler().decide(metrics=round_metrics(round=0, extras=probe_not_run()))
    assert (decision.num_actors, decision.signals["skipped_probes"]) == (8, 1.0)

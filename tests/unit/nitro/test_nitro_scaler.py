"""NitroScaler arithmetic on hand-made R sequences (paper 002 §5.3; authors' code variant from DESIGN §3).

Defaults unless a test says otherwise: I_min = 8, I_max = 64, n = 6, d = 0.96; I = clip(round(64·S)).
"""

from __future__ import annotations

import math

import pytest

from nimbus.nitro.scaler import MissingSignalError, NitroScaler


def _run(scaler: NitroScaler, make_metrics, ratios: list[float], *, start_round: int = 0) -> list[int]:
    return [
        scaler.decide(metrics=make_metrics(round=start_round + i, ratio=r)).num_actors
        for i, r in enumerate(ratios)
    ]


def test_initial_is_min_actors_for_the_paper() -> None:
    decision = NitroScaler().initial()
    assert decision.num_actors == 8
    assert "initial" in decision.reason


def test_paper_direction_low_ratio_gets_more_actors(make_metrics) -> None:
    scaler = NitroScaler()
    # k=0  W=[2]        no spread          -> S=0                              -> 8
    # k=1  W=[2,1]      R=1 is the minimum -> S=(2-1)/(2-1)·0.96     = 0.96     -> 61.44 -> 61
    # k=2  W=[2,1,3]    R=3 is the maximum -> S=0                               -> 8
    # k=3  W=[2,1,3,2]  S=(3-2)/(3-1)·0.96³ = 0.5·0.884736 = 0.442368           -> 28.31 -> 28
    assert _run(scaler, make_metrics, [2.0, 1.0, 3.0, 2.0]) == [8, 61, 8, 28]


def test_signals_carry_what_the_report_plots(make_metrics) -> None:
    scaler = NitroScaler(budget_usd=10.0)
    scaler.decide(metrics=make_metrics(round=0, ratio=2.0, cost_usd=1.0))
    decision = scaler.decide(metrics=make_metrics(round=1, ratio=1.0, cost_usd=2.5))
    signals = decision.signals
    assert signals["hessian_ratio"] == 1.0
    assert signals["score"] == pytest.approx(0.96)
    assert (signals["window_min"], signals["window_max"]) == (1.0, 2.0)
    assert signals["budget_left_usd"] == pytest.approx(7.5)
    assert signals["skipped_probes"] == 0.0
    assert decision.reason == "nitro score"


def test_decay_shrinks_the_same_score_in_later_rounds(make_metrics) -> None:
    early = _run(NitroScaler(), make_metrics, [2.0, 1.0], start_round=0)
    late = _run(NitroScaler(), make_metrics, [2.0, 1.0], start_round=10)
    assert early[-1] == 61                  # 64 · 0.96     = 61.44
    assert late[-1] == 41                   # 64 · 0.96^11  = 40.85
    no_decay = _run(NitroScaler(decay=1.0), make_metrics, [2.0, 1.0], start_round=10)
    assert no_decay[-1] == 64


def test_window_forgets_values_older_than_n_rounds(make_metrics) -> None:
    scaler = NitroScaler(window=3, decay=1.0)
    # k=3: W=[5,5,4] (the 0 of k=0 has slid out) -> S=(5-4)/(5-4)=1 -> 64.
    # Had the 0 been kept: S=(5-4)/(5-0)=0.2 -> 12.8 -> 13.
    assert _run(scaler, make_metrics, [0.0, 5.0, 5.0, 4.0]) == [8, 8, 8, 64]
    assert scaler.window_values == (5.0, 5.0, 4.0)


def test_clipping_to_min_actors_and_exact_max(make_metrics) -> None:
    scaler = NitroScaler(decay=1.0)
    # W=[0,10], R=9.5: S=0.05 -> 3.2 -> clipped up to 8; then R=0 (the minimum): S=1 -> exactly 64.
    assert _run(scaler, make_metrics, [0.0, 10.0, 9.5, 0.0]) == [8, 8, 8, 64]


def test_rounding_is_half_up(make_metrics) -> None:
    scaler = NitroScaler(min_actors=1, max_actors=4, decay=1.0)
    # W=[0,4], R=1.5: S=(4-1.5)/4=0.625 -> 4·0.625 = 2.5 -> 3 (banker's rounding would give 2)
    assert _run(scaler, make_metrics, [0.0, 4.0, 1.5]) == [1, 1, 3]


def test_budget_exhaustion_drops_to_min_actors_for_the_rest_of_the_run(make_metrics) -> None:
    scaler = NitroScaler(budget_usd=1.0)
    assert scaler.decide(metrics=make_metrics(round=0, ratio=2.0, cost_usd=0.2)).num_actors == 8
    assert scaler.decide(metrics=make_metrics(round=1, ratio=1.0, cost_usd=0.5)).num_actors == 61
    spent = scaler.decide(metrics=make_metrics(round=2, ratio=0.5, cost_usd=1.0))   # cost reaches budget
    assert (spent.num_actors, spent.reason) == (8, "budget spent")
    assert spent.signals["budget_left_usd"] == 0.0 and spent.signals["budget_spent"] == 1.0
    assert spent.signals["budget_stop"] == 1.0            # on_budget: stop (default) ends the run
    assert spent.signals["score"] > 0.8                   # the score is still reported, just not acted on
    later = scaler.decide(metrics=make_metrics(round=3, ratio=0.1, cost_usd=0.9))
    assert (later.num_actors, later.reason) == (8, "budget spent")


def test_on_budget_min_keeps_training_at_min_actors(make_metrics) -> None:
    scaler = NitroScaler(budget_usd=1.0, on_budget="min")
    spent = scaler.decide(metrics=make_metrics(round=0, ratio=2.0, cost_usd=1.5))
    assert (spent.num_actors, spent.reason, spent.signals["budget_stop"]) == (8, "budget spent", 0.0)


def test_no_budget_means_no_budget_signals(make_metrics) -> None:
    decision = NitroScaler().decide(metrics=make_metrics(round=0, ratio=1.0, cost_usd=1e9))
    assert "budget_left_usd" not in decision.signals


# --- guards ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ratios", [[3.0], [3.0, 3.0, 3.0]])
def test_window_without_spread_scores_zero(make_metrics, ratios: list[float]) -> None:
    scaler = NitroScaler()
    decisions = [scaler.decide(metrics=make_metrics(round=k, ratio=r)) for k, r in enumerate(ratios)]
    assert all(d.num_actors == 8 and d.signals["score"] == 0.0 for d in decisions)
    assert decisions[-1].reason == "window has no spread"


@pytest.mark.parametrize(
    ("ratio", "lambda_min", "why"),
    [(math.nan, None, "not finite"), (math.inf, None, "not finite"), (-math.inf, None, "not finite"),
     (-12.0, 0.5, "lambda_min >= 0"), (5.0, 0.0, "lambda_min >= 0"), (5.0, math.nan, "lambda_min >= 0")],
)
def test_unusable_probe_is_skipped_and_falls_back_to_min_actors(make_metrics, ratio, lambda_min, why) -> None:
    scaler = NitroScaler()
    assert _run(scaler, make_metrics, [2.0, 1.0]) == [8, 61]
    skipped = scaler.decide(metrics=make_metrics(round=2, ratio=ratio, lambda_min=lambda_min))
    assert skipped.num_actors == 8        # no evidence: I_min, not the boosted 61 of the round before
    assert why in skipped.reason
    assert skipped.signals["skipped_probes"] == 1.0
    assert scaler.window_values == (2.0, 1.0)
    # The next valid value resumes the arithmetic: W=[2,1,1.5], S=(2-1.5)/(2-1)·0.96³=0.442368 -> 28.
    resumed = scaler.decide(metrics=make_metrics(round=3, ratio=1.5, lambda_min=-0.1))
    assert resumed.num_actors == 28
    assert resumed.signals["skipped_probes"] == 1.0


def test_skipped_probe_before_any_valid_one_keeps_the_initial_count(make_metrics) -> None:
    decision = NitroScaler().decide(metrics=make_metrics(round=0, ratio=math.nan))
    assert decision.num_actors == 8


def test_skipped_probe_still_honours_the_budget(make_metrics) -> None:
    scaler = NitroScaler(budget_usd=1.0)
    assert _run(scaler, make_metrics, [2.0, 1.0]) == [8, 61]
    decision = scaler.decide(metrics=make_metrics(round=2, ratio=math.nan, cost_usd=2.0))
    assert (decision.num_actors, decision.reason) == (8, "budget spent")


def test_missing_ratio_is_a_clear_error(make_metrics) -> None:
    with pytest.raises(MissingSignalError, match="hessian_ratio"):
        NitroScaler().decide(metrics=make_metrics(round=4))


@pytest.mark.parametrize(
    "kwargs",
    [dict(min_actors=10, max_actors=5), dict(min_actors=0), dict(window=0), dict(decay=0.0),
     dict(decay=1.5), dict(budget_usd=0.0), dict(on_budget="never")],
)
def test_constructor_rejects_bad_arguments(kwargs) -> None:
    with pytest.raises(ValueError):
        NitroScaler(**kwargs)


# --- state for checkpoints ------------------------------------------------------------------------------


def test_state_dict_round_trip_continues_the_same_decisions(make_metrics) -> None:
    ratios = [2.0, 1.0, 3.0, 2.5, 0.5]
    whole = _run(NitroScaler(budget_usd=9.0), make_metrics, ratios)
    first = NitroScaler(budget_usd=9.0)
    _run(first, make_metrics, ratios[:3])
    second = NitroScaler(budget_usd=9.0)
    second.load_state_dict(first.state_dict())
    assert _run(second, make_metrics, ratios[3:], start_round=3) == whole[3:]
    assert second.window_values == (2.0, 1.0, 3.0, 2.5, 0.5)

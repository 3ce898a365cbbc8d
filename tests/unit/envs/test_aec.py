"""AEC (turn-based) PettingZoo envs in a multi-agent run (issue 27, Build: AEC envs): converted with PettingZoo's
``aec_to_parallel`` where the env declares ``metadata["is_parallelizable"]`` (mpe2's ``env()`` constructors), refused
with exit 2 where it does not (pettingzoo.classic's tic-tac-toe). Before, every AEC env was refused."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

pytest.importorskip("mpe2")
REPO = Path(__file__).resolve().parents[3]
AEC_SPREAD = "mpe2.simple_spread_v3:env"          # the AEC constructor: is_parallelizable True
TICTACTOE = "pettingzoo.classic.tictactoe_v3:env"  # turn-based: is_parallelizable False


def test_a_parallelizable_aec_env_is_converted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    import mpe2.simple_spread_v3 as spread
    from pettingzoo import AECEnv, ParallelEnv

    from nimbus.envs.parallel import agent_spaces, make_parallel_env
    assert isinstance(spread.env(N=3), AECEnv)
    with caplog.at_level(logging.INFO, logger="nimbus.envs.aec"):
        env = make_parallel_env(env_id=AEC_SPREAD, seed=0, kwargs={"N": 3, "max_cycles": 25})
    assert isinstance(env.env, ParallelEnv)
    assert "converted with pettingzoo.utils.conversions.aec_to_parallel" in caplog.text
    reference = make_parallel_env(env_id="mpe2:simple_spread_v3", seed=0, kwargs={"N": 3, "max_cycles": 25})
    assert agent_spaces(env=env) == agent_spaces(env=reference)
    obs, _ = env.reset()
    same, _ = reference.reset()
    assert sorted(obs) == sorted(same) and all((obs[a] == same[a]).all() for a in obs)   # the same env, seeded alike


def test_a_multiagent_run_trains_on_a_converted_aec_env(tmp_path: Path) -> None:
    """One IPPO round on the inline runtime with the AEC constructor: every policy trained (version 1), episodes ran."""
    from nimbus.config import apply_overrides, load_config, parse_config
    from nimbus.run.loop import train

    base = load_config(path=REPO / "configs" / "marless-ippo-spread.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(tmp_path), "loggers": [], "report": False, "status_line": False}
    base["train"]["eval_episodes"] = 0
    config = parse_config(data=apply_overrides(data=base, overrides=[
        "runtime.backend=inline", f"env.id={AEC_SPREAD}", "env.kwargs={N: 3, max_cycles: 25}",
        "env.num_envs_per_actor=2", "actors.scaling={kind: fixed, num_actors: 1}", "actors.fragment_steps=25",
        "algo.num_epochs=1", "train.max_rounds=1"]))
    rows = train(config=config).rows
    assert len(rows) == 1
    row = rows[0]
    assert row.policy_version == 3                               # each of the 3 policies published version 1
    assert all(math.isfinite(row.losses[f"p_agent_{i}/policy_loss"]) for i in range(3))
    assert row.env_steps == 2 * 25 and row.episodes == 2         # max_cycles 25: each env ended one episode


def test_a_turn_based_aec_env_exits_2_with_the_reason(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """nimbus.cli.main in this process (``run_cli``): the exit code and the message are main's, not the console
    script's (tests/integration/test_cli.py starts that); an uncaught exception would fail this test, and a logged
    traceback would be in caplog."""
    pytest.importorskip("pettingzoo.classic.tictactoe_v3")
    monkeypatch.chdir(tmp_path)                                  # the run directory would be written under the cwd
    code, message = run_cli("train", str(REPO / "configs" / "marless-ippo-spread.yaml"), "--set",
                            f"env.id={TICTACTOE}", "--set", "env.kwargs={}", "--set", "runtime.backend=inline")
    assert code == 2, message[-2000:]
    assert "tictactoe_v3:env' returned OrderEnforcingWrapper, a turn-based (AEC)" in message
    assert "does not declare is_parallelizable" in message and "Traceback" not in message + caplog.text

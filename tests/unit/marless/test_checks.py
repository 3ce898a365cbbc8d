"""Bad multi-agent input is refused before anything starts (issue 27 fix 6): a policy map across different spaces
(marless/checks.py, through the sharing controller), env.wrappers (marless/config.py ``check_multiagent_env``)
and a turn-based AEC env that does not declare is_parallelizable (envs/aec.py ``parallel_from_aec``), each naming
the key and what to do. The conversion of parallelizable AEC envs: tests/unit/envs/test_aec.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.config import EnvConfig, load_config
from nimbus.errors import ConfigError
from nimbus.marless.config import MarlessConfig

REPO = Path(__file__).resolve().parents[3]
ADVERSARY = ["env.id=mpe2:simple_adversary_v3", "env.kwargs={N: 2, max_cycles: 25}"]
MISMATCHED = [*ADVERSARY, "marless.agent_policy={adversary_0: p_agent_0}"]   # obs (8,) onto a policy for (10,)


def test_a_policy_map_across_different_spaces_is_refused_with_the_key() -> None:
    from nimbus.marless.sharing import SharingController

    compatible = {"adversary_0": "Box(8)|Discrete(5)", "agent_0": "Box(10)|Discrete(5)",
                  "agent_1": "Box(10)|Discrete(5)"}
    ok = MarlessConfig(agent_policy={"agent_1": "p_agent_0"})
    SharingController(config=ok, agents=list(compatible), compatible=compatible, seed=0)   # same spaces: fine
    bad = MarlessConfig(agent_policy={"adversary_0": "p_agent_0"})
    with pytest.raises(ConfigError, match=r"^marless\.agent_policy\.adversary_0: p_agent_0 is built for agent_0's "
                                          r"spaces \(Box\(10\)\|Discrete\(5\)\) but adversary_0 has Box\(8\)"):
        SharingController(config=bad, agents=list(compatible), compatible=compatible, seed=0)


def test_the_run_stops_before_any_worker_pool_is_built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The real env's spaces (mpe2 simple_adversary: the adversary sees 8 numbers, the agents 10); the check runs
    before the pool: building it fails this test. Today the actors failed 4 times with a numpy error (exit 1)."""
    pytest.importorskip("mpe2")
    from nimbus.run import loop

    def no_pool(**_: object) -> None:
        raise AssertionError("a worker pool was built before the map was checked")

    monkeypatch.setattr(loop, "build_shared", no_pool)
    config = load_config(path=REPO / "configs" / "marless-ippo-spread.yaml",
                         overrides=[*MISMATCHED, f"output.root_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"^marless\.agent_policy\.adversary_0: "):
        loop.train(config=config)


def test_the_cli_exits_2_naming_the_key_and_nothing_runs(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """nimbus.cli.main in this process (``run_cli``): the exit code and the message are main's, not the console
    script's (tests/integration/test_cli.py starts that); an uncaught exception would fail this test, and a logged
    traceback would be in caplog."""
    pytest.importorskip("mpe2")
    monkeypatch.chdir(tmp_path)                                  # the run directory would be written under the cwd
    code, said = run_cli("train", str(REPO / "configs" / "marless-ippo-spread.yaml"),
                         *[arg for override in MISMATCHED for arg in ("--set", override)])
    assert code == 2, said[-2000:]
    assert "marless.agent_policy.adversary_0" in said and "Traceback" not in said + caplog.text
    written = {path.name for path in tmp_path.rglob("*") if path.is_file()}
    assert written <= {".lock"}                                # the CLI's run-dir lock; no ledger, no metrics


def test_env_wrappers_are_refused_for_a_multiagent_run() -> None:
    from nimbus.marless.config import check_multiagent_env

    check_multiagent_env(env=EnvConfig())
    with pytest.raises(ValueError, match=r"^env\.wrappers: \['gymnasium\.wrappers\.FlattenObservation'\] are "
                                         r"gymnasium wrappers.*does not apply them"):
        check_multiagent_env(env=EnvConfig(wrappers=("gymnasium.wrappers.FlattenObservation",)))


def _aec_env(*, parallelizable: bool) -> object:
    from pettingzoo import AECEnv

    class TurnBased(AECEnv):
        metadata = {"name": "turn_based_v0", "is_parallelizable": parallelizable}

    return TurnBased()


def test_a_turn_based_aec_env_is_refused_with_why() -> None:
    from pettingzoo import ParallelEnv

    from nimbus.envs.aec import parallel_from_aec

    with pytest.raises(ConfigError, match=r"^env\.id: 'pkg\.turns:make' returned TurnBased, a turn-based \(AEC\).*"
                                          r"does not declare is_parallelizable: its agents act one after another"):
        parallel_from_aec(env=_aec_env(parallelizable=False), env_id="pkg.turns:make")
    parallel = ParallelEnv()
    assert parallel_from_aec(env=parallel, env_id="pkg.parallel:make") is parallel      # a Parallel env passes


def test_a_multiagent_config_with_env_wrappers_exits_2_at_parse() -> None:
    """Wired: the config's multi-agent rules call check_multiagent_env (config/rules.py)."""
    from nimbus.config import parse_config

    data = {"algo": {"name": "ippo"}, "train": {"workflow": "marless"},
            "env": {"id": "mpe2:simple_spread_v3", "wrappers": ["gymnasium.wrappers.FlattenObservation"]}}
    with pytest.raises(ConfigError, match=r"env\.wrappers"):
        parse_config(data=data)
    parse_config(data={**data, "env": {"id": "mpe2:simple_spread_v3"}})


def make_turn_based() -> object:
    return _aec_env(parallelizable=False)


def test_building_a_turn_based_aec_env_is_refused() -> None:
    """Wired: envs/parallel.py build_raw_env passes the factory's result through parallel_from_aec."""
    from nimbus.envs.parallel import build_raw_env

    with pytest.raises(ConfigError, match=r"does not declare is_parallelizable"):
        build_raw_env(env_id=f"{__name__}:make_turn_based", kwargs={})

from pathlib import Path

import pytest
from pydantic import ValidationError

from nimbus.config import apply_overrides, dump_config, load_config, parse_config
from nimbus.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]


def minimal() -> dict:
    return {"name": "t", "algo": {"name": "ppo", "minibatch_size": 64}}


def test_shipped_configs_validate() -> None:
    for path in sorted((REPO / "configs").glob("*.yaml")):
        config = load_config(path=path)
        assert config.name


def test_defaults_fill_every_section() -> None:
    config = parse_config(data=minimal())
    assert config.runtime.keep_alive_s == 600.0
    assert config.actors.scaling.kind == "fixed"
    assert config.channel.compress_min_bytes == 1 << 20


def test_unknown_key_names_the_path() -> None:
    data = minimal()
    data["algo"]["learning_rate"] = 0.1
    with pytest.raises(ConfigError, match=r"algo\.learning_rate: unknown key"):
        parse_config(data=data)


def test_wrong_type_names_the_path() -> None:
    with pytest.raises(ConfigError, match=r"env\.num_envs_per_actor"):
        parse_config(data=minimal() | {"env": {"num_envs_per_actor": "many"}})


def test_negative_count_rejected() -> None:
    with pytest.raises(ConfigError, match=r"actors\.fragment_steps"):
        parse_config(data=minimal() | {"actors": {"fragment_steps": -3}})


def test_unknown_algorithm_rejected() -> None:
    with pytest.raises(ConfigError, match="algo"):
        parse_config(data={"algo": {"name": "a3c"}})


def test_overrides_parse_yaml_values() -> None:
    data = apply_overrides(data=minimal(), overrides=["train.total_env_steps=5000", "algo.lr=0.01",
                                                       "env.kwargs={max_episode_steps: 50}"])
    config = parse_config(data=data)
    assert config.train.total_env_steps == 5000
    assert config.algo.lr == 0.01
    assert config.env.kwargs == {"max_episode_steps": 50}


def test_a_partly_given_function_section_keeps_its_roles_defaults() -> None:
    """learner.function defaults to 600 s / 4096 MB / 0.25 GPU; setting only its cpus must not drop those
    to FunctionConfig's 120 s / 1024 MB / 0 (in YAML and through --set alike)."""
    from_yaml = parse_config(data=minimal() | {"learner": {"function": {"cpus": 2}}})
    from_set = parse_config(data=apply_overrides(data=minimal(), overrides=["learner.function.cpus=2",
                                                                             "functions.parameter.timeout_s=30"]))
    for config in (from_yaml, from_set):
        function = config.learner.function
        assert (function.cpus, function.timeout_s, function.memory_mb, function.gpus) == (2.0, 600.0, 4096, 0.25)
    assert (from_set.functions.parameter.timeout_s, from_set.functions.parameter.memory_mb) == (30.0, 2048)


def test_a_given_key_overrides_the_roles_default_and_unions_take_their_member_whole() -> None:
    config = parse_config(data=minimal() | {"learner": {"function": {"memory_mb": 512}},
                                            "actors": {"scaling": {"kind": "max", "max_actors": 3}}})
    assert (config.learner.function.memory_mb, config.learner.function.timeout_s) == (512, 600.0)
    assert config.actors.scaling.max_actors == 3   # fixed's num_actors = 2 default is not carried over


def test_override_of_unknown_key_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"train\.total_steps"):
        parse_config(data=apply_overrides(data=minimal(), overrides=["train.total_steps=5"]))


def test_yaml_error_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("algo: {name: ppo\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path=bad)


def test_config_is_frozen() -> None:
    """Every section, not only the top level: a component cannot change what another one reads."""
    config = parse_config(data=minimal())
    with pytest.raises(ValidationError, match="seed\n.*Instance is frozen"):
        config.seed = 3  # type: ignore[misc]
    with pytest.raises(ValidationError, match="max_rounds\n.*Instance is frozen"):
        config.train.max_rounds = 3  # type: ignore[misc]
    assert config.seed == parse_config(data=minimal()).seed and config.train == parse_config(data=minimal()).train


def test_resolved_config_round_trips(tmp_path: Path) -> None:
    config = parse_config(data=minimal())
    path = tmp_path / "config.yaml"
    path.write_text(dump_config(config=config))
    assert load_config(path=path) == config


def test_exact_resume_is_refused_for_the_offpolicy_workflow() -> None:
    data = load_config(path=REPO / "configs" / "dqn-cartpole.yaml").model_dump(mode="json")
    with pytest.raises(ConfigError, match="train.exact_resume: only the onpolicy workflow"):
        parse_config(data=apply_overrides(data=data, overrides=["train.exact_resume=true"]))


def test_exact_resume_is_refused_for_multiagent_runs_naming_what_resumes_them() -> None:
    with pytest.raises(ConfigError, match="drop it for marless, where actors.restore_slots saves"):
        load_config(path=REPO / "configs" / "marless-ippo-spread.yaml", overrides=["train.exact_resume=true"])


def test_checkpoint_replay_is_refused_for_on_policy_multiagent_runs() -> None:
    with pytest.raises(ConfigError, match="train.checkpoint_replay: ippo is on-policy and keeps no replay"):
        load_config(path=REPO / "configs" / "marless-ippo-spread.yaml", overrides=["train.checkpoint_replay=true"])
    load_config(path=REPO / "configs" / "marless-vdn-spread.yaml", overrides=["train.checkpoint_replay=true"])

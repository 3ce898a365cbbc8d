"""run/ray_slots.py: on Ray, an onpolicy run whose env snapshots exactly keeps an evicted actor's episodes
(``actors.restore_slots`` on), unless the config says otherwise."""

from __future__ import annotations

from pathlib import Path

from nimbus.config.loading import load_config
from nimbus.run.ray_slots import keep_slots_on_ray

PPO = Path(__file__).resolve().parents[3] / "configs" / "ppo-cartpole.yaml"


def test_on_ray_an_env_that_snapshots_keeps_its_slots() -> None:
    config = keep_slots_on_ray(config=load_config(path=PPO, overrides=["runtime.backend=ray"]))
    assert config.actors.restore_slots is True


def test_elsewhere_or_when_set_or_without_a_snapshot_nothing_changes() -> None:
    for overrides in (["runtime.backend=local"], ["runtime.backend=ray", "actors.restore_slots=false"],
                      ["runtime.backend=ray", "env.id=nimbus/RaisingCartPole-v0"]):
        config = load_config(path=PPO, overrides=overrides)
        assert keep_slots_on_ray(config=config) is config, overrides

"""What a run keeps warm at once (runtime/factory.py ``resident_resources``): what a private Ray instance is fit to."""

from __future__ import annotations

from pathlib import Path

from nimbus.config.loading import load_config
from nimbus.runtime.factory import resident_resources

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def test_sync_ppo_keeps_its_actors_and_one_learner_warm() -> None:
    config = load_config(path=CONFIGS / "ppo-cartpole.yaml", overrides=["actors.scaling.num_actors=3",
                                                                        "learner.function.cpus=1.5"])
    resident = resident_resources(config=config)
    assert (resident.cpus, resident.memory_mb) == (3 * 1.0 + 1.5, 3 * 1024 + 4096)


def test_stellaris_keeps_every_learner_and_the_parameter_function_warm() -> None:
    config = load_config(path=CONFIGS / "stellaris-cartpole.yaml", overrides=["stellaris.learners=3",
                                                                               "functions.gradient_learner.cpus=1.5"])
    actors = config.actors.scaling.num_actors * config.actors.function.cpus
    parameter = config.role_function(role="parameter").cpus
    assert resident_resources(config=config).cpus == actors + 3 * 1.5 + parameter

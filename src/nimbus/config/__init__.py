"""Run configuration: YAML → frozen, validated models; errors name the key path.

``loading`` reads YAML (``yaml_loader``: bounded, no alias bombs) and ``--set`` overrides, ``root`` is the
whole config (``NimbusConfig``), ``sections`` its generic sections, ``devices``, ``simulation`` and ``trackers``
more of them, ``rules`` the checks that span sections, ``algo`` the ``algo`` section's lookup by name,
``reference`` the generated docs/config.md. A technique's sections live in its folder (``nimbus.stellaris.config``,
``nimbus.offpolicy.config``...) and an algorithm's with the algorithm (``nimbus.algos.<name>.config``, imported by
name when a config names one): all are built on ``nimbus.schema``, a package below this one, so each imports alone.
Importing this package loads neither torch nor any algorithm.

Example::

    config = load_config(path=Path("configs/ppo-cartpole.yaml"), overrides=["train.total_env_steps=20000"])
    config.algo.lr, config.actors.scaling.kind
"""

from nimbus.config.loading import apply_overrides, dump_config, format_validation_error, load_config, parse_config
from nimbus.config.root import NimbusConfig
from nimbus.config.sections import (
    ActorsConfig,
    ChannelConfig,
    CostConfig,
    EnvConfig,
    FunctionConfig,
    LearnerConfig,
    OutputConfig,
    PipelineConfig,
    RuntimeConfig,
    StoreConfig,
    TrainConfig,
)

__all__ = ["NimbusConfig", "load_config", "parse_config", "dump_config", "apply_overrides",
           "format_validation_error", "EnvConfig", "FunctionConfig", "ActorsConfig", "LearnerConfig",
           "RuntimeConfig", "StoreConfig", "ChannelConfig", "PipelineConfig", "TrainConfig", "CostConfig",
           "OutputConfig"]

"""Run configuration: YAML → frozen, validated models; errors name the key path.

``loading`` reads YAML (``yaml_loader``: bounded, no alias bombs) and ``--set`` overrides, ``root`` is the
whole config (``NimbusConfig``), ``sections`` its generic sections, ``async_workflow``, ``devices``,
``marless`` and ``stellaris`` the techniques' sections, ``rules`` the checks that span sections, ``base``
the strict base of every config model, ``bounds`` the limits later parts put on counts, ``reference`` the
generated docs/config.md. The algorithms' sections live with their algorithms
(``nimbus.algos.<name>.config``) and are imported by name when a config names one (``algo``): importing
this package loads neither torch nor any algorithm.

Example::

    config = load_config(path=Path("configs/ppo-cartpole.yaml"), overrides=["train.total_env_steps=20000"])
    config.algo.lr, config.actors.scaling.kind
"""

from nimbus.config.loading import apply_overrides, dump_config, format_validation_error, load_config, parse_config
from nimbus.config.root import NimbusConfig
from nimbus.config.sections import (ActorsConfig, ChannelConfig, CostConfig, EnvConfig, FunctionConfig,
                                    LearnerConfig, OutputConfig, PipelineConfig, RuntimeConfig, StoreConfig,
                                    TrainConfig)

__all__ = ["NimbusConfig", "load_config", "parse_config", "dump_config", "apply_overrides",
           "format_validation_error", "EnvConfig", "FunctionConfig", "ActorsConfig", "LearnerConfig",
           "RuntimeConfig", "StoreConfig", "ChannelConfig", "PipelineConfig", "TrainConfig", "CostConfig",
           "OutputConfig"]

"""Multi-agent algorithms for the ``marless`` workflow (MARLess §4.2): configs, lookup, version-0 messages.

``MULTIAGENT_ALGO_CONFIGS`` maps each name to its config class; ``make_multiagent_algo`` builds the algorithm, which
names the roles (function kinds) a policy's round invokes, in order. ``initial_messages`` gives version 0
of a policy's networks as Store messages: ``weights`` (the policy network, models/weights.py format;
IQL/VDN's Q-network with ε and a ``grad_steps`` header) and, for actor-critic algorithms, ``critic`` (critic network
+ optimizer state, `critic_to_message`); these live in ``nimbus.algos.multiagent.messages``; the algorithms' lookup
in ``registry``. Both load on first use, so importing the configs (``nimbus.algos.multiagent.config``) loads neither
torch nor any data code.

Example::

    algo = make_multiagent_algo(config=MAPPOConfig())
    algo.roles                                  # ("postprocess", "critic", "policy")
    messages = initial_messages(algo=algo, spaces=spaces, state_dim=54, num_agents=3, seed=0)
    store.put(key="weights/p_agent_0/0", message=messages["weights"])
    store.put(key="critic/p_agent_0/0", message=messages["critic"])
"""

from nimbus.algos import lazy_exports

# loaded on first use, so that importing nimbus.algos.multiagent.config (what validating a config does) imports no torch
__getattr__ = lazy_exports(package=__name__, homes={
    "MULTIAGENT_ALGO_CONFIGS": "registry", "MultiAgentAlgorithm": "registry", "make_multiagent_algo": "registry",
    "multiagent_algo_from_dict": "registry", "initial_messages": "messages", "critic_to_message": "messages",
    "load_critic": "messages"})

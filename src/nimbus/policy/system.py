"""``System``: every connected part of one policy's run, what the on-policy, off-policy and Stellaris workflows
receive (built by policy/build.py ``build_policy``; a population builds one per member). Its probe is the request's
plain data (roles/probe.py), so the System names no technique.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nimbus.algos.base import Algorithm
from nimbus.config import NimbusConfig
from nimbus.core import ActorScaler
from nimbus.cost.ledger import Ledger
from nimbus.cost.pricing import PricingModel
from nimbus.data.buffer import Buffer
from nimbus.data.checkpoint import Checkpointer
from nimbus.data.replay import ReplayStrategy
from nimbus.data.shm import release_run_prefix
from nimbus.data.store import Store
from nimbus.data.triggers import StoreEvents
from nimbus.envs.spaces import EnvSpaces
from nimbus.report.metrics import MetricsSink
from nimbus.roles.probe import ProbeRequest
from nimbus.runtime.base import FunctionSpec, Runtime


@dataclass
class System:
    """Every connected part of one run. Workflows receive this and nothing global."""

    config: NimbusConfig
    run_dir: Path
    spaces: EnvSpaces
    algo: Algorithm
    runtime: Runtime
    ledger: Ledger
    pricing: PricingModel
    store: Store
    store_events: StoreEvents
    buffer: Buffer
    replay: ReplayStrategy
    scaler: ActorScaler
    actor_spec: FunctionSpec
    learner_spec: FunctionSpec
    checkpointer: Checkpointer
    metrics: MetricsSink
    probe: ProbeRequest | None = None   # the Hessian probe each learner request carries (Nitro), else None
    ship_batches: bool = False  # learner batches travel through the Store (ray: the buffer may be on another node)
    policy: str = "main"        # the policy this System trains: weights/<policy>/<v>, optim/<policy>/<v>
    rank_base: int = 0          # first actor rank of this policy (a population's members get disjoint ranks)
    owns_shared: bool = True    # False for a population member: the population closes runtime and store once
    shm_prefix: str | None = None  # with owns_shared: the run's own segment prefix, owned (locked) until close()

    def close(self) -> None:
        """Stop workers, flush logs, remove every shared-memory segment of the run."""
        self.metrics.close()
        if self.owns_shared:
            self.runtime.shutdown()
        self.buffer.close(unlink=True)
        if self.owns_shared:
            self.store.close()
            if self.shm_prefix is not None:
                release_run_prefix(prefix=self.shm_prefix)

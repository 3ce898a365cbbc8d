"""What the driver of `nimbus train configs/ppo-cartpole.yaml` (the README's first command) has imported when round 0
starts: the third-party packages are pinned, so the start-up path cannot grow silently; and that its fork server is a
fork of the driver, which imports torch once (runtime/spare_server.py ``start_early(fork_driver=True)``). Checked in
a fresh interpreter (a test process has imported everything already) running the command line's ``main``, with the
local backend's forked workers as shipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Third-party top-level packages the driver needs before round 0: the config (pydantic, yaml), the first weights
# (torch, numpy), the env's spaces (gymnasium), the wire (lz4), the progress line (rich), the shipped tensorboard
# logger (tensorboard and what it imports), and what these import themselves.
EXPECTED = {"absl", "annotated_types", "cython_runtime", "farama_notifications", "fsspec",
            "google", "gymnasium", "lz4", "numpy", "pydantic", "pydantic_core", "rich", "tensorboard",
            "threadpoolctl", "torch", "torchgen", "tqdm", "typing_extensions", "typing_inspection", "yaml"}
# never on the start-up path: each is for a part a CartPole PPO run does not use before round 0 (or at all)
HEAVY = {"scipy", "matplotlib", "sklearn", "PIL", "envpool", "ray", "redis", "optuna", "wandb", "mlflow", "pandas",
         "mujoco", "ale_py", "cv2", "onnx", "pettingzoo"}

_SPY = r"""
import json, sys, tempfile
import nimbus.cli as cli
from nimbus.runtime.forkserver import ForkServer

seen = {"templates": []}
start_server = ForkServer._start

def start_spy(self, **kwargs):
    start_server(self, **kwargs)
    seen["templates"].append(type(self._proc).__name__)

def spy_on_round_0():   # imported only once the server started, as the command line does (nothing earlier may
    from nimbus.onpolicy.workflow import OnPolicyWorkflow   # change what the server was started with)
    invoke_actors = OnPolicyWorkflow._invoke_actors

    def spy(self):
        seen.setdefault("packages", sorted({name.split(".")[0] for name in sys.modules}))
        return invoke_actors(self)

    OnPolicyWorkflow._invoke_actors = spy

start_early = cli._start_fork_server_early

def start_early_spy(**kwargs):
    start_early(**kwargs)
    spy_on_round_0()

ForkServer._start = start_spy
cli._start_fork_server_early = start_early_spy
with tempfile.TemporaryDirectory() as tmp:
    overrides = ["train.max_rounds=1", "train.eval_episodes=0", "output.report=false", "output.status_line=false"]
    code = cli.main(["train", "configs/ppo-cartpole.yaml", "--run-dir", f"{tmp}/run",
                     *[arg for override in overrides for arg in ("--set", override)]])
print("SEEN " + json.dumps(seen))
sys.exit(code)
"""


def test_the_driver_imports_only_the_pinned_packages_before_round_0() -> None:
    done = subprocess.run([sys.executable, "-c", _SPY], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("SEEN "))
    seen = json.loads(line.removeprefix("SEEN "))
    # one server, the driver's fork, adopted by the run (a second: the run did not take it, as when an import after
    # its start changed the environment, and started a fresh interpreter importing torch again)
    assert seen["templates"] == ["TemplateProcess"], seen["templates"]
    imported = set(seen["packages"])
    third_party = {name for name in imported - set(sys.stdlib_module_names) - {"nimbus"} if not name.startswith("_")}
    assert not third_party & HEAVY, f"heavy packages on the start-up path: {sorted(third_party & HEAVY)}"
    assert third_party == EXPECTED, (
        f"the driver now imports {sorted(third_party - EXPECTED)} (and no longer {sorted(EXPECTED - third_party)}) "
        "before round 0: import a package where it is used, or pin it here with the reason")

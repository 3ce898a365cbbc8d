"""What the fork server's template warm-up buys: a learner's cold start and first invocation, per template mode.

The template (runtime/fork_template.py ``prepare_template``) imports numpy/torch/gymnasium and then does torch's
lazy first-``step()`` imports (torch._dynamo, sympy: seconds) so that no forked worker pays them. Modes:

* ``fork_safe`` (today): an SGD step on a scalar whose gradient is assigned: no autograd, no CUDA;
* ``none``: the template does not warm; each forked worker pays the imports in its own init (before ready);
* ``backward`` (before #25): the same step after a real ``backward()`` in the template, which on a CUDA
  machine breaks every forked child's backward.

For each mode, a fresh driver (subprocess) starts a LocalRuntime with the fork server, prewarms one worker
of a small learner function (MLP forward, backward, Adam step), then a second one forked from the ready
template, and invokes it twice: the second worker's ``init_s`` (spawn -> ready: a cold start), the first and
the second invocation's wall time as the driver sees it (the first worker's init, which includes the
template's own start, is reported apart). A ``sitecustomize``
on the children's path swaps the template's warm-up (only in the template process) for the mode's.

Run:  python benchmarks/template_warmup.py --repeats 5        (prints JSON; --out FILE writes it)
Smoke: python benchmarks/template_warmup.py --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = ("fork_safe", "none", "backward")
_SITECUSTOMIZE = '''
import os, sys
_mode, _pid = os.environ.get("NIMBUS_BENCH_WARM"), os.getpid()
if _mode in ("none", "backward"):
    import nimbus.runtime.worker as _worker
    _real = _worker.warm_torch_optimizer

    def _warm():
        if os.getpid() != _pid or "forkserver" not in " ".join(sys.argv):
            return _real()   # a forked worker (or another process): unchanged
        if _mode == "backward":
            torch = sys.modules["torch"]
            weight = torch.zeros(1, requires_grad=True)
            weight.sum().backward()
            torch.optim.SGD([weight], lr=0.0).step()
    _worker.warm_torch_optimizer = _warm
'''
_LEARNER = '''
import time
import torch
from nimbus.data.codec import Message

def step(*, context, request):
    started = time.perf_counter()
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss = model(torch.zeros(32, 8)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return Message(header={"inside_s": time.perf_counter() - started})
'''


def measure_once() -> dict:
    """In a fresh driver: one worker's init and its first two invocations."""
    from nimbus.cost.ledger import Ledger
    from nimbus.data.codec import Message
    from nimbus.runtime.base import FunctionSpec
    from nimbus.runtime.forkserver import TRAINING_PRELOAD
    from nimbus.runtime.local import LocalRuntime

    spec = FunctionSpec(name="learner", entrypoint="nimbus_bench_learner:step", timeout_s=120.0)
    ledger = Ledger()
    runtime = LocalRuntime(ledger=ledger, capacity_cpus=1, start_method="fork_server", preload=TRAINING_PRELOAD)
    try:
        runtime.prewarm(spec=spec, count=1, wait_s=180.0)   # its init includes the template's own start
        runtime.prewarm(spec=spec, count=1, wait_s=180.0)   # forked from the ready template: a worker's cold start
        inits = [r.init_s for r in ledger.records() if r.outcome == "prewarm"]
        result = {"template_and_first_init_s": inits[0], "init_s": inits[1]}
        for key in ("first_invocation_s", "second_invocation_s"):
            started = time.perf_counter()
            runtime.invoke(spec=spec, request=Message()).result(timeout=120)
            result[key] = time.perf_counter() - started
        return result
    finally:
        runtime.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure_once()))
        return 0
    results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="nimbus_warmup_") as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        (Path(tmp) / "nimbus_bench_learner.py").write_text(_LEARNER)
        path = os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")]))
        for _ in range(args.repeats):
            for mode in MODES:
                env = dict(os.environ, PYTHONPATH=path, NIMBUS_BENCH_WARM=mode)
                out = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True,
                                     timeout=600, check=True)
                results[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    summary = {mode: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
               for mode, runs in results.items()}
    report = {"repeats": args.repeats, "median": summary, "runs": results}
    text = json.dumps(report, indent=1)
    if args.out is not None:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""#25: the fork server's template warms torch without running autograd or touching CUDA. A backward in the
template starts autograd's device threads on a CUDA machine, and every forked worker's own backward then fails
("Unable to handle autograd's threading in combination with fork-based multiprocessing"); a CUDA call (even
``is_available``, which counts devices) leaves forked children unable to initialise CUDA. Proved on CPU by
counting every entry into autograd and CUDA while the template's real preparation runs."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = r"""
import json, sys
import torch
from torch.autograd.variable import Variable

calls = {}

def counted(name, fn):
    def wrapper(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return fn(*args, **kwargs)
    return wrapper

class Engine:   # every backward and grad ends in Variable._execution_engine.run_backward
    def __init__(self, real):
        self._real = real
    def run_backward(self, *args, **kwargs):
        calls["engine.run_backward"] = calls.get("engine.run_backward", 0) + 1
        return self._real.run_backward(*args, **kwargs)
    def __getattr__(self, name):
        return getattr(self._real, name)

Variable._execution_engine = Engine(Variable._execution_engine)
torch.autograd.backward = counted("autograd.backward", torch.autograd.backward)
torch.autograd.grad = counted("autograd.grad", torch.autograd.grad)
torch.Tensor.backward = counted("Tensor.backward", torch.Tensor.backward)
for name in ("is_available", "device_count", "init", "_lazy_init", "current_device", "set_device", "synchronize"):
    setattr(torch.cuda, name, counted("cuda." + name, getattr(torch.cuda, name)))
if hasattr(torch._C, "_cuda_getDeviceCount"):
    torch._C._cuda_getDeviceCount = counted("cuda._cuda_getDeviceCount", torch._C._cuda_getDeviceCount)

from nimbus.runtime.fork_template import prepare_template
from nimbus.runtime.forkserver import TRAINING_PRELOAD
prepare_template(preload=TRAINING_PRELOAD)
template = dict(calls)
warmed = "torch._dynamo" in sys.modules   # the lazy first-step imports happened (the point of warming)
cuda_initialized = torch.cuda.is_initialized()
torch.zeros(1, requires_grad=True).sum().backward()   # the instruments work: a backward is seen
print(json.dumps({"template": template, "warmed": warmed, "cuda_initialized": cuda_initialized,
                  "after_backward": calls}))
"""


def test_the_templates_warm_up_runs_no_autograd_and_touches_no_cuda() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    seen = report["after_backward"].get("engine.run_backward", 0) - report["template"].get("engine.run_backward", 0)
    assert seen == 1, report   # the counters see a backward
    assert report["template"] == {}, report
    assert report["cuda_initialized"] is False
    assert report["warmed"], "the template no longer does torch's lazy first-step imports"

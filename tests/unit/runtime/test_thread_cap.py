"""``cpus`` caps a function's threads (issue 25.9): billing counts ``cpus``, so a function must not run more torch or
BLAS threads than that, forked or spawned, even when it asks torch for more (a learner's ``torch_threads``)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.runtime.base import FunctionSpec, Resources
from nimbus.runtime.forkserver import TRAINING_PRELOAD
from nimbus.runtime.local import LocalRuntime

PROBE = '''
import numpy as np
import threadpoolctl
import torch

from nimbus.data.codec import Message


def report(*, context, request):
    torch.set_num_threads(int(request.header["ask"]))   # as a learner with learner.torch_threads does
    np.dot(np.ones((64, 64)), np.ones((64, 64)))
    pools = {info["internal_api"]: info["num_threads"] for info in threadpoolctl.threadpool_info()}
    return Message(header={"torch": torch.get_num_threads(), "pools": pools})
'''


@pytest.mark.parametrize("start_method", ["fork_server", "spawn"])
def test_a_function_with_one_cpu_runs_one_torch_thread_and_one_blas_thread(
        start_method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "threads_probe_ut.py").write_text(textwrap.dedent(PROBE))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    runtime = LocalRuntime(ledger=Ledger(), capacity_cpus=4, start_method=start_method, preload=TRAINING_PRELOAD)
    try:
        for cpus, expected in ((1.0, 1), (2.0, 2)):
            spec = FunctionSpec(name=f"probe-{cpus}", entrypoint="threads_probe_ut:report", timeout_s=120,
                                resources=Resources(cpus=cpus))
            header = runtime.invoke(spec=spec, request=Message(header={"ask": 4})).result().header
            assert header["torch"] == expected, header
            assert header["pools"].get("openblas", expected) == expected, header   # numpy's BLAS
            assert header["pools"].get("openmp", expected) == expected, header     # torch's OpenMP
            assert header["pools"], "no BLAS/OpenMP pool seen: the probe measures nothing"
    finally:
        runtime.shutdown()

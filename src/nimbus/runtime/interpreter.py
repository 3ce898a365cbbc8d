"""How the runtime starts a Python child (worker, fork server, janitor): without the current directory on its path,
and (``worker_env``) with what environment.

``python -m module`` puts the current directory first on ``sys.path``: a ``secrets.py`` (or any name a child
imports, stdlib names included) planted where the user happens to run ``nimbus train`` would run as code in
every child (P11). ``module_command`` runs the module with nothing of the current directory on the path:
``-P`` (``sys.flags.safe_path``) on Python 3.11+, and on 3.10, which has no ``-P``, a ``-c`` bootstrap that
removes the ``''`` entry ``-c`` puts first on the path before anything is imported, then runs the module as
``-m`` would (``runpy``). ``-I`` is not used: it would also drop ``PYTHONPATH``, which users and checkouts rely on.

Example::

    subprocess.Popen([*module_command(module="nimbus.runtime.janitor"), "--fd", "3"], pass_fds=(3,))
"""

from __future__ import annotations

import os
import sys

from nimbus.data.shm import PREFIX_ENV, streaming_copy_env
from nimbus.runtime.base import FunctionSpec

_BOOTSTRAP = ("import sys; del sys.path[0]; import runpy; "
              "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")


def module_command(*, module: str) -> list[str]:
    """argv that runs ``module`` as ``python -m`` does, but never imports from the current directory."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module]
    return bootstrap_command(module=module)


def bootstrap_command(*, module: str) -> list[str]:
    """The Python 3.10 form (no ``-P``): ``-c`` puts ``''`` (the current directory) first; it goes before any import."""
    return [sys.executable, "-c", _BOOTSTRAP.format(module=module)]


def worker_env(*, spec: FunctionSpec, prefix: str) -> dict[str, str]:
    """The driver's environment plus the run's segment prefix, thread limits from ``spec`` and streaming
    copies of large bodies (``shm.streaming_copy_env``)."""
    env = streaming_copy_env(dict(os.environ))
    threads = str(max(1, int(spec.resources.cpus)))
    env.update({PREFIX_ENV: prefix, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads})
    return env

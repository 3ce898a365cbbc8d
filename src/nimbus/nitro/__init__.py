"""Nitro (paper 002): the Hessian probe, the actor scalers and their configs (docs/nitro.md).

``nimbus.config`` is imported first: its sections import ``nitro/config.py``, which imports ``nimbus.config``'s
base modules. Entering that circle from ``nitro/config.py`` (``import nimbus.nitro.config`` in a fresh process)
left ``nitro/config.py`` half-initialised when ``config/sections.py`` asked it for ``ScalingConfig``; entering it
from ``nimbus.config`` completes (tests/unit/nitro/test_fresh_import.py).
"""

import nimbus.config  # noqa: F401  (import order, above)

"""nimbus: distributed deep reinforcement learning on elastic, serverless-style resources.

Read docs/architecture.md first; it lists the five files to read before the rest.
"""

__version__ = "0.1.0"

"""What every config section is built from: ``base`` (``ConfigSection``, the strict base model), ``fields`` (field
rules several sections share) and ``bounds`` (the limits later parts put on counts).

A package of its own, below ``nimbus.config``: the sections that live beside their technique or algorithm
(``nimbus.stellaris.config``, ``nimbus.algos.ppo.config``...) import these, and ``nimbus.config`` imports those
sections to assemble the whole config. Were they modules of ``nimbus.config``, importing a technique's section first
would run ``nimbus/config/__init__.py``, which imports that same half-initialised section back.
"""

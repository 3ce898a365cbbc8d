"""nimbus.workflows: driver-side trigger → action bindings (sync, async, pipelined)."""

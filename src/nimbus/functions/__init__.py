"""nimbus.functions: what runs in workers (actor, learner, probe, ...), never importing the driver side."""

"""One policy's plumbing, shared by every workflow over one System (on-policy, off-policy, Stellaris; a population
builds one per member): its parts (system.py, built by build.py), its lifecycle (lifecycle.py: build, publish, start,
checkpoint, evaluate, close), its actor scaler (scaling.py) and the replay file beside its checkpoints
(replay_checkpoint.py).

A layer of its own below the technique folders, so that no technique is another's hidden base: it imports no
technique, and names what it needs from one (the scalers, the default functions) as ``module:name``.
"""

"""One policy's plumbing, shared by every workflow over one System (on-policy, off-policy, Stellaris; a population
builds one per member): so far the actor scaler it runs (scaling.py).

A layer of its own below the technique folders, so that no technique is another's hidden base: it imports no
technique, and names what it needs from one (the scalers) as ``module:name``.
"""

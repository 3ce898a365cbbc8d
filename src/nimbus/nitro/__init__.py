"""Nitro (paper 002): the Hessian probe, the actor scalers and their configs (docs/nitro.md)."""

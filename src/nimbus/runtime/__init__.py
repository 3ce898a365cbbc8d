"""Compute plane: run functions on warm workers; every backend implements ``core.Runtime``."""

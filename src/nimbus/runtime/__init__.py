"""Compute plane: run functions on warm workers (DESIGN.md §2 Runtime)."""

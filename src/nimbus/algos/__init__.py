"""Algorithms: pure math over torch (DESIGN.md §2 Algorithm). One subpackage per algorithm."""

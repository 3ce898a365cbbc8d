"""Benchmarks behind ``nimbus bench``: data-plane transfer (XingTian's dummy algorithm) and sampling."""

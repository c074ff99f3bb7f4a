"""Developers' benchmarks, one module per benchmark."""

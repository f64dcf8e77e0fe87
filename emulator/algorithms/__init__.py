"""Algorithms: the math of one FL method each, no SimPy, no clocks (docs/architecture.md section 3)."""

"""Algorithms: the math of one FL method each, no SimPy, no clocks (DESIGN.md section 3)."""

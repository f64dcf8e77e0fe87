"""Analysis: run directories -> pandas frames -> metrics, figures and reports.

Reads run directories only (the stable interface); never imported by the engine.
"""
from .load import load_run  # noqa: F401  (the public entry point)

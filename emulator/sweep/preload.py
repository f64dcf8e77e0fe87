"""Imported once by the local sweep backend's fork server, so that every run process forked
from it starts with torch, flemu and the scenario schema already loaded."""
from ..runs import runner
from ..scenario import schema as scenario  # noqa: F401
from . import worker  # noqa: F401

scenario.schema()
try:                                  # the `digits` data set's loader
    import sklearn.datasets  # noqa: F401
except ImportError:                   # pragma: no cover
    pass

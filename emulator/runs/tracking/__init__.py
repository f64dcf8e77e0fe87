"""Built-in tracking callbacks (the optional extra `pip install 'flemu[tracking]'`):
`mlflow` (mlflow_tracker.py) and `tensorboard` (tensorboard_tracker.py). Each imports its
library only when a run uses it, and says how to install it when it is missing."""
from __future__ import annotations

from ...errors import FlemuError


def need(module: str, what: str):
    """Import `module`, or fail with the install line of the tracking extra."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        raise FlemuError(f"the {what} callback needs {what}: pip install 'flemu[tracking]'") from None

"""Where sweep runs execute: `local` (one process per run, local_pool.py) or `ray` (one task per
run, ray_pool.py).

Both answer the same four calls: `submit(plan)`, `poll(timeout) -> [outcome]`, `running()`
and `close()`; an outcome is {"id", "ok", and for a failure "error", "type", "detail",
"exit_code"}.
"""
from __future__ import annotations

import os
from pathlib import Path

from .local_pool import LocalPool
from .ray_pool import RayPool


def make_backend(name: str, root: Path, workers=None, address=None, resources=None, plugins=()):
    """`plugins`: the runs' plugins (Ray ships the folders of module plugins to its workers)."""
    if name == "local":
        return LocalPool(root, workers or (os.cpu_count() or 1))
    if name == "ray":
        return RayPool(root, workers, address, resources or {}, plugins)
    raise ValueError(f"unknown backend {name!r}")

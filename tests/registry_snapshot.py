"""A fixture body for tests that load plugins or register components: afterwards the
registry and the loaded-plugin table are as before (the tests of one xdist worker share them,
and e.g. README's generated reference lists whatever is registered)."""
from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def registry_snapshot():
    from emulator import plugins
    from emulator import registry
    registry.load_all()
    tables = {k: dict(v) for k, v in registry._TABLES.items()}
    loaded = dict(plugins._LOADED)
    try:
        yield
    finally:
        for k, v in tables.items():
            registry._TABLES[k].clear()
            registry._TABLES[k].update(v)
        plugins._LOADED.clear()
        plugins._LOADED.update(loaded)
        registry._generation += 1

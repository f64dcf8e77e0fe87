"""Naming a component in a contract violation: its kind, registered name, class and file
(the plugin that defined it, or flemu's module for a built-in)."""
from __future__ import annotations

import inspect
from functools import lru_cache

from .. import registry


@lru_cache(maxsize=None)
def _where(cls: type) -> str:
    try:
        return inspect.getfile(cls)
    except (TypeError, OSError):
        return f"module {cls.__module__}"


@lru_cache(maxsize=None)
def _registered(kind: str, cls: type):
    """The name `cls` is registered under in `kind` ("compute model": the kind `compute`), if
    it was registered as a class."""
    kind = kind.split()[0]
    if kind not in registry.KINDS:
        return None
    for name, e in registry.table(kind).items():
        if e.factory is cls:
            return name
    return None


def describe_class(kind: str, cls: type, name=None) -> str:
    """`algorithm 'fedadam' (class FedAdam in /home/me/fedadam.py)`."""
    name = name or _registered(kind, cls)
    named = f" {name!r}" if name else ""
    return f"{kind}{named} (class {cls.__qualname__} in {_where(cls)})"


def describe(kind: str, obj, name=None) -> str:
    """`describe_class` of an object's class."""
    return describe_class(kind, type(obj), name)


def describe_function(kind: str, fn, label: str) -> str:
    """`local rule 'train_fn:my_loop' (function my_loop in /home/me/loop.py)`."""
    try:
        where = inspect.getsourcefile(fn) or inspect.getfile(fn)
    except (TypeError, OSError):
        where = f"module {getattr(fn, '__module__', '?')}"
    what = getattr(fn, "__qualname__", type(fn).__qualname__)
    return f"{kind} {label!r} (function {what} in {where})"

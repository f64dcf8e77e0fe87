"""Name -> factory tables: one per kind of component.

A component is registered with its name, a pydantic model of its parameters (whose field
descriptions `flemu list` and the README reuse), a one-line description and a factory.
The scenario schema is built from these tables, so a registered name is valid in a
scenario, listed by `flemu list`, and suggested in "unknown name" errors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Type

from pydantic import BaseModel, ConfigDict


class Params(BaseModel):
    """Base class of every component's parameter model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=False)


@dataclass
class Entry:
    kind: str
    name: str
    params: Type[BaseModel]
    factory: Optional[Callable[..., Any]]
    description: str


KINDS = {
    "dataset": "datasets (workload.dataset.name)",
    "partition": "partitions (workload.partition.name)",
    "model": "models (workload.model.name)",
    "algorithm": "algorithms (algorithm.name)",
    "protocol": "protocols (protocol.name)",
    "compute": "compute models (clients.groups[].compute.model)",
    "availability": "availability models (clients.groups[].availability.model)",
    "network": "network link models (clients.groups[].network.model)",
    "selection": "server-side selection (protocol.select.model)",
    "executor": "executors (executor.name)",
}

_TABLES: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}


def register(kind: str, name: str, params: Type[BaseModel], description: str,
             factory: Optional[Callable[..., Any]] = None):
    """Register a component. Usable as a decorator on the factory."""
    if kind not in _TABLES:
        raise KeyError(f"unknown registry kind {kind!r}")

    def deco(f):
        _TABLES[kind][name] = Entry(kind, name, params, f, description)
        return f

    if factory is not None:
        return deco(factory)
    return deco


def table(kind: str) -> dict[str, Entry]:
    load_all()
    return _TABLES[kind]


def get(kind: str, name: str) -> Entry:
    return table(kind)[name]


_loaded = False


def load_all() -> None:
    """Import every module that registers components (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from . import components  # noqa: F401  (imports register everything)

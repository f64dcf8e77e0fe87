"""Name -> factory tables: one per kind of component.

A component is registered with its name, a pydantic model of its parameters (whose field
descriptions `flemu list` and the README reuse), a one-line description and a factory.
The scenario schema is built from these tables, so a registered name is valid in a
scenario, listed by `flemu list`, and suggested in "unknown name" errors.

Every registration bumps `generation()`: whatever is built from the tables (the scenario
schema) is keyed by it, so a component registered late (a plugin imported after a schema
was built) is seen at the next validation. Where a component came from (`Entry.origin`:
"built-in", or the plugin that registered it) is recorded for `flemu list`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Type, TypeVar

from pydantic import BaseModel, ConfigDict


@dataclass(frozen=True)
class FleetSize:
    """What a block's fleet checks see of the scenario: `clients` (clients.count) and
    `models` (the number of workloads: 1 unless multi-model)."""
    clients: int
    models: int = 1


class Params(BaseModel):
    """Base class of every component's parameter model: unknown keys are errors.

    A model declares the checks that need the fleet's size (a `k` above clients.count, a
    client id outside the fleet) by overriding `fleet_problems`."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    def fleet_problems(self, at: str, fleet: FleetSize) -> list[tuple[str, str]]:
        """Problems of these parameters in a fleet of `fleet.clients` clients training
        `fleet.models` models, each (YAML path, message); `at` is this block's YAML path
        (`protocol.select`). This base finds none of its own and asks the blocks nested in
        its fields (a protocol's `select`, `wait`), so an override returns
        `super().fleet_problems(at, fleet) + [...]`. Called on the whole scenario once it
        validates; any problem is a ScenarioError (exit 2, nothing written)."""
        out: list[tuple[str, str]] = []
        for name, value in self:                            # the fields, in declaration order
            path = f"{at}.{name}" if at else name
            items = enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]
            for i, item in items:
                if isinstance(item, Params):
                    out += item.fleet_problems(path if i is None else f"{path}[{i}]", fleet)
        return out


@dataclass
class Entry:
    kind: str
    name: str
    params: Type[BaseModel]
    factory: Optional[Callable[..., Any]]
    description: str
    origin: str = "built-in"


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
    "callback": "run callbacks (callbacks[].name)",
}

_TABLES: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
_generation = 0
_origin = "built-in"          # set by plugins.py while a plugin is being imported

F = TypeVar("F")


def _first_line(obj) -> str:
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0].strip() if doc else ""


def register(kind: str, name: str, params: Optional[Type[BaseModel]] = None, description: Optional[str] = None,
             factory: Optional[Callable[..., Any]] = None) -> Any:
    """Register a component of `kind` under `name`.

    `params` is its pydantic parameter model (default: no parameters), `description` one
    line for `flemu list` (default: the first line of the factory's docstring). Given a
    `factory`, it is registered and returned; without one, `register` is a decorator for a
    class (an `Algorithm` subclass, a device model) or a function (a dataset or model
    factory), which it returns unchanged."""
    if kind not in _TABLES:
        raise KeyError(f"unknown registry kind {kind!r}; one of: {', '.join(KINDS)}")

    def deco(f: F) -> F:
        global _generation
        _TABLES[kind][name] = Entry(kind, name, params if params is not None else Params, f,
                                    description if description is not None else _first_line(f), _origin)
        _generation += 1
        return f

    if factory is not None:
        return deco(factory)
    return deco


def generation() -> int:
    """A counter bumped by every registration (caches built from the tables key on it)."""
    load_all()
    return _generation


def table(kind: str) -> dict[str, Entry]:
    load_all()
    return _TABLES[kind]


def get(kind: str, name: str) -> Entry:
    return table(kind)[name]


_loaded = False


def load_all() -> None:
    """Import every module that registers components, then the installed plugins (the
    `flemu.plugins` entry-point group), once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from . import components  # noqa: F401  (imports register everything)
    from .plugins import load_entry_points
    load_entry_points()

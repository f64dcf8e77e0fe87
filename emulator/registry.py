"""Name -> factory tables: one per kind of component.

A component is registered with its name, a pydantic model of its parameters (whose field
descriptions `flemu list` and the README reuse), a one-line description and a factory.
The scenario schema is built from these tables, so a registered name is valid in a
scenario, listed by `flemu list`, and suggested in "unknown name" errors.

Every registration bumps `generation()`: whatever is built from the tables (the scenario
schema) is keyed by it, so a component registered late (a plugin imported after a schema
was built) is seen at the next validation. Where a component came from (`Entry.origin`:
"built-in", or the plugin that registered it) is recorded for `flemu list`.

Extension points are abstract base classes (docs/write-your-own.md, "What each base
requires"). The module of each base declares it here (`extension_point`); a class registered
under that kind must extend it and be complete: a class that still has abstract methods is
refused at once (`RegistrationError`, naming the component, its file and every missing
method), never at its first use in a run. A function factory (the built-in device models,
`register_step_time`) cannot be checked before it is called: the class it builds is checked by
Python when the run builds it (an abstract class cannot be instantiated).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Optional, Type, TypeVar

from pydantic import BaseModel, ConfigDict

from .errors import FlemuError


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
    "codec": "message codecs (network.codec.up / network.codec.down)",
}

_TABLES: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
#: kind -> (the abstract base its classes extend, whether a function may stand for a class)
_BASES: dict[str, tuple[type, bool]] = {}
_generation = 0
_origin = "built-in"          # set by plugins.py while a plugin is being imported

F = TypeVar("F")


def _first_line(obj) -> str:
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0].strip() if doc else ""


class RegistrationError(FlemuError, TypeError):
    """A component cannot be registered: its class does not extend its kind's base, or is
    still abstract (names the component, its file and each missing method)."""


def extension_point(kind: str, base: type, functions: bool = True) -> None:
    """Declare `base` the abstract base class of `kind` (called by the base's own module).
    `functions`: whether a function building the component may be registered instead of a
    class (False where the registry reads the class's declared attributes: algorithms,
    protocols)."""
    _BASES[kind] = (base, functions)


def _where(f) -> str:
    """The file that defines class f (the plugin being imported, or its module, without one)."""
    try:
        return inspect.getfile(f)
    except (TypeError, OSError):
        return _origin if _origin != "built-in" else f"module {f.__module__}"


def check_component(kind: str, name: str, f: Any) -> None:
    """Refuse a factory that cannot be the component of `kind` it is registered as: a class
    that does not extend the kind's base, a class with abstract methods left, or a function
    where the kind needs a class. Raises RegistrationError."""
    base, functions = _BASES.get(kind, (None, True))
    what = f"{kind} {name!r}"
    if not inspect.isclass(f):
        if not functions and base is not None:
            raise RegistrationError(f"{what}: register a subclass of {base.__name__}, not {f!r} "
                                    f"(its class attributes declare what it can do)")
        return
    where = f"class {f.__qualname__} in {_where(f)}"
    if base is not None and not issubclass(f, base):
        raise RegistrationError(f"{what} ({where}) does not extend {base.__name__}: "
                                f"subclass emulator.api.{base.__name__}")
    if inspect.isabstract(f):
        missing = ", ".join(_declared_as(f, m) for m in sorted(f.__abstractmethods__))
        raise RegistrationError(f"{what} ({where}) is abstract: it does not define {missing} "
                                "(docs/write-your-own.md lists what each base requires)")


def _declared_as(cls: type, method: str) -> str:
    """`Base.method` for an abstract method of `cls` (where it is required)."""
    obj = inspect.getattr_static(cls, method)
    if isinstance(obj, property):
        obj = obj.fget
    return getattr(obj, "__qualname__", method)


def register(kind: str, name: str, params: Optional[Type[BaseModel]] = None, description: Optional[str] = None,
             factory: Optional[Callable[..., Any]] = None) -> Any:
    """Register a component of `kind` under `name`.

    `params` is its pydantic parameter model (default: no parameters), `description` one
    line for `flemu list` (default: the first line of the factory's docstring). Given a
    `factory`, it is registered and returned; without one, `register` is a decorator for a
    class (an `Algorithm` subclass, a device model) or a function (a dataset or model
    factory), which it returns unchanged. A class is checked at once (`check_component`):
    one that does not extend its kind's base or leaves an abstract method undefined raises
    RegistrationError and is not registered."""
    if kind not in _TABLES:
        raise KeyError(f"unknown registry kind {kind!r}; one of: {', '.join(KINDS)}")

    def deco(f: F) -> F:
        global _generation
        check_component(kind, name, f)
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

"""A scenario file, from YAML text to a validated model: one pipeline.

    yaml_input.py         the safe YAML reader (duplicate keys, depth, aliases, UTF-8)
    overrides.py          `--set path=value` (a `[*]` expands to every item of a list)
    names.py              run and sweep names (plain names, never paths)
    tags.py               tagged unions: which key (`name` / `model`) picks a component
    quantities.py         finite numbers and bounds shared by the parameter models
    fleet.py              the device models' parameter models (compute, network, selection) and factories
    availability_params.py  the availability models' parameter models
    schema.py             the whole scenario's schema, `load` and `to_yaml`
    checks.py             checks across blocks once each validates (`Params.fleet_problems`)
    validation_errors.py  pydantic's errors -> one message per problem, with its YAML path

The registry of components (emulator/registry.py) sits below this package: every component
registers there, and the schema is built from it. `load`, `to_yaml`, `ScenarioError` are the entry points (emulator.load is the user's).
"""
from ..errors import ScenarioError  # noqa: F401
from .schema import load, to_yaml  # noqa: F401

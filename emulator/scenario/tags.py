"""Tags of the registry unions in a scenario: which key selects a component in each kind of
block (`model` for device models, `name` otherwise), its default, and the member model of every
registered component by its tag "kind:name" (filled when the scenario schema is built; read
by the schema, by the error messages and by the docs)."""
from __future__ import annotations

from typing import ClassVar

# Which key selects the component in each kind of block, and its default when absent.
TAG_KEY = {"compute": "model", "availability": "model", "network": "model", "selection": "model"}
TAG_DEFAULT = {"network": "link", "executor": "sequential"}
TAGGED: dict[str, type] = {}   # "kind:name" -> member model class


def tag_key(kind: str) -> str:
    return TAG_KEY.get(kind, "name")


class UnionMember:
    """Base of every member model of a registry union (beside the component's params):
    `union_name` is the component's registered name, what the union's discriminator reads off
    an instance (a block given as a built model rather than a mapping)."""
    union_name: ClassVar[str]

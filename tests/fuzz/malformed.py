"""A valid scenario with exactly one field broken, and the YAML path the error must name.

The drawn scenario is walked alongside the schema (`emulator.scenario.schema()`: tagged unions
resolved by their `name` / `model` / `mode`), so every mapping knows its pydantic model and
every leaf its field. One of five breaks is applied:

- `wrong_type`   a number, flag, name or mapping replaced by a value of another type that no
                 lax conversion accepts ("not-a-number", "maybe", a list, 17);
- `out_of_range` a bounded number just outside its bound (gt / ge / lt / le, from the field's
                 constraints), an empty list where one item is the least, or a count larger
                 than the fleet (`select.k`, `wait.k`, a `sequence` id);
- `unknown_name` a component's `name` / `model`, a wait `mode` or a literal option replaced by
                 a name nobody registered;
- `missing_key`  a required key removed;
- `unknown_key`  a key no model has added to a mapping.
"""
from __future__ import annotations

import copy
import typing
from dataclasses import dataclass
from typing import Literal

import annotated_types as at
from hypothesis import assume, strategies as st
from pydantic import BaseModel

from .scenarios import Drawn

BREAKS = ("wrong_type", "out_of_range", "unknown_name", "missing_key", "unknown_key")
TAGS = ("name", "model", "mode")


@dataclass
class Broken:
    drawn: Drawn          # the scenario with the break applied
    path: str             # the YAML path the one error message must name
    how: str              # which break
    detail: str = ""

    def __repr__(self):
        return f"{self.how} at {self.path} ({self.detail}){self.drawn!r}"


@dataclass
class Node:
    keys: list            # path of the value (str keys and int indexes)
    model: type           # the pydantic model of the mapping that holds it (or of itself, for mappings)
    field: str            # its field name in that model ("" for a mapping node itself)
    value: object


def fmt(keys) -> str:
    from emulator.scenario.schema import format_path
    return format_path(keys)


def _models_in(ann) -> list:
    """Model classes an annotation may hold (through Optional, Union, Annotated, list)."""
    out = []
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    for a in typing.get_args(ann):
        out += _models_in(a)
    return out


def _member(ann, value: dict):
    """The model validating mapping `value` at a field annotated `ann` (tagged unions by tag)."""
    models = _models_in(ann)
    if len(models) == 1:
        return models[0]
    for m in models:
        for tag in TAGS:
            f = m.model_fields.get(tag)
            if f is not None and typing.get_origin(f.annotation) is Literal and tag in value \
                    and value[tag] in typing.get_args(f.annotation):
                return m
    return None


def walk(value, model, keys=()) -> list:
    """Every mapping (with its model) and every field value below it."""
    out = [Node(list(keys), model, "", value)]
    for k, v in value.items():
        f = model.model_fields.get(k)
        if f is None:
            continue
        out.append(Node([*keys, k], model, k, v))
        if isinstance(v, dict):
            sub = _member(f.annotation, v)
            if sub is not None:
                out += walk(v, sub, (*keys, k))
        elif isinstance(v, list):
            for i, item in enumerate(v):
                if isinstance(item, dict):
                    sub = _member(f.annotation, item)
                    if sub is not None:
                        out += walk(item, sub, (*keys, k, i))
    return out


def _scalar_type(ann):
    """int / float / bool / str / Literal of a leaf annotation (None for anything else)."""
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _scalar_type(typing.get_args(ann)[0])
    if origin is Literal:
        return "literal"
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        kinds = {_scalar_type(a) for a in typing.get_args(ann) if a is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    return {int: "int", float: "float", bool: "bool", str: "str"}.get(ann)


def _bounds(field) -> list:
    return [m for m in field.metadata if isinstance(m, (at.Gt, at.Ge, at.Lt, at.Le, at.MinLen))]


def _set(raw, keys, value):
    node = raw
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value


def _delete(raw, keys):
    node = raw
    for k in keys[:-1]:
        node = node[k]
    del node[keys[-1]]


@st.composite
def malformed(draw, valid) -> Broken:
    """`valid`: a strategy of valid `Drawn` scenarios."""
    from emulator.scenario import schema as scenario
    d = draw(valid)
    raw = copy.deepcopy(d.scenario)
    nodes = walk(raw, scenario.schema())
    how = draw(st.sampled_from(BREAKS))
    leaves = [n for n in nodes if n.field]
    maps = [n for n in nodes if not n.field]

    if how == "wrong_type":
        cands = []
        for n in leaves:
            f = n.model.model_fields[n.field]
            kind = _scalar_type(f.annotation)
            if n.field in TAGS and kind == "literal":
                continue                        # a tag's wrong type reads as an unknown name
            if kind in ("int", "float"):
                cands.append((n, "not-a-number"))
            elif kind == "bool":
                cands.append((n, "maybe"))
            elif kind == "str" and isinstance(n.value, str) and not n.value.startswith("@file:"):
                cands.append((n, ["a", "list"]))
            elif kind == "literal":
                cands.append((n, 17))
            elif isinstance(n.value, dict) and _member(f.annotation, n.value) is not None:
                cands.append((n, 17))
        assume(cands)
        n, bad = draw(st.sampled_from(cands))
        _set(raw, n.keys, bad)
        return Broken(Drawn(raw, d.files), fmt(n.keys), how, f"{n.value!r} -> {bad!r}")

    if how == "out_of_range":
        cands = []
        for n in leaves:
            f = n.model.model_fields[n.field]
            kind = _scalar_type(f.annotation)
            for b in _bounds(f):
                if isinstance(b, at.MinLen) and isinstance(n.value, list):
                    cands.append((n, [], f"min length {b.min_length}"))
                elif kind in ("int", "float") and isinstance(n.value, (int, float)) and not isinstance(n.value, bool):
                    step = 1 if kind == "int" else 0.5
                    val = {at.Gt: lambda b: b.gt, at.Ge: lambda b: b.ge - step,
                           at.Lt: lambda b: b.lt, at.Le: lambda b: b.le + step}[type(b)](b)
                    cands.append((n, int(val) if kind == "int" else float(val), repr(b)))
        N = raw["clients"]["count"]
        for n in leaves:                          # counts checked against the fleet (cross_check)
            if n.keys[-1] == "k" and n.keys[:1] == ["protocol"] and n.keys[1:2] in (["select"], ["wait"]):
                cands.append((n, N + 1, "k > clients.count"))
            if n.keys[-1] == "sets" and n.keys[:2] == ["protocol", "select"]:
                cands.append((n, [[N]], "client id >= clients.count"))
        assume(cands)
        n, bad, why = draw(st.sampled_from(cands))
        _set(raw, n.keys, bad)
        return Broken(Drawn(raw, d.files), fmt(n.keys), how, f"{n.value!r} -> {bad!r} ({why})")

    if how == "unknown_name":
        cands = [n for n in leaves if _scalar_type(n.model.model_fields[n.field].annotation) == "literal"]
        assume(cands)
        n = draw(st.sampled_from(cands))
        _set(raw, n.keys, "zzz_unknown")
        return Broken(Drawn(raw, d.files), fmt(n.keys), how, f"{n.value!r} -> 'zzz_unknown'")

    if how == "missing_key":
        cands = []
        for n in leaves:
            f = n.model.model_fields[n.field]
            if f.is_required():
                cands.append(n)
            elif n.field in TAGS and n.keys[-2:-1] and n.keys[-2] in ("compute", "availability", "select",
                                                                    "dataset", "partition", "model",
                                                                    "protocol", "algorithm"):
                cands.append(n)                   # a component's name: no default to fall back on
        assume(cands)
        n = draw(st.sampled_from(cands))
        _delete(raw, n.keys)
        return Broken(Drawn(raw, d.files), fmt(n.keys), how, f"removed {n.field}")

    # unknown_key
    n = draw(st.sampled_from(maps))
    _set(raw, [*n.keys, "zzz_extra"], 1)
    return Broken(Drawn(raw, d.files), fmt([*n.keys, "zzz_extra"]), how, f"added to {fmt(n.keys) or '<root>'}")

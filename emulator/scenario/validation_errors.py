"""Validation errors as flemu's problems: pydantic's errors turned into (YAML path, message)
pairs that name the field a user writes (never pydantic's internal union tags), the value
given (shortened, never formatted whole) and what is allowed; an unknown name lists the
known names and the closest match."""
from __future__ import annotations

import difflib
import reprlib
import typing
import weakref
from typing import Any, Optional

import annotated_types as at
from pydantic import BaseModel, ValidationError

from .. import registry
from .tags import TAGGED as _TAGGED
from .tags import tag_key as _tag_key

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 60, 60
_REPR.maxdict = _REPR.maxlist = _REPR.maxtuple = _REPR.maxset = 6


def format_path(keys) -> str:
    s = ""
    for k in keys:
        s += f"[{k}]" if isinstance(k, int) else (f".{k}" if s else str(k))
    return s


def _short(v, n=60) -> str:
    """A value for a message: at most `n` characters, built from a bounded look at the value
    (reprlib), so a huge or deeply aliased value costs no more than a small one."""
    s = _REPR.repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."

def _closest(word, options):
    m = difflib.get_close_matches(str(word), list(options), n=1, cutoff=0.5)
    return f"; did you mean {m[0]!r}?" if m else ""


def _model_at(S, loc):
    """The pydantic model class validating the mapping at `loc` (None if unknown)."""
    cur: Any = S
    for k in loc:
        if isinstance(k, str) and ":" in k and k in _TAGGED:
            cur = _TAGGED[k]
            continue
        if isinstance(k, int):
            continue
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)) or k not in cur.model_fields:
            return None
        cur = _first_model(cur.model_fields[k].annotation)
    return cur if isinstance(cur, type) and issubclass(cur, BaseModel) else None


def _first_model(ann):
    """The first model class inside an annotation (a tagged union's member is then
    replaced by the one its tag in the error location names)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for a in typing.get_args(ann):
        m = _first_model(a)
        if m is not None:
            return m
    return None


def _without_plain_tags(S, loc) -> list:
    """`loc` without the tags pydantic puts after a plain discriminated union (protocol.wait's
    `mode`: an error in `{mode: deadline}` is located at wait.deadline.seconds); users never
    write them. Registry unions ('kind:name' tags) are left to the caller."""
    out, cur, tags = [], S, None
    for k in loc:
        if tags is not None:
            member, tags = tags.get(k) if isinstance(k, str) else None, None
            if member is not None:
                cur = member
                continue
        out.append(k)
        if isinstance(k, str) and k in _TAGGED:
            cur = _TAGGED[k]
            continue
        if isinstance(k, int):                   # a list item: the same model goes on
            continue
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)) or k not in cur.model_fields:
            cur = None
            continue
        f = cur.model_fields[k]
        disc = f.discriminator if isinstance(f.discriminator, str) else None
        cur = _first_model(f.annotation)
        if disc:
            tags = {}
            for m in _members(f.annotation):
                t = m.model_fields.get(disc)
                for v in (typing.get_args(t.annotation) if t is not None else ()):
                    if isinstance(v, str):
                        tags[v] = m
    return out


def _members(ann):
    """The model classes inside an annotation (a union's members)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        yield ann
    for a in typing.get_args(ann):
        yield from _members(a)


def explain(err: ValidationError, raw, S) -> list:
    """One (YAML path, message) per problem of `err` (in order, without repeats)."""
    problems = []
    for e in err.errors():
        loc = _without_plain_tags(S, list(e["loc"]))
        clean = [k for k in loc if not (isinstance(k, str) and (k in _TAGGED or k == "__never__"
                                                                 or k.startswith(("function-", "tagged-union"))))]
        problems.append(_problem(e, S, loc, clean, format_path(clean)))
    return list(dict.fromkeys(problems))


def _problem(e, S, loc, clean, path) -> tuple:
    typ, ctx = e["type"], e.get("ctx") or {}
    if typ == "union_tag_invalid":
        return _unknown_tag(S, ctx, path)
    if typ in ("union_tag_not_found", "model_type", "dict_type") and not isinstance(e.get("input"), dict):
        return path, f"expected a mapping, got {_short(e.get('input'))}"
    if typ == "union_tag_not_found":
        kind = _kind_of(S, clean)
        if kind:
            known, key = _known(S, kind), _tag_key(kind)
        else:                      # a plain discriminated union (protocol.wait: mode)
            key = str(ctx.get("discriminator", "'name'")).strip("'")
            known = _tags_at(S, loc, key)
        return f"{path}.{key}", f"missing `{key}`; one of: {', '.join(known)}"
    if typ == "extra_forbidden":
        parent = _model_at(S, loc[:-1])
        allowed = [k for k in (parent.model_fields if parent else {})]
        extra = f"; allowed here: {', '.join(allowed)}{_closest(loc[-1], allowed)}" if allowed else ""
        return path, f"unknown key (value {_short(e.get('input'))}){extra}"
    if typ == "missing":
        return path, "required field missing"
    msg = e["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    inp = e.get("input")
    got = "" if isinstance(inp, dict) or (isinstance(inp, str) and inp in msg) else f" (got {_short(inp)})"
    if typ in ("finite_number", "int_parsing_size"):
        msg = "Input should be a finite number" if typ == "finite_number" else "Input is too large"
        got += _allowed(S, loc)
    return path, f"{msg}{got}"


def _unknown_tag(S, ctx, path) -> tuple:
    """An unknown component name (registry unions, 'kind:name' tags) or mode (plain unions)."""
    tag = str(ctx.get("tag", ""))
    if ":" not in tag:
        key = str(ctx.get("discriminator", "'name'")).strip("'")
        return (f"{path}.{key}" if path else key), f"unknown {key} {ctx.get('tag')!r}; known: {ctx.get('expected_tags')}"
    kind, _, name = tag.partition(":")
    known = _known(S, kind)
    key = _tag_key(kind)
    what = registry.KINDS[kind].split(" (")[0] if kind in registry.KINDS else "name"
    what = what[:-1] if what.endswith("s") else what             # "compute models" -> "compute model"
    return (f"{path}.{key}" if path else key), f"unknown {what} {name!r}; known: {', '.join(known)}{_closest(name, known)}"


_BUILT_WITH: "weakref.WeakKeyDictionary[type, dict]" = weakref.WeakKeyDictionary()


def remember_known_names(S: type) -> None:
    """Record the registry's names of every kind as the Scenario model `S` is built with them."""
    _BUILT_WITH[S] = {k: sorted(registry.table(k)) for k in registry.KINDS}


def known_names(S: type) -> Optional[dict]:
    """kind -> the names the Scenario model `S` was built with; None: `S` is not a built
    Scenario model (a part of one)."""
    return _BUILT_WITH.get(S)


def _known(S, kind: str) -> list:
    """The names of `kind` the schema `S` was built with (so an error never lists a name as
    known that the schema refused); the registry's for a part of a schema."""
    names = known_names(S)
    if names is not None:
        return names.get(kind, [])
    return sorted(registry.table(kind)) if kind in registry.KINDS else []


_BOUNDS = ((at.Gt, ">", lambda m: m.gt), (at.Ge, ">=", lambda m: m.ge), (at.Lt, "<", lambda m: m.lt),
           (at.Le, "<=", lambda m: m.le), (at.MinLen, "min items", lambda m: m.min_length))


def bounds(f) -> list:
    """The declared bounds of a pydantic field (`Field(gt=0, le=1, min_length=1)`: pydantic
    keeps them as annotated_types metadata) as [(">", 0), ("<=", 1), ("min items", 1)]."""
    return [(sign, value(m)) for m in f.metadata for kind, sign, value in _BOUNDS if isinstance(m, kind)]


def _allowed(S, loc) -> str:
    """'; allowed: ...' from the constraints of the field at `loc` (a non-finite or oversized
    number: say what the field takes)."""
    parent = _model_at(S, loc[:-1])
    f = parent.model_fields.get(loc[-1]) if parent is not None and loc else None
    if f is None:
        return ""
    out = [f"{sign} {_num(v)}" for sign, v in bounds(f) if sign != "min items"]
    what = "a whole number" if f.annotation in (int, Optional[int]) else "a finite number"
    return f"; allowed: {what} {', '.join(out)}".rstrip()


def _num(v) -> str:
    return str(v) if isinstance(v, int) else f"{v:g}"


def _tags_at(S, loc, key) -> list:
    """The values the tag `key` may take in the union at `loc` (its members' literals)."""
    parent = _model_at(S, loc[:-1])
    f = parent.model_fields.get(loc[-1]) if parent is not None else None
    out = []
    for m in _members(f.annotation if f is not None else None):
        tag = m.model_fields.get(key)
        if tag is not None:
            out += [v for v in typing.get_args(tag.annotation) if isinstance(v, str)]
    return out


def _kind_of(S, loc):
    """Which registry kind the union at `loc` belongs to."""
    last = loc[-1] if loc else None
    names = {"dataset": "dataset", "partition": "partition", "model": "model", "algorithm": "algorithm",
             "protocol": "protocol", "compute": "compute", "availability": "availability",
             "network": "network", "select": "selection", "executor": "executor"}
    return names.get(last)

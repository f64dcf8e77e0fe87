"""`--set path=value` overrides of a raw scenario mapping (before validation): parsing an
override, splitting a YAML path (`clients.groups[1].compute.sigma`), expanding `[*]` over the
items of a list, and setting the values. Every problem is a ScenarioError naming the override.
"""
from __future__ import annotations

import copy
import re

import yaml

from . import yaml_input
from ..errors import ScenarioError
from .tags import TAG_KEY
from .validation_errors import format_path


def parse_override(item: str):
    """`path=value` -> (path, value), the value parsed as YAML (a number, a boolean, a list,
    null; text that is not YAML stays text)."""
    if "=" not in item:
        raise ScenarioError([(f"--set {item}", "overrides look like path=value, e.g. algorithm.lr=0.1")])
    path, _, val = item.partition("=")
    try:
        value = yaml_input.parse(val) if val != "" else ""
    except yaml_input.YamlInputError as e:
        raise ScenarioError([(f"--set {path.strip()}", str(e))]) from None
    except yaml.YAMLError:
        value = val
    return path.strip(), value


_SEG = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def split_path(path: str) -> list:
    """`clients.groups[1].compute` -> ["clients", "groups", 1, "compute"] (`[*]` -> "*")."""
    out = []
    for name, idx in _SEG.findall(path):
        if idx:
            out.append(int(idx))
        elif name.isdigit():
            out.append(int(name))
        else:
            out.append(name)
    return out


def expand_path(raw: dict, path: str) -> list:
    """`a.b[*].c` -> the key lists of every `a.b[i].c` whose list exists in `raw` (a path
    without `[*]`: itself). `[*]` on something that is not a list is a ScenarioError."""
    out = []

    def walk(node, done, rest):
        if not rest:
            out.append(done)
            return
        k, tail = rest[0], rest[1:]
        if k == "*":
            if not isinstance(node, list):
                raise ScenarioError([(f"--set {path}", f"{format_path(done)} is not a list, so [*] has nothing to expand")])
            for i, item in enumerate(node):
                walk(item, done + [i], tail)
            return
        nxt = None
        if isinstance(node, dict):
            nxt = node.get(k)
        elif isinstance(node, list) and isinstance(k, int) and k < len(node):
            nxt = node[k]
        walk(nxt if nxt is not None else {}, done + [k], tail)
    walk(raw, [], split_path(path))
    return out


def apply_overrides(raw: dict, overrides) -> dict:
    """Set each `path=value` in the raw mapping, in order (creating mappings on the way);
    `[*]` in a path sets every item of that list as it stands then
    (`clients.groups[*].availability=...`), each item its own copy of the value."""
    problems = []
    for item in overrides or ():
        path, value = item if isinstance(item, tuple) else parse_override(item)
        keys = split_path(path)
        if "*" not in keys:
            _set(raw, path, keys, value, problems)
            continue
        try:
            for concrete in expand_path(raw, path):
                _set(raw, path, concrete, copy.deepcopy(value), problems)
        except ScenarioError as e:
            problems += e.problems
    if problems:
        raise ScenarioError(problems)
    return raw


def _set(raw: dict, path: str, keys: list, value, problems: list) -> None:
    """Set one concrete key path (no `[*]`); a problem is appended, not raised."""
    if not keys:
        problems.append((f"--set {path}", "empty path"))
        return
    node = raw
    for i, k in enumerate(keys[:-1]):
        nxt = keys[i + 1]
        if isinstance(k, int):
            if not isinstance(node, list) or k >= len(node):
                problems.append((f"--set {path}", f"{format_path(keys[:i + 1])} is not an existing list item"))
                return
            node = node[k]
        else:
            if not isinstance(node, dict):
                problems.append((f"--set {path}", f"{format_path(keys[:i])} is not a mapping"))
                return
            if k not in node or node[k] is None:
                node[k] = [] if isinstance(nxt, int) else {}
            elif isinstance(node[k], str) and not isinstance(nxt, int):
                node[k] = {TAG_KEY.get(k, "name"): node[k]}   # shorthand `partition: iid`
            node = node[k]
    last = keys[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            problems.append((f"--set {path}", f"{format_path(keys)} is not an existing list item"))
            return
    elif not isinstance(node, dict):
        problems.append((f"--set {path}", f"{format_path(keys[:-1])} is not a mapping"))
        return
    node[last] = value

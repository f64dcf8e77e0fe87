"""The axes of a sweep: `variants:` and `grid:` parsed into Axis objects (the column label of
each point and its `path=value` overrides), how a value is labelled in sweep.csv and run ids,
and the short axis names run ids use."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Optional

import yaml

from ..errors import ScenarioError
from ..scenario.overrides import parse_override, split_path


@dataclass
class Axis:
    name: str            # the column in sweep.csv and in analysis frames
    key: str             # its name in run ids
    labels: list         # one column value per point
    sets: list           # per point: [(path, value), ...]


def axes_of(raw: dict, problems: list) -> list:
    """The sweep's axes: its variants first, then one per `grid:` entry; a problem is appended."""
    axes = []
    if raw.get("variants") is not None:
        ax = _variant_axis(raw["variants"], problems)
        if ax is not None:
            axes.append(ax)
    g = raw.get("grid") or {}
    if not isinstance(g, dict):
        problems.append(("grid", f"a mapping of `path: [values]` or `axis: {{label: overrides}}`, got {g!r}"))
        g = {}
    for k, v in g.items():
        ax = _grid_axis(str(k), v, problems)
        if ax is not None:
            axes.append(ax)
    names = [a.name for a in axes]
    for n in set(names):
        if names.count(n) > 1:
            problems.append((f"grid.{n}", "the same axis twice"))
    if "seed" in names or "run" in names:
        problems.append(("grid", "`seed` and `run` are reserved column names; use `seeds:` for seeds"))
    return axes


def override_pairs(s, where, problems) -> list:
    """`set:`-like overrides (a mapping `path: value`, or a list of `path=value` / [path, value])
    as [(path, value)]; a problem (located at `where`) is appended, not raised."""
    if s is None:
        return []
    if isinstance(s, dict):
        return [(str(k), v) for k, v in s.items()]
    if isinstance(s, list):
        out = []
        for i, x in enumerate(s):
            if isinstance(x, str):
                try:
                    out.append(parse_override(x))
                except ScenarioError as e:
                    problems.append((f"{where}[{i}]", e.problems[0][1]))
            elif isinstance(x, (list, tuple)) and len(x) == 2:
                out.append((str(x[0]), x[1]))
            else:
                problems.append((f"{where}[{i}]", f"`path=value` or [path, value], got {x!r}"))
        return out
    problems.append((where, f"a mapping `path: value` (or a list of `path=value`), got {s!r}"))
    return []


def _variant_axis(v, problems) -> Optional[Axis]:
    """`variants:` as a mapping name -> overrides, or a list of {name, set} / {name, ...overrides}."""
    labels, sets = [], []
    if isinstance(v, dict):
        items = list(v.items())
    elif isinstance(v, list):
        items = []
        for i, x in enumerate(v):
            if not isinstance(x, dict) or "name" not in x:
                problems.append((f"variants[{i}]", "a mapping with a `name` (and `set:` overrides)"))
                continue
            x = dict(x)
            nm = x.pop("name")
            items.append((nm, x.pop("set") if "set" in x and len(x) == 1 else x))
    else:
        problems.append(("variants", f"a mapping name -> overrides, or a list of {{name, set}}; got {v!r}"))
        return None
    for nm, ov in items:
        if not re.fullmatch(r"[A-Za-z0-9_.+\-]+", str(nm)):
            problems.append((f"variants.{nm}", "a variant name of letters, digits, _ . + -"))
        labels.append(nm)
        sets.append(override_pairs(ov if ov is not None else {}, f"variants.{nm}", problems))
    if len(set(map(str, labels))) != len(labels):
        problems.append(("variants", "variant names must be distinct"))
    if not labels:
        problems.append(("variants", "no variants given"))
        return None
    return Axis("variant", "variant", labels, sets)


def _grid_axis(k: str, v, problems) -> Optional[Axis]:
    if isinstance(v, list):                       # path: [values]
        if not v:
            problems.append((f"grid.{k}", "no values"))
            return None
        labels = _value_labels(v)
        return Axis(k, k, labels, [[(k, x)] for x in v])
    if isinstance(v, dict):                       # axis: {label: {path: value, ...}}
        if not v:
            problems.append((f"grid.{k}", "no values"))
            return None
        sets = []
        for lab, ov in v.items():
            if not isinstance(ov, dict):
                problems.append((f"grid.{k}.{lab}", f"an override set `{{path: value}}`, got {ov!r}"))
                continue
            sets.append(override_pairs(ov, f"grid.{k}.{lab}", problems))
        return Axis(k, k, list(v.keys()), sets)
    problems.append((f"grid.{k}", f"a list of values, or a mapping label -> {{path: value}}; got {v!r}"))
    return None


def value_label(v):
    """How a grid value appears in sweep.csv and run ids: scalars as they are, a block by its
    `name` / `model` / `mode`, anything else as compact YAML."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict):
        for k in ("name", "model", "mode"):
            if isinstance(v.get(k), str):
                return v[k]
    return yaml.safe_dump(v, default_flow_style=True, width=10_000).strip()


def _value_labels(values) -> list:
    labels = [value_label(v) for v in values]
    for i, (lab, v) in enumerate(zip(labels, values)):
        clash = [j for j, (l2, v2) in enumerate(zip(labels, values)) if l2 == lab and v2 != v]
        if clash:          # two blocks share a name: tell them apart by a short hash
            labels[i] = f"{lab}-{_digest(v)}"
    return labels


def _digest(v) -> str:
    return hashlib.sha1(json.dumps(v, sort_keys=True, default=str).encode()).hexdigest()[:6]


def _last_segment(path: str) -> str:
    keys = [k for k in split_path(path) if isinstance(k, str) and k != "*"]
    return keys[-1] if keys else path


def name_axes(axes) -> None:
    """Short axis names in run ids: the last path segment, the full path where two collide."""
    short = [_last_segment(a.name) if "." in a.name or "[" in a.name else a.name for a in axes]
    for a, s in zip(axes, short):
        a.key = s if short.count(s) == 1 and s not in ("seed",) else a.name

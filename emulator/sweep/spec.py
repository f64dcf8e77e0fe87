"""The sweep file: `load_spec` parses and validates it into a SweepSpec (the base, its axes,
seeds and options); axis values get their column labels here."""
from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from .. import outputs, scenario as scn
from ..errors import ScenarioError

SPEC_KEYS = {"name", "description", "base", "set", "variants", "grid", "seeds", "out", "backend", "workers",
             "address", "resources", "threads", "report", "plugins"}
BACKENDS = ("local", "ray")


@dataclass
class Axis:
    name: str            # the column in sweep.csv and in analysis frames
    key: str             # its name in run ids
    labels: list         # one column value per point
    sets: list           # per point: [(path, value), ...]


@dataclass
class SweepSpec:
    name: str
    base: dict                              # the resolved base scenario (absolute data paths)
    axes: list                              # Axis; the variant axis first
    seeds: list
    set: list = field(default_factory=list)  # [(path, value)] for every run
    out: Optional[Path] = None
    base_dir: Optional[Path] = None          # relative paths in override values resolve here
    options: dict = field(default_factory=dict)   # backend, workers, address, resources, threads
    report: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)       # the sweep as given (for sweep.yaml)
    description: Optional[str] = None

    @property
    def dir(self) -> Path:
        return Path(self.out) if self.out is not None else Path("runs") / self.name


def load_spec(source, grid=(), sets=(), seeds=None, variants=None, name=None, out=None, plugins=()) -> SweepSpec:
    """A sweep from a sweep file or mapping (it has `base:`), or from a scenario file used as
    the base with `grid` ("path=[v1, v2]" strings or a mapping), `sets` ("path=value"),
    `seeds` (int n or list) and `variants` (mapping name -> override mapping). `plugins`
    (the command line's, relative to the working directory) and the sweep file's `plugins:`
    (relative to it) join the base scenario's: every run records and loads them."""
    problems = []
    src = None
    base_dir = None
    if isinstance(source, dict):
        raw = copy.deepcopy(source)
    else:
        src = str(source)
        raw = scn.read_yaml(source)
        base_dir = Path(source).resolve().parent
        if "base" not in raw:                 # a scenario file: the base itself
            raw = {"name": raw.get("name"), "base": raw}
    if "base" not in raw:
        raise ScenarioError([("base", "a sweep needs `base:` (a scenario file or mapping)")], source=src)
    for k in raw:
        if k not in SPEC_KEYS:
            problems.append((k, f"unknown key in a sweep; allowed: {', '.join(sorted(SPEC_KEYS))}"))
    # command-line additions
    if grid:
        g = dict(raw.get("grid") or {})
        items = grid.items() if isinstance(grid, dict) else [scn.parse_override(x) for x in grid]
        for path, vals in items:
            g[path] = vals if isinstance(vals, list) else [vals]
        raw["grid"] = g
    if sets:
        merged = dict(_set_pairs(raw.get("set"), "set", problems))
        merged.update(scn.parse_override(x) if isinstance(x, str) else tuple(x) for x in sets)
        raw["set"] = merged
    if seeds is not None:
        raw["seeds"] = seeds
    if variants is not None:
        raw["variants"] = variants
    if name is not None:
        raw["name"] = name
    if out is not None:
        raw["out"] = str(out)

    # the base: validated once, dumped with defaults and absolute data and plugin paths
    b = raw["base"]
    extra = _plugins(raw.get("plugins"), base_dir, plugins, src)
    try:
        if isinstance(b, dict):
            base_sc = scn.load(b, base_dir=base_dir, plugins=extra)
        elif isinstance(b, str):
            bpath = Path(b)
            if not bpath.is_absolute() and base_dir is not None:
                bpath = base_dir / bpath          # relative to the sweep file
            base_sc = scn.load(bpath, plugins=extra)
        else:
            raise ScenarioError([("base", f"a scenario file path or mapping, got {type(b).__name__}")])
    except ScenarioError as e:
        e.problems = [(f"base: {p}" if p else "base", m) for p, m in e.problems]
        e.source = src
        raise
    base = scn.dump(base_sc)

    sweep_name = raw.get("name") or base.get("name")
    if not isinstance(sweep_name, str) or not outputs.NAME_RE.fullmatch(sweep_name):
        problems.append(("name", f"a sweep name must be {outputs.NAME_RULE} (got {repr(sweep_name)[:60]})"))
    set_pairs = _set_pairs(raw.get("set"), "set", problems)
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
    seeds_ = raw.get("seeds", [base.get("seed", 0)])
    if isinstance(seeds_, bool) or not (isinstance(seeds_, int) and seeds_ >= 1 or isinstance(seeds_, list)):
        problems.append(("seeds", f"a number of seeds (>= 1) or a list of seeds, got {seeds_!r}"))
        seeds_ = [0]
    seed_list = list(range(seeds_)) if isinstance(seeds_, int) else seeds_
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seed_list) or \
            len(set(seed_list)) != len(seed_list) or not seed_list:
        problems.append(("seeds", f"seeds must be distinct integers >= 0, got {seed_list!r}"))
    options = {k: raw[k] for k in ("backend", "workers", "address", "resources", "threads") if k in raw}
    if options.get("backend", "local") not in BACKENDS:
        problems.append(("backend", f"one of {', '.join(BACKENDS)}, got {options.get('backend')!r}"))
    rep = raw.get("report") or {}
    if not isinstance(rep, dict):
        problems.append(("report", "a mapping (hue, col, x, target, budget)"))
        rep = {}
    if problems:
        raise ScenarioError(problems, source=src)
    _name_axes(axes)
    return SweepSpec(name=sweep_name, base=base, axes=axes, seeds=seed_list, set=set_pairs,
                     out=Path(raw["out"]) if raw.get("out") else None, base_dir=base_dir, options=options,
                     report=rep, raw=raw, description=raw.get("description"))


def _plugins(given, base_dir, extra, src) -> list:
    """The sweep file's `plugins:` (resolved against its folder) and the command line's."""
    from .. import plugins as pl
    if given is not None and not isinstance(given, list):
        raise ScenarioError([("plugins", f"a list of .py files or module names, got {given!r}")], source=src)
    own = [pl.resolve(x, base_dir) if isinstance(x, str) else x for x in given or ()]
    return pl.merge(own, [pl.resolve(x) for x in extra or ()])


def _set_pairs(s, where, problems) -> list:
    if s is None:
        return []
    if isinstance(s, dict):
        return [(str(k), v) for k, v in s.items()]
    if isinstance(s, list):
        out = []
        for i, x in enumerate(s):
            if isinstance(x, str):
                try:
                    out.append(scn.parse_override(x))
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
        sets.append(_set_pairs(ov if ov is not None else {}, f"variants.{nm}", problems))
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
            sets.append(_set_pairs(ov, f"grid.{k}.{lab}", problems))
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
    keys = [k for k in scn.split_path(path) if isinstance(k, str) and k != "*"]
    return keys[-1] if keys else path


def _name_axes(axes) -> None:
    """Short axis names in run ids: the last path segment, the full path where two collide."""
    short = [_last_segment(a.name) if "." in a.name or "[" in a.name else a.name for a in axes]
    for a, s in zip(axes, short):
        a.key = s if short.count(s) == 1 and s not in ("seed",) else a.name

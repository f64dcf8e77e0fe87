"""The sweep file: `load_spec` parses and validates it into a SweepSpec (the base scenario,
its axes (emulator/sweep/axes.py), seeds and options)."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..runs import outputs
from ..scenario import schema as scn, yaml_input
from ..errors import ScenarioError
from ..scenario.overrides import parse_override
from .axes import axes_of, name_axes, override_pairs

SPEC_KEYS = {"name", "description", "base", "set", "variants", "grid", "seeds", "out", "backend", "workers",
             "address", "resources", "threads", "report", "plugins"}
BACKENDS = ("local", "ray")


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
    problems: list = []
    raw, src, base_dir = _read(source)
    for k in raw:
        if k not in SPEC_KEYS:
            problems.append((k, f"unknown key in a sweep; allowed: {', '.join(sorted(SPEC_KEYS))}"))
    _add_command_line(raw, problems, grid, sets, seeds=seeds, variants=variants, name=name, out=out)
    base = _base(raw, base_dir, plugins, src)
    sweep_name = raw.get("name") or base.get("name")
    if not isinstance(sweep_name, str) or not outputs.NAME_RE.fullmatch(sweep_name):
        problems.append(("name", f"a sweep name must be {outputs.NAME_RULE} (got {repr(sweep_name)[:60]})"))
    set_pairs = override_pairs(raw.get("set"), "set", problems)
    axes = axes_of(raw, problems)
    seed_list = _seeds(raw.get("seeds", [base.get("seed", 0)]), problems)
    options = {k: raw[k] for k in ("backend", "workers", "address", "resources", "threads") if k in raw}
    if options.get("backend", "local") not in BACKENDS:
        problems.append(("backend", f"one of {', '.join(BACKENDS)}, got {options.get('backend')!r}"))
    rep = raw.get("report") or {}
    if not isinstance(rep, dict):
        problems.append(("report", "a mapping (hue, col, x, target, budget)"))
        rep = {}
    if problems:
        raise ScenarioError(problems, source=src)
    name_axes(axes)
    return SweepSpec(name=sweep_name, base=base, axes=axes, seeds=seed_list, set=set_pairs,
                     out=Path(raw["out"]) if raw.get("out") else None, base_dir=base_dir, options=options,
                     report=rep, raw=raw, description=raw.get("description"))


def _read(source) -> tuple:
    """(the sweep as a mapping, its file or None, the folder its paths are relative to); a
    scenario file is a sweep with that file as its base."""
    if isinstance(source, dict):
        raw, src, base_dir = copy.deepcopy(source), None, None
    else:
        src = str(source)
        raw = yaml_input.read_mapping(source)
        base_dir = Path(source).resolve().parent
        if "base" not in raw:                 # a scenario file: the base itself
            raw = {"name": raw.get("name"), "base": raw}
    if "base" not in raw:
        raise ScenarioError([("base", "a sweep needs `base:` (a scenario file or mapping)")], source=src)
    return raw, src, base_dir


def _add_command_line(raw: dict, problems: list, grid, sets, **given) -> None:
    """The command line's additions to the sweep: grid axes, `--set`s and the options given
    (those not None) replace or join the file's."""
    if grid:
        g = dict(raw.get("grid") or {})
        items = grid.items() if isinstance(grid, dict) else [parse_override(x) for x in grid]
        for path, vals in items:
            g[path] = vals if isinstance(vals, list) else [vals]
        raw["grid"] = g
    if sets:
        merged = dict(override_pairs(raw.get("set"), "set", problems))
        merged.update(parse_override(x) if isinstance(x, str) else tuple(x) for x in sets)
        raw["set"] = merged
    for key, value in given.items():
        if value is not None:
            raw[key] = str(value) if key == "out" else value


def _base(raw: dict, base_dir, plugins, src) -> dict:
    """The base scenario, validated once and dumped with defaults and absolute data and plugin
    paths; its problems are located under `base:`."""
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
    return scn.dump(base_sc)


def _seeds(seeds, problems: list) -> list:
    """`seeds:` (a count n: 0..n-1, or a list) as a list of distinct integers >= 0."""
    if isinstance(seeds, bool) or not (isinstance(seeds, int) and seeds >= 1 or isinstance(seeds, list)):
        problems.append(("seeds", f"a number of seeds (>= 1) or a list of seeds, got {seeds!r}"))
        seeds = [0]
    seed_list = list(range(seeds)) if isinstance(seeds, int) else seeds
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seed_list) or \
            len(set(seed_list)) != len(seed_list) or not seed_list:
        problems.append(("seeds", f"seeds must be distinct integers >= 0, got {seed_list!r}"))
    return seed_list


def _plugins(given, base_dir, extra, src) -> list:
    """The sweep file's `plugins:` (resolved against its folder) and the command line's."""
    from .. import plugins as pl
    if given is not None and not isinstance(given, list):
        raise ScenarioError([("plugins", f"a list of .py files or module names, got {given!r}")], source=src)
    own = [pl.resolve(x, base_dir) if isinstance(x, str) else x for x in given or ()]
    return pl.merge(own, [pl.resolve(x) for x in extra or ()])



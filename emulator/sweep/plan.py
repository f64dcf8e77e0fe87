"""Expansion: a SweepSpec's axes x seeds -> RunPlans with readable, stable ids; `resolve`
validates each run's scenario (the base with its overrides applied)."""
from __future__ import annotations

import copy
import hashlib
import itertools
import re
from dataclasses import dataclass
from typing import Optional

from ..scenario import schema as scn
from ..errors import ScenarioError
from ..scenario.overrides import apply_overrides
from .spec import SweepSpec


@dataclass
class RunPlan:
    id: str
    values: dict                     # axis name -> label
    seed: int
    overrides: list                  # [(path, value)] after the base (set, variant, grid)
    scenario: Optional[dict] = None  # resolved scenario (after `resolve`)


_UNSAFE = re.compile(r"[^A-Za-z0-9_.+\-]+")


def _id_part(x) -> str:
    s = repr(x) if isinstance(x, float) else str(x)
    s = _UNSAFE.sub("_", s).strip("_") or "_"
    return s


def expand(spec: SweepSpec) -> list:
    """Every run of the sweep: variants x grid (cartesian) x seeds, in a stable order."""
    plans = []
    points = itertools.product(*[list(range(len(a.labels))) for a in spec.axes]) if spec.axes else [()]
    for point in points:
        values = {a.name: a.labels[i] for a, i in zip(spec.axes, point)}
        ov = list(spec.set)
        for a, i in zip(spec.axes, point):
            ov += a.sets[i]
        parts = [f"{_id_part(a.key)}={_id_part(a.labels[i])}" for a, i in zip(spec.axes, point)]
        for s in spec.seeds:
            rid = "__".join(parts + [f"seed={s}"])
            if len(rid) > 180:
                rid = rid[:170] + "-" + hashlib.sha1(rid.encode()).hexdigest()[:8]
            plans.append(RunPlan(rid, dict(values), int(s), list(ov)))
    ids = [p.id for p in plans]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise ScenarioError([("grid", f"two runs would share the id {dup[0]!r}; give the values distinct labels")])
    return plans


def apply(raw: dict, overrides) -> dict:
    """Apply (path, value) overrides in order (values are copied: a plan's values are shared
    by its runs; `[*]` expands as in `--set`: `overrides.apply_overrides`)."""
    return apply_overrides(raw, [(path, copy.deepcopy(value)) for path, value in overrides])


def resolve(spec: SweepSpec, plans, threads: Optional[int] = None) -> list:
    """Validate every run's scenario (all problems reported together, each under its run id);
    fill plan.scenario with the resolved mapping (defaults, absolute paths, seed, output dir).
    `threads` (--threads): the base's `executor.threads`; a run's own axes and sets on it win."""
    problems = []
    root = spec.dir
    base = copy.deepcopy(spec.base)
    if threads is not None:
        ex = base.get("executor") or {"name": "sequential"}
        base["executor"] = {**({"name": ex} if isinstance(ex, str) else ex), "threads": int(threads)}
    for p in plans:
        try:
            raw = apply(copy.deepcopy(base), p.overrides)
            raw.setdefault("output", {})["dir"] = str(root / "runs" / p.id)
            sc = scn.load(raw, (), p.seed, base_dir=spec.base_dir)
            p.scenario = scn.dump(sc)
        except ScenarioError as e:
            problems += [(f"run {p.id}: {path}", msg) for path, msg in e.problems]
    if problems:
        raise ScenarioError(problems[:50] + ([("...", f"{len(problems) - 50} more")] if len(problems) > 50 else []))
    return plans

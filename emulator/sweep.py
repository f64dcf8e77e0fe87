"""Sweeps: a base scenario x named variants x a grid x seeds -> one folder of runs and an index.

A sweep file (YAML; `flemu sweep FILE`):

    name: stragglers
    base: study_base.yaml                 # a scenario file (relative to this file) or a mapping
    set: {run.virtual_time: 60}           # overrides for every run (paths as in `--set`)
    variants:                             # named override sets -> column `variant`
      fedavg_all: {protocol.wait: all}
      dms: {protocol: {name: intervals, interval: 1.5}, algorithm: {name: dms, lr: 0.1}}
    grid:                                 # the cartesian product of its axes
      algorithm.lr: [0.05, 0.1]           # a path and its values -> column `algorithm.lr`
      slow_fraction:                      # a named axis: value -> override set -> column `slow_fraction`
        0.25: {clients.groups[0].fraction: 0.75, clients.groups[1].fraction: 0.25}
        0.5:  {clients.groups[0].fraction: 0.5, clients.groups[1].fraction: 0.5}
    seeds: 3                              # 0, 1, 2; or a list [0, 7]
    out: runs/studies/stragglers          # default runs/<name>
    report: {hue: variant, col: slow_fraction, target: 0.85}   # hints for `flemu report`

Each run's scenario is the base with, in order, `set`, its variant, its grid values and its
seed applied; every value replaces what is at its path (`[*]` in a path means every item of
that list: `clients.groups[*].availability`). A grid value may be a whole block (a mapping);
it is labelled by its `name` (or `model` / `mode`). Run ids are readable and stable:
`variant=dms__lr=0.1__seed=0` (an axis is named by its last path segment, or by its full path
where two would collide).

The sweep folder:

    sweep.csv          the index: run, every swept value, seed, status, error, summary figures
    sweep.json         name, axes, seeds, report hints (what `analysis.load` needs)
    sweep.yaml         the sweep as given; base.yaml: the resolved base scenario
    runs/<id>/         one run directory per run (written atomically by the runner)
    scenarios/<id>.yaml  each run's resolved scenario (`flemu run` reproduces it)
    failures/<id>.json   the error of a run that failed (removed once it completes)
    logs/<id>.log      a failed run's output
    .lock              held by the running driver: two drivers never share a folder

Crash safety: a run directory appears under its final name only once complete (with its
summary.json), so what is finished is read from the folder itself; a driver killed at any
moment (kill -9 included) loses no finished run, and its children die with it (Linux
PR_SET_PDEATHSIG), so a resumed sweep never races an orphan nor runs a finished run twice.
Temporary leftovers (`runs/.<id>.tmp-*`) are removed on the next start.
"""
from __future__ import annotations

import copy
import datetime
import fcntl
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import yaml

from . import scenario as scn
from .errors import FlemuError, ScenarioError

SPEC_KEYS = {"name", "description", "base", "set", "variants", "grid", "seeds", "out", "backend", "workers",
             "address", "resources", "threads", "report"}
BACKENDS = ("local", "ray")
DONE = ("complete", "diverged", "stalled")          # a run directory with a summary: never re-run
INDEX_FIGURES = ("rounds", "virtual_time", "wall_time", "final_test_acc", "best_test_acc", "target_round",
                 "target_time", "tau_max", "tau_avg", "grad_steps_computed", "bytes_up", "bytes_down")


class SweepError(FlemuError):
    """A sweep cannot start (its folder is in use, or finished runs disagree with the plan)."""


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


@dataclass
class RunPlan:
    id: str
    values: dict                     # axis name -> label
    seed: int
    overrides: list                  # [(path, value)] after the base (set, variant, grid)
    scenario: Optional[dict] = None  # resolved scenario (after `resolve`)


@dataclass
class SweepResult:
    dir: Path
    index: "object"                  # pandas DataFrame of sweep.csv
    counts: dict                     # complete / diverged / stalled / failed / pending / skipped / ran


# --------------------------------------------------------------------------- the sweep file
def load_spec(source, grid=(), sets=(), seeds=None, variants=None, name=None, out=None) -> SweepSpec:
    """A sweep from a sweep file or mapping (it has `base:`), or from a scenario file used as
    the base with `grid` ("path=[v1, v2]" strings or a mapping), `sets` ("path=value"),
    `seeds` (int n or list) and `variants` (mapping name -> override mapping)."""
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

    # the base: validated once, dumped with defaults and absolute data paths
    b = raw["base"]
    try:
        if isinstance(b, dict):
            base_sc = scn.load(b, base_dir=base_dir)
        elif isinstance(b, str):
            bpath = Path(b)
            if not bpath.is_absolute() and base_dir is not None:
                bpath = base_dir / bpath          # relative to the sweep file
            base_sc = scn.load(bpath)
        else:
            raise ScenarioError([("base", f"a scenario file path or mapping, got {type(b).__name__}")])
    except ScenarioError as e:
        e.problems = [(f"base: {p}" if p else "base", m) for p, m in e.problems]
        e.source = src
        raise
    base = scn.dump(base_sc)

    sweep_name = raw.get("name") or base.get("name")
    if not isinstance(sweep_name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", sweep_name):
        problems.append(("name", f"a sweep name of letters, digits, _ . - (got {sweep_name!r})"))
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


_UNSAFE = re.compile(r"[^A-Za-z0-9_.+\-]+")


def _id_part(x) -> str:
    s = repr(x) if isinstance(x, float) else str(x)
    s = _UNSAFE.sub("_", s).strip("_") or "_"
    return s


# --------------------------------------------------------------------------- expansion
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


def _concrete(raw: dict, path: str) -> list:
    """`a.b[*].c` -> every `a.b[i].c` that exists in `raw` (no wildcard: the path itself)."""
    keys = scn.split_path(path)
    if "*" not in keys:
        return [path]
    out = []

    def walk(node, done, rest):
        if not rest:
            out.append(scn.format_path(done))
            return
        k, tail = rest[0], rest[1:]
        if k == "*":
            if not isinstance(node, list):
                raise ScenarioError([(path, f"{scn.format_path(done)} is not a list, so [*] has nothing to expand")])
            for i, item in enumerate(node):
                walk(item, done + [i], tail)
        else:
            nxt = node.get(k) if isinstance(node, dict) else (node[k] if isinstance(node, list) and isinstance(k, int) and k < len(node) else None)
            walk(nxt if nxt is not None else {}, done + [k], tail)
    walk(raw, [], keys)
    return out


def apply(raw: dict, overrides) -> dict:
    """Apply (path, value) overrides in order (values are copied; `[*]` expands)."""
    for path, value in overrides:
        for p in _concrete(raw, path):
            scn.apply_overrides(raw, [(p, copy.deepcopy(value))])
    return raw


def resolve(spec: SweepSpec, plans, threads: Optional[int] = None) -> list:
    """Validate every run's scenario (all problems reported together, each under its run id);
    fill plan.scenario with the resolved mapping (defaults, absolute paths, seed, output dir)."""
    problems = []
    root = spec.dir
    for p in plans:
        try:
            raw = apply(copy.deepcopy(spec.base), p.overrides)
            if threads is not None and not (raw.get("executor") or {}).get("threads"):
                ex = raw.get("executor") or {"name": "sequential"}
                ex = {"name": ex} if isinstance(ex, str) else ex
                ex["threads"] = int(threads)
                raw["executor"] = ex
            raw.setdefault("output", {})["dir"] = str(root / "runs" / p.id)
            sc = scn.load(raw, (), p.seed, base_dir=spec.base_dir)
            p.scenario = scn.dump(sc)
        except ScenarioError as e:
            problems += [(f"run {p.id}: {path}", msg) for path, msg in e.problems]
    if problems:
        raise ScenarioError(problems[:50] + ([("...", f"{len(problems) - 50} more")] if len(problems) > 50 else []))
    return plans


# --------------------------------------------------------------------------- the folder's state
def read_summary(run_dir: Path) -> Optional[dict]:
    """The run's summary if the directory is a finished run (summary.json, parseable, with a
    status), else None: a half-written directory is never taken for a finished one."""
    f = Path(run_dir) / "summary.json"
    try:
        s = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    return s if isinstance(s, dict) and s.get("status") in DONE and (Path(run_dir) / "metrics.csv").exists() else None


def _comparable(cfg: dict) -> dict:
    c = copy.deepcopy(cfg)
    c.pop("output", None)
    ex = c.get("executor")
    if isinstance(ex, dict):
        ex.pop("threads", None)
    return c


def _stored_config(path: Path) -> dict:
    """A finished run's config.yaml, resolved again by today's schema: a field added since
    (with its default) is then filled in on both sides and does not make the run stale; a
    config that no longer validates compares as it was stored (and so differs)."""
    try:
        got = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    try:
        return scn.dump(scn.load(copy.deepcopy(got)))
    except (FlemuError, ValueError, TypeError):
        return got


def _first_difference(a, b, path="") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}.{k}".lstrip(".")
            d = _first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return ""
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return ""
    return "" if a == b else (path.lstrip(".") or "<root>")


def scan(root: Path, plans, check_stale: bool = True) -> dict:
    """id -> {"status", "summary", "failure", "stale"} read from the folder."""
    state = {}
    for p in plans:
        d = root / "runs" / p.id
        s = read_summary(d)
        st = {"status": "pending", "summary": None, "failure": None, "stale": None}
        if s is not None:
            st.update(status=s["status"], summary=s)
            if check_stale and p.scenario is not None and (d / "config.yaml").exists():
                got = _stored_config(d / "config.yaml")
                diff = _first_difference(_comparable(p.scenario), _comparable(got))
                if diff:
                    st["stale"] = diff
        else:
            f = root / "failures" / f"{p.id}.json"
            try:
                st.update(status="failed", failure=json.loads(f.read_text()))
            except (OSError, ValueError):
                pass
        state[p.id] = st
    return state


def index_rows(plans, state, axes) -> list:
    rows = []
    for p in plans:
        st = state[p.id]
        s = st["summary"] or {}
        r = {"run": p.id, **{a: p.values.get(a) for a in axes}, "seed": p.seed, "status": st["status"],
             "error": (st["failure"] or {}).get("error", "") if st["status"] == "failed" else ""}
        reach = s.get("reached_target") or {}
        delay = (s.get("delay") or {}).get("0") or {}
        fig = {"rounds": s.get("rounds"), "virtual_time": s.get("virtual_time"), "wall_time": s.get("wall_time"),
               "final_test_acc": s.get("final_test_acc"), "best_test_acc": s.get("best_test_acc"),
               "target_round": reach.get("round"), "target_time": reach.get("virtual_time"),
               "tau_max": delay.get("tau_max"), "tau_avg": delay.get("tau_avg"),
               "grad_steps_computed": s.get("grad_steps_computed"), "bytes_up": s.get("bytes_up"),
               "bytes_down": s.get("bytes_down")}
        r.update(fig)
        r["dir"] = f"runs/{p.id}"
        rows.append(r)
    return rows


def write_index(root: Path, plans, state, axes):
    """sweep.csv, regenerated from the state and written atomically."""
    import pandas as pd
    cols = ["run", *axes, "seed", "status", "error", *INDEX_FIGURES, "dir"]
    df = pd.DataFrame(index_rows(plans, state, axes), columns=cols)
    _atomic_write(root / "sweep.csv", df.to_csv(index=False))
    return df


def _atomic_write(path: Path, text: str) -> None:
    path = Path(path)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{time.monotonic_ns()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _clean_leftovers(root: Path) -> int:
    """Remove temporary names left by a killed run or driver (never a finished run)."""
    n = 0
    for sub in (root / "runs", root / "scenarios", root / "failures", root):
        if not sub.is_dir():
            continue
        for p in sub.iterdir():
            if p.name.startswith(".") and (".tmp-" in p.name or ".old-" in p.name):
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
                n += 1
    return n


class FolderLock:
    """An exclusive flock on <sweep>/.lock (released by the kernel when the driver dies)."""

    def __init__(self, root: Path):
        self.path = Path(root) / ".lock"
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)   # close-on-exec: children never hold it
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.read(self.fd, 64).decode(errors="replace").strip()
            os.close(self.fd)
            raise SweepError(f"another flemu sweep is running in {self.path.parent}"
                             + (f" (pid {other})" if other else "")) from None
        os.ftruncate(self.fd, 0)
        os.write(self.fd, str(os.getpid()).encode())
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def _journal(root: Path, **event) -> None:
    event = {"time": datetime.datetime.now().isoformat(timespec="milliseconds"), "pid": os.getpid(), **event}
    with open(root / "events.jsonl", "a") as f:
        f.write(json.dumps(event) + "\n")


# --------------------------------------------------------------------------- the driver
def default_threads(backend: str, workers: int, resources: dict) -> int:
    if backend == "ray":
        return max(1, int(math.floor(float(resources.get("num_cpus", 1)))))
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def run_sweep(spec, backend: Optional[str] = None, workers: Optional[int] = None, address: Optional[str] = None,
              resources: Optional[dict] = None, threads: Optional[int] = None, retry_failed: bool = True,
              rerun_stale: bool = False, dry_run: bool = False,
              progress: Optional[Callable[[dict], None]] = None) -> SweepResult:
    """Run (or resume) a sweep: every planned run not yet finished, `workers` at a time, on the
    `local` backend (one process per run) or on `ray` (tasks on a local or existing cluster).
    Finished runs are skipped; a failed run is recorded and the others go on. Returns the
    index (sweep.csv) and counts. `dry_run`: plan and report only, write nothing."""
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    o = spec.options
    backend = backend or o.get("backend", "local")
    if backend not in BACKENDS:
        raise ScenarioError([("backend", f"one of {', '.join(BACKENDS)}, got {backend!r}")])
    resources = {**(o.get("resources") or {}), **(resources or {})}
    resources = {"num_cpus": float(resources.get("num_cpus", resources.get("cpus", 1))),
                 "num_gpus": float(resources.get("num_gpus", resources.get("gpus", 0)))}
    workers = workers or o.get("workers")
    address = address or o.get("address")
    if threads is None:
        threads = o.get("threads")
    plans = expand(spec)
    root = spec.dir
    if workers is None:
        workers = (os.cpu_count() or 1) if backend == "local" else None
    if threads is None and (workers or 2) > 1:
        threads = default_threads(backend, workers or 1, resources)
    resolve(spec, plans, threads)
    axes = [a.name for a in spec.axes]

    if dry_run:
        state = scan(root, plans) if root.exists() else {p.id: {"status": "pending", "summary": None,
                                                                 "failure": None, "stale": None} for p in plans}
        import pandas as pd
        df = pd.DataFrame(index_rows(plans, state, axes))
        return SweepResult(root, df, _counts(state, skipped=0, ran=0))

    root.mkdir(parents=True, exist_ok=True)
    with FolderLock(root):
        _clean_leftovers(root)
        state = scan(root, plans)
        stale = {i: st["stale"] for i, st in state.items() if st["stale"]}
        if stale and not rerun_stale:
            first = next(iter(stale))
            raise SweepError(f"{len(stale)} finished run(s) in {root} were made with a different scenario "
                             f"(e.g. {first}: {stale[first]} differs); use a new --out folder, or "
                             f"--rerun-stale to run them again")
        for sub in ("runs", "scenarios", "failures", "logs"):
            (root / sub).mkdir(exist_ok=True)
        _write_meta(root, spec, axes, backend)
        todo = [p for p in plans
                if state[p.id]["status"] == "pending" or state[p.id]["stale"]
                or (state[p.id]["status"] == "failed" and retry_failed)]
        skipped = len(plans) - len(todo)
        for p in todo:
            _atomic_write(root / "scenarios" / f"{p.id}.yaml",
                          yaml.safe_dump(p.scenario, sort_keys=False, default_flow_style=None, width=100))
        write_index(root, plans, state, axes)
        _journal(root, event="start", runs=len(plans), todo=len(todo), backend=backend)
        ran = 0
        if todo:
            from .sweep_backends import make_backend
            pool = make_backend(backend, root, workers=workers, address=address, resources=resources)
            ran = _drive(root, pool, todo, plans, state, axes, skipped, progress)
        index = write_index(root, plans, state, axes)
        _journal(root, event="end", ran=ran)
    return SweepResult(root, index, _counts(state, skipped, ran))


def _write_meta(root: Path, spec: SweepSpec, axes, backend) -> None:
    meta = {"name": spec.name, "description": spec.description, "axes": axes, "seeds": spec.seeds,
            "axis_values": {a.name: a.labels for a in spec.axes}, "report": spec.report,
            "target_accuracy": (spec.base.get("run") or {}).get("target_accuracy"), "backend": backend,
            "updated": datetime.datetime.now().isoformat(timespec="seconds")}
    _atomic_write(root / "sweep.json", json.dumps(meta, indent=2, default=str))
    _atomic_write(root / "sweep.yaml", yaml.safe_dump(_plain(spec.raw), sort_keys=False, default_flow_style=None,
                                                      width=100))
    _atomic_write(root / "base.yaml", yaml.safe_dump(spec.base, sort_keys=False, default_flow_style=None, width=100))


def _plain(x):
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _counts(state, skipped, ran) -> dict:
    c = {k: 0 for k in (*DONE, "failed", "pending")}
    for st in state.values():
        c[st["status"]] = c.get(st["status"], 0) + 1
    c["skipped"], c["ran"] = skipped, ran
    return c


def _drive(root, pool, todo, plans, state, axes, skipped, progress) -> int:
    """The scheduling loop: keep the pool full, record each outcome as it lands."""
    from collections import deque
    queue = deque(todo)
    done = failed = 0
    total = len(todo)
    last_index = 0.0
    last_run = None

    def report():
        if progress is not None:
            progress({"total": total, "done": done, "failed": failed, "running": len(pool.running()),
                      "pending": len(queue), "skipped": skipped, "last": last_run})
    report()
    try:
        while queue or pool.running():
            while queue and len(pool.running()) < pool.capacity:
                p = queue.popleft()
                _journal(root, event="run", run=p.id)
                pool.submit(p)
            report()
            for out in pool.poll(0.2):
                last_run = out
                if out["ok"]:
                    s = read_summary(root / "runs" / out["id"])
                if out["ok"] and s is not None:
                    done += 1
                    state[out["id"]] = {"status": s["status"], "summary": s, "failure": None, "stale": None}
                    (root / "failures" / f"{out['id']}.json").unlink(missing_ok=True)
                    (root / "logs" / f"{out['id']}.log").unlink(missing_ok=True)
                    _journal(root, event="complete", run=out["id"], status=s["status"])
                else:
                    failed += 1
                    prev = state[out["id"]].get("failure") or {}
                    rec = {"run": out["id"], "error": out.get("error") or "no summary written",
                           "type": out.get("type"), "detail": out.get("detail"), "exit_code": out.get("exit_code"),
                           "time": datetime.datetime.now().isoformat(timespec="seconds"),
                           "attempts": int(prev.get("attempts", 0)) + 1}
                    _atomic_write(root / "failures" / f"{out['id']}.json", json.dumps(rec, indent=2, default=str))
                    state[out["id"]] = {"status": "failed", "summary": None, "failure": rec, "stale": None}
                    _journal(root, event="failed", run=out["id"], error=rec["error"])
                if time.monotonic() - last_index > 1.0 or not (queue or pool.running()):
                    write_index(root, plans, state, axes)
                    last_index = time.monotonic()
                report()
    finally:
        pool.close()
        write_index(root, plans, state, axes)
    return done + failed

"""Load run directories and sweep folders into tidy pandas frames.

    study = analysis.load("runs/studies/stragglers")     # a sweep folder, a run, or a list of them
    study.summary    # one row per run: run, <swept values>, seed, status, summary figures
    study.metrics    # metrics.csv of every run, with run, <swept values>, seed in front
    study.clients    # clients.csv of every run (+ the client's device group), same keys
    study.client_eval  # client_eval.csv of every run with per-client evaluation, same keys

Swept values come from the sweep's index (sweep.csv, listed in sweep.json). A plain run
directory becomes one row with its directory name as `run`. Every frame has a `condition`
column: the swept values except the seed joined into one label (for a plain run: its name),
the natural unit to compare and to average over seeds.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pandas as pd
import yaml

from emulator.runs.outputs import LEFT_OUT
from emulator.scenario.yaml_input import parse as parse_yaml

KEYS = ("run", "condition", "seed")


@dataclass
class Run:
    dir: Path
    config: dict
    metrics: pd.DataFrame
    clients: pd.DataFrame
    summary: dict
    client_eval: pd.DataFrame = field(default_factory=pd.DataFrame)   # client_eval.csv (empty: none)
    partition: pd.DataFrame = field(default_factory=pd.DataFrame)     # partition.csv (empty: none)

    @property
    def name(self) -> str:
        return self.summary.get("name", self.dir.name)


def is_run_dir(path) -> bool:
    p = Path(path)
    return (p / "summary.json").exists() and (p / "metrics.csv").exists()


def is_sweep_dir(path) -> bool:
    return (Path(path) / "sweep.csv").exists()


# columns flemu writes as numbers: a file where one holds text was not written by flemu (or
# was edited), and is refused with its file, column and line rather than misread
NUMERIC = {"metrics.csv": ("round", "model", "virtual_time", "wall_time", "participants", "selected", "dropped",
                           "bytes_up", "bytes_down", "train_loss", "test_acc", "test_loss", "round_time", "tau"),
           "clients.csv": ("round", "client", "steps", "compute_time", "comm_time", "weight", "bytes_up",
                           "bytes_down", "energy_j", "eval_time"),
           "client_eval.csv": ("evaluation", "round", "virtual_time", "client", "n", "loss", "acc")}
REQUIRED = {"metrics.csv": ("round", "virtual_time"),
            "client_eval.csv": ("evaluation", "round", "virtual_time", "client", "group", "n", "acc")}


def read_table(path: Path) -> pd.DataFrame:
    """A CSV flemu wrote (metrics.csv, clients.csv, partition.csv), its number columns
    checked; ValueError naming the file, column and line otherwise."""
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as e:            # pandas' parser and decode errors are ValueErrors
        raise ValueError(f"{path}: cannot be read as a CSV table: {str(e).splitlines()[0][:200] if str(e) else e}") from None
    missing = [c for c in REQUIRED.get(path.name, ()) if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: no column {missing[0]!r}; is it a flemu {path.name}?")
    for c in NUMERIC.get(path.name, ()):
        if c not in df.columns or pd.api.types.is_numeric_dtype(df[c]) or df[c].dtype == bool:
            continue
        num = pd.to_numeric(df[c], errors="coerce")
        bad = df[c].notna() & num.isna()
        if df[c].isin(["True", "False", True, False]).all() or not bad.any():
            continue
        i = int(bad.to_numpy().argmax())
        raise ValueError(f"{path}: column {c!r}, line {i + 2}: {str(df[c].iloc[i])[:60]!r} is not a number")
    return df


def read_summary(path: Path) -> dict:
    try:
        s = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a JSON summary: {e}") from None
    if not isinstance(s, dict):
        raise ValueError(f"{path}: a summary is a JSON mapping, got {type(s).__name__}")
    return s


def load_run(path, clients: bool = True) -> Run:
    p = Path(path)
    if not is_run_dir(p):
        raise FileNotFoundError(f"{p} is not a flemu run directory (no summary.json / metrics.csv)")
    cfg = {}
    if (p / "config.yaml").exists():
        try:
            cfg = parse_yaml((p / "config.yaml").read_bytes()) or {}
        except (OSError, ValueError, yaml.YAMLError) as e:
            raise ValueError(f"{p / 'config.yaml'}: not a flemu config: {e}") from None
        if not isinstance(cfg, dict):
            raise ValueError(f"{p / 'config.yaml'}: a config is a YAML mapping, got {type(cfg).__name__}")
    cl = read_table(p / "clients.csv") if clients and (p / "clients.csv").exists() else pd.DataFrame()
    ce = read_table(p / "client_eval.csv") if (p / "client_eval.csv").exists() else pd.DataFrame()
    part = read_table(p / "partition.csv") if clients and (p / "partition.csv").exists() else pd.DataFrame()
    return Run(p, cfg, read_table(p / "metrics.csv"), cl, read_summary(p / "summary.json"), ce, part)


@dataclass
class Study:
    """Runs loaded together: tidy frames keyed by run (and the swept values)."""
    paths: list
    axes: list                       # swept columns (without seed), in order
    summary: pd.DataFrame
    metrics: pd.DataFrame
    clients: pd.DataFrame
    runs: dict = field(default_factory=dict)     # run -> Run (config, summary; frames are in the study)
    meta: dict = field(default_factory=dict)     # sweep.json of a single sweep folder
    client_eval: pd.DataFrame = field(default_factory=pd.DataFrame)   # client_eval.csv of every run, keyed

    @property
    def kind(self) -> str:
        if len(self.paths) == 1 and is_sweep_dir(self.paths[0]):
            return "sweep"
        return "run" if len(self.runs) == 1 else "runs"

    @property
    def target(self) -> Optional[float]:
        """The target accuracy: the sweep's report hint, else the runs' run.target_accuracy."""
        t = (self.meta.get("report") or {}).get("target") or self.meta.get("target_accuracy")
        if t:
            return float(t)
        ts = {(r.config.get("run") or {}).get("target_accuracy") for r in self.runs.values()} - {None}
        return float(ts.pop()) if len(ts) == 1 else None

    @property
    def conditions(self) -> list:
        return list(dict.fromkeys(self.summary["condition"]))

    def keys(self) -> list:
        return ["run", *self.axes, "seed", "condition"]


def _condition(row, axes) -> str:
    if not axes:
        return str(row["run"])
    return " · ".join(f"{row[a]}" if a == "variant" else f"{a.split('.')[-1]}={row[a]}" for a in axes)


def _flat_summary(s: dict) -> dict:
    reach = s.get("reached_target") or {}
    delay = (s.get("delay") or {}).get("0") or {}
    out = {k: s.get(k) for k in ("status", "rounds", "virtual_time", "wall_time", "final_test_acc", "best_test_acc",
                                 "final_test_loss", "grad_steps_virtual", "grad_steps_computed", "grad_steps_skipped",
                                 "bytes_up", "bytes_down", "energy_j_total")}
    out.update(target_round=reach.get("round"), target_time=reach.get("virtual_time"),
               tau_max=delay.get("tau_max"), tau_avg=delay.get("tau_avg"))
    return out


def _sweep_entries(path: Path):
    """(index rows, axes, meta) of a sweep folder."""
    idx = read_table(path / "sweep.csv")
    meta = {}
    if (path / "sweep.json").exists():
        meta = read_summary(path / "sweep.json")
    axes = meta.get("axes")
    if axes is None:                       # columns between `run` and `seed`
        cols = list(idx.columns)
        axes = cols[1:cols.index("seed")] if "seed" in cols else []
    return idx, list(axes), meta


def load(paths, clients: bool = True) -> Study:
    """A sweep folder, a run directory, or a list of either -> Study (tidy frames)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = [Path(p) for p in paths]
    entries, axes, meta = [], [], {}
    for p in paths:
        if is_sweep_dir(p):
            idx, ax, m = _sweep_entries(p)
            meta = m if len(paths) == 1 else {}
            for a in ax:
                if a not in axes:
                    axes.append(a)
            for _, r in idx.iterrows():
                d = p / (r["dir"] if isinstance(r.get("dir"), str) else f"runs/{r['run']}")
                entries.append((d, {a: r[a] for a in ax}, r))
        elif is_run_dir(p):
            entries.append((p, {}, None))
        else:
            raise FileNotFoundError(f"{p} is neither a run directory (summary.json, metrics.csv) "
                                    f"nor a sweep folder (sweep.csv)")
    rows, mframes, cframes, eframes, runs = [], [], [], [], {}
    names = [str(d.name) for d, _, _ in entries]
    for d, values, irow in entries:
        rid = d.name if names.count(d.name) == 1 else str(d)
        row = {"run": rid, **{a: values.get(a) for a in axes}}
        if is_run_dir(d):
            r = load_run(d, clients=clients)
            runs[rid] = r
            row["seed"] = r.summary.get("seed", (r.config or {}).get("seed"))
            row.update(_flat_summary(r.summary))
            # why a run directory is left out of the tables (failed, invalid, empty): its message
            row["error"] = str(r.summary.get("message") or "") if row["status"] in LEFT_OUT else ""
        else:                                # a failed or pending run of a sweep
            row["seed"] = irow["seed"] if irow is not None else None
            row["status"] = irow["status"] if irow is not None else "missing"
            err = irow.get("error") if irow is not None else ""
            row["error"] = err if isinstance(err, str) else ""
        row["dir"] = str(d)
        rows.append(row)
        if rid in runs:
            keys = {k: row[k] for k in ("run", *axes, "seed")}
            # a run's own column named like a swept axis (a metrics column `lr` and an axis `lr`)
            # keeps its values as `<name>_run`; the axis keeps the name
            clash = lambda f: f.rename(columns={k: f"{k}_run" for k in keys if k in f.columns})  # noqa: E731
            m = clash(runs[rid].metrics.copy())
            mframes.append(m.assign(**keys)[[*keys, *m.columns]])
            if len(runs[rid].client_eval):
                e = clash(runs[rid].client_eval.copy())
                eframes.append(e.assign(**keys)[[*keys, *e.columns]])
            if clients and len(runs[rid].clients):
                c = runs[rid].clients.copy()
                part = d / "partition.csv"
                if part.exists() and "group" not in c:
                    g = pd.read_csv(part, usecols=["client", "group"])
                    c = c.merge(g, on="client", how="left")
                c = clash(c)
                cframes.append(c.assign(**keys)[[*keys, *c.columns]])
    summary = pd.DataFrame(rows)
    if len(summary):
        summary["condition"] = summary.apply(lambda r: _condition(r, axes), axis=1)
    cond = dict(zip(summary["run"], summary["condition"])) if len(summary) else {}

    def with_condition(frames):
        if not frames:
            return pd.DataFrame(columns=["run", *axes, "seed", "condition"])
        f = pd.concat(frames, ignore_index=True)
        f.insert(len(axes) + 2, "condition", f["run"].map(cond))
        return f
    return Study(paths, axes, summary, with_condition(mframes), with_condition(cframes) if clients else pd.DataFrame(),
                 runs, meta, with_condition(eframes))


#: the statuses whose runs count in a comparison; the others (a crash, a pending run, and the
#: `failed`, `invalid` and `empty` runs: docs/reliability.md) are left out, each named with why
FINISHED = ("complete", "diverged", "stalled", "stopped")


def left_out(study) -> pd.DataFrame:
    """The study's runs left out of its tables: run, status and why (their error)."""
    s = study.summary
    if not len(s):
        return pd.DataFrame(columns=["run", "status", "error"])
    return s[~s["status"].isin(FINISHED)][["run", "status", "error"]]


def left_out_lines(study) -> list:
    """`left out: RUN (STATUS): WHY` for each run left out of the tables."""
    return [f"left out: {r.run} ({r.status}){': ' + str(r.error) if r.error else ''}"
            for r in left_out(study).itertuples(index=False)]

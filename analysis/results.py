"""Results that regenerate (`make results`, `make results-check`; docs/results.md): the
driver of results/manifest.yaml, which lists every number and figure a docs page shows that a
run produced, with the commands that regenerate it, its quick variant and its outputs.

    python -m analysis.results list
    python -m analysis.results full   [NAME ...]    the full commands (hours; outside CI)
    python -m analysis.results check  [NAME ...]    each quick variant against its stored numbers
    python -m analysis.results record [NAME ...]    run the quick variants, store their numbers

A quick variant is a `flemu sweep` command run into build/results/quick/NAME (with `keep:`,
on a copy of its sweep file that keeps only some variants and values of its axes). Its numbers are,
per condition (the swept values but the seed), the mean over the seeds of each metric named in
the manifest, stored in results/quick/NAME.json with their spread over the seeds (max - min).
`check` fails when a number moved further from the stored one than that spread, or than its
floor (an absolute and a relative part) where the seeds agree; it prints which number drifted,
by how much, against which tolerance. Benchmarks are listed, never re-run (`make bench`).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "results" / "manifest.yaml"
STORED = ROOT / "results" / "quick"
QUICK_RUNS = ROOT / "build" / "results" / "quick"
FLOOR = {"abs": 0.002, "rel": 0.01}        # the smallest tolerance, where the seeds agree
KINDS = ("result", "benchmark", "mutation")


def manifest(path: Path = MANIFEST) -> list:
    """The manifest's entries, each checked for the keys the driver needs."""
    entries = (yaml.safe_load(Path(path).read_text()) or {}).get("results") or []
    for e in entries:
        kind = e.setdefault("kind", "result")
        if kind not in KINDS or not e.get("name") or not e.get("full") or not e.get("page"):
            raise ValueError(f"{path}: entry {e.get('name')!r} needs name, page, full and a kind in {KINDS}")
        if e.get("quick") and not (e["quick"].get("sweep", "").startswith("flemu sweep ") and e["quick"].get("metrics")):
            raise ValueError(f"{path}: {e['name']}.quick needs `sweep: flemu sweep ...` and `metrics`")
    return entries


def stamp(root: Path = ROOT) -> dict:
    """The commit a result is made at: HEAD's short hash and whether tracked files differ from it."""
    def git(*a):
        return subprocess.run(["git", *a], cwd=root, capture_output=True, text=True).stdout.strip()
    return {"commit": git("rev-parse", "--short", "HEAD") or "unknown",
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def stamp_text(s: Optional[dict] = None) -> str:
    s = s or stamp()
    return f"commit {s['commit']}" + (" with uncommitted changes" if s["dirty"] else "")


def _env() -> dict:
    """The commands' environment: the venv's `flemu` and `python` first, one torch thread."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _label(value) -> str:
    """A grid value's label, as the sweep names it: a component's name (`{model: markov, ...}` -> markov)."""
    if isinstance(value, dict):
        return str(value.get("model", value.get("name", value)))
    return str(value)


def narrowed(sweep_file: Path, keep: dict, out: Path) -> Path:
    """A copy of a sweep file with only the variants (`keep: {variant: [...]}`) and the values
    of its grid axes (`keep: {AXIS: [label, ...]}`) kept, its base made absolute: a quick
    variant that reads its conditions from the full sweep file rather than a copy of them."""
    raw = yaml.safe_load(Path(sweep_file).read_text())
    for axis, labels in keep.items():
        labels = [str(x) for x in labels]
        where = raw.get("variants") if axis == "variant" else (raw.get("grid") or {}).get(axis)
        if where is None:
            raise ValueError(f"{sweep_file}: no axis {axis!r} to keep {labels} of")
        kept = ({k: v for k, v in where.items() if str(k) in labels} if isinstance(where, dict)
                else [v for v in where if _label(v) in labels])
        if len(kept) != len(labels):
            raise ValueError(f"{sweep_file}: {axis} has not all of {labels}")
        if axis == "variant":
            raw["variants"] = kept
        else:
            raw["grid"][axis] = kept
    if isinstance(raw.get("base"), str):
        raw["base"] = str((Path(sweep_file).parent / raw["base"]).resolve())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def run_quick(entry: dict, out_root: Path = QUICK_RUNS) -> Path:
    """Run the entry's quick sweep afresh into out_root/NAME; its sweep folder."""
    out = Path(out_root) / entry["name"]
    if out.exists():
        if not (out / "sweep.json").exists():      # only a sweep folder this check wrote is replaced
            raise SystemExit(f"results-check: {out} exists and is not a sweep folder: move it away first")
        shutil.rmtree(out)
    cmd = entry["quick"]["sweep"]
    if entry["quick"].get("keep"):
        words = shlex.split(cmd)
        small = narrowed(ROOT / words[2], entry["quick"]["keep"], Path(out_root) / f"{entry['name']}.sweep.yaml")
        cmd = shlex.join(words[:2] + [str(small)] + words[3:])
    cmd = f"{cmd} --out {shlex.quote(str(out))} -q"
    subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=_env(), check=True)
    return out


def _last(run_dir: Path, column: str, model=None) -> float:
    m = pd.read_csv(Path(run_dir) / "metrics.csv")
    if "model" in m:
        m = m[m["model"] == (0 if model is None or model != model else int(model))]
    v = pd.to_numeric(m[column], errors="coerce").dropna() if column in m else pd.Series(dtype=float)
    return float(v.iloc[-1]) if len(v) else math.nan


def numbers(sweep_dir: Path, metrics: list, target: Optional[float] = None) -> dict:
    """Per condition and metric ("variant=dms, slow_share=0.5 | auc"): the mean over the seeds,
    the spread (max - min) and how many seeds gave a value. A metric is a column of
    analysis.metrics.run_metrics, or `last_COLUMN`: the last value of metrics.csv's COLUMN."""
    import analysis
    from analysis import metrics as AM
    study = analysis.load(sweep_dir, clients=True)
    pr = AM.run_metrics(study, target)
    pr = pr[pr["run"].isin(list(study.runs))]
    axes = [a for a in study.axes if a != "seed"]
    if "model" in pr and pr["model"].notna().any():       # multi-model runs: a row per model
        axes.append("model")
    for m in metrics:
        if m.startswith("last_"):
            pr[m] = [_last(study.runs[r].dir, m[5:], pr["model"].iloc[i] if "model" in pr else None)
                     for i, r in enumerate(pr["run"])]
        elif m not in pr:
            raise ValueError(f"{sweep_dir}: no metric {m!r} (analysis.metrics.run_metrics or last_COLUMN)")
    out = {}
    for key, g in (pr.groupby(axes, sort=True, dropna=False) if axes else [((), pr)]):
        key = key if isinstance(key, tuple) else (key,)
        cond = ", ".join(f"{a}={k}" for a, k in zip(axes, key)) or "all"
        for m in metrics:
            v = pd.to_numeric(g[m], errors="coerce").dropna()
            out[f"{cond} | {m}"] = {"value": float(v.mean()) if len(v) else None,
                                    "spread": float(v.max() - v.min()) if len(v) else None, "seeds": int(len(v))}
    return out


def tolerance(stored: dict, floor: Optional[dict] = None) -> float:
    """The stored number's spread over the seeds, at least the floor."""
    f = {**FLOOR, **(floor or {})}
    return max(stored.get("spread") or 0.0, f["abs"], f["rel"] * abs(stored.get("value") or 0.0))


def drifts(stored: dict, fresh: dict) -> list:
    """The numbers of `fresh` that moved beyond their tolerance from `stored` (each a line
    saying which, by how much, against which tolerance); [] when none did."""
    bad = []
    floor = stored.get("floor")
    for key, s in stored["numbers"].items():
        f = fresh.get(key)
        if f is None:
            bad.append(f"{key}: stored {s['value']}, missing from the fresh run")
            continue
        a, b = s["value"], f["value"]
        if a is None or b is None:
            if (a is None) != (b is None):
                bad.append(f"{key}: stored {a}, now {b} (seeds with a value: {s['seeds']} -> {f['seeds']})")
            continue
        tol = tolerance(s, floor)
        if abs(b - a) > tol or f["seeds"] != s["seeds"]:
            bad.append(f"{key}: stored {a:.6g}, now {b:.6g}, drift {b - a:+.3g} beyond tolerance {tol:.3g} "
                       f"(spread over seeds {s['spread']:.3g}; seeds with a value {s['seeds']} -> {f['seeds']})")
    return bad


def quick_numbers(entry: dict, sweep_dir: Path) -> dict:
    q = entry["quick"]
    return numbers(sweep_dir, q["metrics"], q.get("target"))


def record(entry: dict, out_root: Path = QUICK_RUNS, stored_dir: Path = STORED) -> Path:
    """Run the quick variant and store its numbers, with the commit they were made at."""
    sweep = run_quick(entry, out_root)
    doc = {"name": entry["name"], "page": entry["page"], "command": entry["quick"]["sweep"],
           "made_at": stamp(), "floor": {**FLOOR, **(entry["quick"].get("floor") or {})},
           "numbers": quick_numbers(entry, sweep)}
    p = Path(stored_dir) / f"{entry['name']}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    return p


def check(entry: dict, out_root: Optional[Path] = None, stored_dir: Optional[Path] = None,
          sweep_dir: Optional[Path] = None) -> list:
    """The drift lines of one quick variant (run afresh unless sweep_dir is given)."""
    p = Path(stored_dir or STORED) / f"{entry['name']}.json"
    if not p.exists():
        return [f"no stored numbers {p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}: "
                f"python -m analysis.results record {entry['name']}"]
    stored = json.loads(p.read_text())
    return drifts(stored, quick_numbers(entry, sweep_dir or run_quick(entry, out_root or QUICK_RUNS)))


def _pick(entries: list, names: list) -> list:
    unknown = sorted(set(names) - {e["name"] for e in entries})
    if unknown:
        raise SystemExit(f"unknown result(s) {', '.join(unknown)}; the manifest has: "
                         + ", ".join(e["name"] for e in entries))
    return [e for e in entries if not names or e["name"] in names]


def _full(entries: list) -> int:
    for e in entries:
        if e["kind"] != "result":
            print(f"== {e['name']} ({e['kind']}, {e['page']}): not re-run here; {' && '.join(e['full'])}")
            continue
        print(f"== {e['name']} ({e['page']}; {e.get('cost', '?')})", flush=True)
        for cmd in e["full"]:
            print(f"$ {cmd}", flush=True)
            subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=_env(), check=True)
    return 0


def _check(entries: list) -> int:
    t0, failed = time.monotonic(), 0
    for e in (e for e in entries if e.get("quick")):
        t = time.monotonic()
        bad = check(e)
        failed += bool(bad)
        print(f"{'DRIFT' if bad else 'ok   '} {e['name']} ({time.monotonic() - t:.0f} s): {e['quick']['sweep']}", flush=True)
        for line in bad:
            print(f"    {line}")
    print(f"results-check: {failed} of {sum(1 for e in entries if e.get('quick'))} quick variants drifted "
          f"({time.monotonic() - t0:.0f} s)")
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.results", description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["list", "full", "check", "record"])
    ap.add_argument("names", nargs="*", help="results of the manifest (default: all)")
    a = ap.parse_args(argv)
    entries = _pick(manifest(), a.names)
    if a.action == "list":
        for e in entries:
            q = "quick" if e.get("quick") else "-"
            print(f"{e['name']:<14} {e['kind']:<10} {q:<6} {e['page']}: {e.get('about', '')}")
        return 0
    if a.action == "full":
        return _full(entries)
    if a.action == "record":
        for e in (e for e in entries if e.get("quick")):
            t = time.monotonic()
            print(f"recorded {record(e).relative_to(ROOT)} ({time.monotonic() - t:.0f} s)", flush=True)
        return 0
    return _check(entries)


if __name__ == "__main__":
    sys.exit(main())

"""The tables and figures of docs/studies.md, from the sweep folders of
scenarios/studies/stragglers.yaml and availability.yaml (`make study` runs them, then this):

    python docs/studies_results.py [--stragglers DIR] [--availability DIR]
                                   (defaults runs/studies/stragglers, runs/studies/availability)

1. per sweep, one table: per protocol (variant) and swept value, the virtual time to the
   sweep's target accuracy (mean over the seeds that reached it, and how many did), the
   time-averaged accuracy over the run (AUC) and the straggler share (analysis.metrics: the
   numbers `flemu compare` prints); each table states the commit it was made at (HEAD, and
   whether the tree had uncommitted changes), the seeds and the command;
2. rewrites the page's generated blocks (between `<!-- BEGIN stragglers-table -->` and
   `<!-- END stragglers-table -->`, and the same for `availability-table`) with them;
3. draws docs/figures/stragglers_accuracy_vs_time.png (test accuracy against virtual time,
   one panel per slow share) and stragglers_latency.png (the round-latency breakdown).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PAGE = ROOT / "docs" / "studies.md"
FIGURES = ROOT / "docs" / "figures"
VARIANTS = ["fedavg_all", "fedavg_deadline", "tsfl_dms", "fedasync"]
SWEEPS = {"stragglers": ("slow_share", "slow share", "scenarios/studies/stragglers.yaml"),
          "availability": ("clients.groups[*].availability", "availability", "scenarios/studies/availability.yaml")}


def short(value) -> str:
    """An axis value as a column title: `{model: markov, p_on_off: 0.2, ...}` -> `markov (p_on_off 0.2, ...)`."""
    s = str(value)
    m = re.fullmatch(r"\{'?model'?: '?(\w+)'?,? ?(.*)\}", s)
    if not m:
        return s
    rest = re.sub(r"'", "", m.group(2))
    return m.group(1) + (f" ({rest.replace(': ', ' ')})" if rest else "")


def cells(sweep: Path, axis: str) -> tuple:
    """Per (variant, axis value): reached, runs, time to target (mean over the seeds that
    reached it), AUC and straggler share (means over the seeds); the target; the seeds."""
    import analysis
    from analysis import metrics as AM
    study = analysis.load(sweep)
    target = study.target
    pr = AM.run_metrics(study, target)
    rows = {}
    for (v, a), g in pr.groupby(["variant", axis], sort=False):
        t = g["time_to_target"].dropna()
        rows[(v, str(a))] = {"runs": len(g), "reached": len(t), "time": float(t.mean()) if len(t) else np.nan,
                             "auc": float(g["auc"].mean()), "straggler": float(g["straggler_share"].mean()),
                             "rounds": bool((g["protocol"] == "rounds").all())}
    seeds = sorted(int(s) for s in pr["seed"].unique())
    return rows, target, seeds, list(dict.fromkeys(str(a) for a in pr[axis]))


def table(name: str, sweep: Path) -> str:
    """The Markdown block of one sweep: the stamp line, then the table."""
    from analysis.results import stamp_text
    axis, title, file = SWEEPS[name]
    rows, target, seeds, values = cells(sweep, axis)
    pct = f"{100 * target:g} %"
    lines = [f"*Made at {stamp_text()} by `flemu sweep {file}` (seeds {', '.join(map(str, seeds))}), then "
             f"`python docs/studies_results.py`.* Each cell: virtual time to {pct} test accuracy (mean over the "
             f"seeds that reached it; how many did), the time-averaged accuracy over the run (AUC) and the "
             f"straggler share (the share of each round the server waited after the median client had finished; "
             f"rounds only: intervals and FedAsync wait for no one).", "",
             "| | " + " | ".join(f"{title} {short(v)}" if name == "stragglers" else short(v) for v in values) + " |",
             "|---|" + "---|" * len(values)]
    for v in VARIANTS:
        out = []
        for a in values:
            c = rows.get((v, a))
            if c is None:
                out.append("–")
                continue
            t = f"{c['time']:.1f} s" if c["reached"] else "not reached"
            wait = f", straggler {c['straggler']:.2f}" if c["rounds"] else ""
            out.append(f"{t} ({c['reached']}/{c['runs']}), AUC {c['auc']:.2f}{wait}")
        lines.append(f"| `{v}` | " + " | ".join(out) + " |")
    return "\n".join(lines)


def write_block(page_text: str, key: str, body: str) -> str:
    begin, end = f"<!-- BEGIN {key} -->", f"<!-- END {key} -->"
    pat = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pat.search(page_text):
        raise SystemExit(f"{PAGE}: no {begin} ... {end} block")
    return pat.sub(lambda _: f"{begin}\n{body}\n\n{end}", page_text)


def figures(sweep: Path) -> None:
    import analysis
    from analysis import plots as P
    study = analysis.load(sweep)
    for f in ("stragglers_accuracy_vs_time.png", "stragglers_latency.png"):
        (FIGURES / f).unlink(missing_ok=True)          # committed figures: this script owns them
    P.curves(study, hue="variant", col="slow_share", target=study.target,
             out=FIGURES / "stragglers_accuracy_vs_time.png")
    P.latency_breakdown(study, out=FIGURES / "stragglers_latency.png")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stragglers", type=Path, default=ROOT / "runs" / "studies" / "stragglers")
    ap.add_argument("--availability", type=Path, default=ROOT / "runs" / "studies" / "availability")
    a = ap.parse_args(argv)
    text = PAGE.read_text()
    for name, sweep in (("stragglers", a.stragglers), ("availability", a.availability)):
        if not (sweep / "sweep.csv").exists():
            print(f"{sweep}: no sweep folder; {name}'s table left as it is")
            continue
        body = table(name, sweep)
        print(body, end="\n\n")
        text = write_block(text, f"{name}-table", body)
        if name == "stragglers":
            figures(sweep)
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

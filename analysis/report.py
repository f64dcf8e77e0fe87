"""A report of a run or a sweep: one self-contained HTML file (figures embedded), or Markdown
beside its PNG figures.

    analysis.report.write("runs/studies/stragglers")            # -> runs/studies/stragglers/report.html
    analysis.report.write(["runs/a", "runs/b"], out="ab.md")    # Markdown + ab_figures/*.png

Contents: what was run (the base scenario in a few lines and one table of what differs
between the conditions, the swept values, seeds, how many runs finished or failed), the
comparison table (mean ± std over seeds per condition), the figures (accuracy and loss vs
virtual time, accuracy vs rounds, and vs merges for asynchronous runs on an axis of their
own, time to target, round-latency breakdown, local steps per client, participation of every
condition; one colour per condition in every comparison figure, `conditions.palette`), who
the model serves (per device group: shares of the clients, data, selections, weight and
steps; accuracy against virtual time and the per-client accuracy CDFs, one colour per
group), failures with their errors, every run's metrics, and a glossary defining every
column of those tables. Every figure is also written as PNG and SVG under `figures/` next
to the report.
"""
from __future__ import annotations

import base64
import datetime
import html
import math
from pathlib import Path
from typing import Optional

import matplotlib.pyplot as plt
import pandas as pd

from emulator.runs import outputs

from . import conditions as C
from . import fairness_plots as FP
from . import glossary as G
from . import metrics as M
from . import participation_plots as PP
from . import plots as P
from .load import Study, load
from .scenario_table import differences, scenario_section

TABLE_COLUMNS = [("runs", "runs", None), ("reached", "reached", None), ("time_to_target", "time to target (s)", 1),
                 ("rounds_to_target", "rounds to target", 1), ("acc_at_budget", "acc. at budget", 3),
                 ("final_acc", "final acc.", 3), ("auc", "AUC (mean acc.)", 3),
                 ("straggler_share", "straggler share", 2), ("round_time_s", "round time (s)", 2),
                 ("participation_cv", "particip. CV", 2), ("tau_avg", "tau avg", 1), ("heterogeneity", "delta", 2)]

def _fig_bytes(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _num(v, digits):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if digits is None:
        return f"{int(v)}" if float(v).is_integer() else f"{v:g}"
    return f"{v:.{digits}f}"


def comparison_table(cmp: pd.DataFrame, keys) -> pd.DataFrame:
    """The compare frame as strings: mean ± std per metric."""
    keys = list(keys) + (["model"] if "model" in cmp and "model" not in keys else [])   # every model of multi-model runs
    out = pd.DataFrame({_short(k): cmp[k].astype(str) for k in keys})
    for col, title, digits in TABLE_COLUMNS:
        if col in cmp:
            out[title] = [_num(v, digits) for v in cmp[col]]
        elif f"{col}_mean" in cmp:
            out[title] = [(_num(m, digits) + (f" ± {_num(s, digits)}" if s == s and s is not None else ""))
                          if m == m else "-" for m, s in zip(cmp[f"{col}_mean"], cmp.get(f"{col}_std", [math.nan] * len(cmp)))]
    if "failed" in cmp and cmp["failed"].sum():
        out.insert(len(keys) + 1, "failed", cmp["failed"].astype(int).astype(str))
    return out


def _short(path: str) -> str:
    """A column title for a scenario path: its last part (`algorithm.lr` -> `lr`), or the last
    two where the last alone says nothing (`algorithm.name` -> `algorithm.name`)."""
    parts = path.split(".")
    return ".".join(parts[-2:]) if parts[-1] in ("name", "model", "mode") and len(parts) > 1 else parts[-1]


def _figures(study: Study, fig_dir: Path, target, per_run) -> list:
    """[(title, png path, caption)] — each also written as SVG."""
    figs = []

    def add(name, title, caption, fn):
        try:
            fig = fn(fig_dir / name)
        except (ValueError, KeyError) as e:          # a figure that does not apply (e.g. no target)
            figs.append((title, None, f"not drawn: {e}"))
            return
        plt.close(fig)
        figs.append((title, fig_dir / f"{name}.png", caption))
    palette = C.palette(study)            # one colour per condition in every comparison figure
    add("accuracy_vs_time", "Test accuracy vs virtual time",
        "Latency vs accuracy: mean over seeds, band = one standard deviation; dashed: the target.",
        lambda o: P.curves(study, "test_acc", "virtual_time", target=target, out=o, palette=palette))
    _rounds_figures(study, add, target, palette)
    add("loss_vs_time", "Test loss vs virtual time", "",
        lambda o: P.curves(study, "test_loss", "virtual_time", out=o, palette=palette))
    if target is not None:
        add("time_to_target", f"Virtual time to {target:g} test accuracy",
            "Mean over the seeds that reached it; k/n: only k of n seeds did; hatched: none did.",
            lambda o: P.target_bars(study, target=target, per_run=per_run, out=o, palette=palette))
    x = ((study.meta or {}).get("report") or {}).get("x")
    if x and x in study.summary and pd.to_numeric(study.summary[x], errors="coerce").notna().all():
        add(f"times_vs_{x}", f"Virtual time against {x}",
            "The virtual time each run took, and its virtual time to the target accuracy, as the swept axis grows (mean over seeds).",
            lambda o: P.times_vs_axis(study, x=x, target=target, per_run=per_run, out=o, palette=palette))
    add("latency_breakdown", "Round latency breakdown",
        "Seconds per aggregation, mean over the selected clients: computing, communicating, and waiting for the round to close.",
        lambda o: P.latency_breakdown(study, per_run=per_run, out=o))
    if len(study.clients):
        add("local_steps", "Local steps per client", "Steps each client completed in the rounds it was selected "
            "(T-SFL: its iterations tau); mean over seeds, bar: one standard deviation.",
            lambda o: P.local_steps(study, out=o, palette=palette))
        _timeline_figure(study, add)
        add("participation", "Participation of every condition",
            "Per condition, each client's share of the rounds (asynchronous: of its jobs) in which it was offline, "
            "available, aggregated, selected but not aggregated, or dropped; mean over seeds. One run round by "
            "round: flemu plot participation RUN.",
            lambda o: PP.participation_states(study, out=o))
    return figs


def _timeline_figure(study: Study, add) -> None:
    """The timeline of the first run that recorded one (`run.timeline: true`): its first ten
    rounds, at most 40 clients (analysis/timeline.py)."""
    from . import timeline as TL, timeline_draw as TD
    d = next((d for d in study.summary.get("dir", ()) if (Path(d) / "timeline.csv").exists()), None)
    if d is not None:
        add("timeline", f"Timeline: {Path(d).name}",
            "What each client did when (first ten rounds): download, compute, upload, late or cut, offline, idle; "
            "solid lines: aggregations, dashed: deadlines. `flemu timeline RUN` draws any window.",
            lambda o: TD.gantt(TL.load(d, (1, 10), 40), o))


def _rounds_figures(study: Study, add, target, palette) -> None:
    """Accuracy against aggregations: synchronous runs against rounds; runs whose protocol
    merges every arrival (asynchronous) against merges, a figure of their own, so that a few
    thousand merges do not squeeze the rounds to a line at 0."""
    merges = C.merge_runs(study)
    rounds = [r for r in study.runs if r not in merges]
    if rounds:
        add("accuracy_vs_rounds", "Test accuracy vs rounds",
            "The synchronous runs against aggregations (rounds)" + (
                "; asynchronous runs merge every arrival and are drawn against merges below." if merges else "."),
            lambda o: P.curves(study, "test_acc", "round", target=target, out=o, palette=palette, runs=rounds))
    if merges:
        add("accuracy_vs_merges", "Test accuracy vs merges (asynchronous)",
            "The asynchronous runs against the server's merges (one per arriving update): not comparable to rounds.",
            lambda o: P.curves(study, "test_acc", "round", target=target, out=o, palette=palette, runs=merges,
                               xlabel="merges (one per arriving update)"))


def write(paths, out=None, fmt: Optional[str] = None, target: Optional[float] = None,
          budget: Optional[float] = None, figures: bool = True) -> Path:
    """Write the report; returns its path. `fmt`: html (default) or md (also from `out`'s
    suffix); `figures=False`: the text and tables only (quick)."""
    study = paths if isinstance(paths, Study) else load(paths)
    if out is None:
        base = Path(study.paths[0]) if len(study.paths) == 1 else Path(".")
        out = base / ("report.md" if fmt == "md" else "report.html")
    out = Path(out)
    fmt = fmt or ("md" if out.suffix.lower() in (".md", ".markdown") else "html")
    fig_dir = out.parent / ("figures" if out.stem == "report" else f"{out.stem}_figures")
    outputs.check_file_target(out, "report")            # flemu's own files only; nothing written else
    outputs.check_figure_dir(fig_dir, "report figures folder")
    fig_dir.mkdir(parents=True, exist_ok=True)
    target = target if target is not None else study.target
    per_run = M.run_metrics(study, target=target, budget=budget)
    cmp = M.compare(study, target=target, budget=budget, per_run=per_run)
    keys = (study.axes if study.axes else ["condition"])
    table = comparison_table(cmp, keys)
    figs = _figures(study, fig_dir, target, per_run) if figures else []
    serves = FP.report_section(study, fig_dir, cmp, keys) if figures else None    # who the model serves
    failed = M.left_out(study)             # failed, invalid, empty, crashed: out of the tables, with why
    first = next(iter(study.runs.values()), None)
    title = study.meta.get("name") or (first.name if first is not None and len(study.runs) == 1 else "flemu runs")
    facts = _facts(study, target, budget)
    scen, diffs = scenario_section(study), differences(study)
    runs = every_run_table(per_run[per_run["status"].isin(M.FINISHED)], study.axes)
    gloss = glossary(study, diffs, table, serves, failed, runs)
    if fmt == "md":
        text = _markdown(title, facts, scen, table, figs, failed, runs, out, serves, diffs=diffs, gloss=gloss)
    else:
        text = _html(title, facts, scen, table, figs, failed, runs, serves, diffs=diffs, gloss=gloss)
    out.write_text(f"{outputs.REPORT_MARK}\n{text}")    # the mark: flemu may replace it next time
    return out


def glossary(study: Study, diffs, table, serves, failed, runs) -> list:
    """[(column header, definition)] of every column of every table the report shows."""
    tables = [diffs, table, serves[1] if serves is not None else None,
              failed[["run", "status", "error"]] if len(failed) else None, runs]
    return G.entries(tables, axes=study.axes, paths=list(diffs.columns[1:]))


RUN_COLUMNS = [("seed", "seed", None), ("status", "status", None), ("final_acc", "final acc.", 3),
               ("time_to_target", "time to target (s)", 1), ("rounds_to_target", "rounds to target", None),
               ("auc", "AUC", 3), ("straggler_share", "straggler share", 2), ("round_time_s", "round time (s)", 2),
               ("tau_avg", "tau avg", 1), ("heterogeneity", "delta", 2), ("wall_time", "wall (s)", 1)]


def every_run_table(per_run: pd.DataFrame, axes) -> pd.DataFrame:
    """One row per run, as strings under short headers that wrap at spaces, so that the table
    fits a 1280-pixel window: the run, its swept values (by their last path part), then the
    figures of merit rounded for reading (the CSV of `flemu compare` keeps every digit)."""
    out = pd.DataFrame({"run": per_run["run"].astype(str)})
    for a in axes:
        out[a.split(".")[-1]] = per_run[a].astype(str)
    for col, title, digits in RUN_COLUMNS:
        if col in per_run:
            out[title] = [v if isinstance(v, str) else _num(v, digits) for v in per_run[col]]
    if "model" in per_run and per_run["model"].notna().any():
        out.insert(1, "model", [_num(v, None) for v in per_run["model"]])
    return out


def _facts(study: Study, target, budget) -> list:
    s = study.summary
    counts = s["status"].value_counts().to_dict()
    facts = [f"source: {', '.join(str(p) for p in study.paths)}",
             f"runs: {len(s)} ({', '.join(f'{v} {k}' for k, v in counts.items())})"]
    if study.meta.get("description"):
        facts.insert(0, str(study.meta["description"]).strip())
    for a in study.axes:
        facts.append(f"swept {a}: {', '.join(str(v) for v in dict.fromkeys(s[a]))}")
    if "seed" in s and s["seed"].nunique() > 1:
        facts.append(f"seeds: {', '.join(str(v) for v in sorted(s['seed'].dropna().unique()))} (bands and ± are one standard deviation over seeds)")
    if target is not None:
        facts.append(f"target accuracy: {target:g}")
    if budget is not None:
        facts.append(f"time budget: {budget:g} s")
    facts.append(f"generated {datetime.datetime.now().isoformat(timespec='seconds')} by flemu report")
    return facts


CSS = """body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}th,td{border:1px solid #ddd;padding:.25em .5em;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}figure{margin:1em 0}figcaption{color:#555;font-size:.9em}
img{max-width:100%}.err{color:#b00}.wide{overflow-x:auto}table.runs td{font-size:.95em}code{background:#f4f4f4;padding:0 .2em}ul{line-height:1.5}
table.differences td{text-align:left}dl.glossary dt{font-weight:bold}dl.glossary dd{margin:0 0 .4em 1.5em}"""


def _html_figures(figs, e) -> list:
    parts = []
    for t, p, cap in figs:
        if p is None:
            parts.append(f"<p><b>{e(t)}</b>: {e(cap)}</p>")
            continue
        parts.append(f"<figure><h3>{e(t)}</h3><img alt='{e(t)}' src='data:image/png;base64,{_fig_bytes(p)}'>"
                     f"<figcaption>{e(cap)} (<a href='{e(p.parent.name)}/{e(p.stem)}.svg'>SVG</a>)</figcaption></figure>")
    return parts


def _html_scenario(scen, diffs, e) -> list:
    """The scenario section: what every run shares, then the table of what differs."""
    if not scen:
        return []
    parts = ["<h2>Scenario</h2>" + "".join(
        f"<h3>{e(str(head))}</h3><ul>" + "".join(f"<li>{e(x)}</li>" for x in lines) + "</ul>" for head, lines in scen)]
    if diffs is not None and len(diffs):
        parts.append("<h3>what differs between the conditions</h3><div class='wide'>"
                     + html_table(diffs, "differences") + "</div>")
    return parts


def _html_glossary(gloss, e) -> str:
    return ("<h2>Glossary</h2><p>Every column of the tables above.</p><dl class='glossary'>"
            + "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in gloss) + "</dl>")


def _html(title, facts, scen, table, figs, failed, runs, serves=None, diffs=None, gloss=()) -> str:
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>flemu report: {e(str(title))}</h1><ul>" + "".join(f"<li>{e(f)}</li>" for f in facts) + "</ul>"]
    parts += _html_scenario(scen, diffs, e)
    parts.append("<h2>Comparison</h2>" + table.to_html(index=False, escape=True, border=0))
    parts.append("<h2>Figures</h2>")
    parts += _html_figures(figs, e)
    if serves is not None:
        text, gt, sfigs = serves
        parts.append("<h2>Who the model serves</h2>" + "".join(f"<p>{e(x)}</p>" for x in text))
        if len(gt):
            parts.append("<div class='wide'>" + html_table(gt, "groups") + "</div>")
        parts += _html_figures(sfigs, e)
    if len(failed):
        parts.append("<h2>Runs left out</h2>" + failed[["run", "status", "error"]].to_html(index=False, escape=True, border=0,
                                                                                        classes="err"))
    parts.append("<h2>Every run</h2><div class='wide'>" + html_table(runs, "runs") + "</div>")
    parts.append(_html_glossary(gloss, e))
    parts.append("</body></html>")
    return "\n".join(parts)


BREAK_AFTER = "_=·/-"


def html_table(df: pd.DataFrame, cls: str = "") -> str:
    """A table of strings; long identifiers get a line-break opportunity (<wbr>) after each
    of `_ = · / -`, so a run id wraps instead of widening its column."""
    def cell(v):
        t = html.escape(str(v))
        for ch in BREAK_AFTER:
            t = t.replace(ch, ch + "<wbr>")
        return t
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in df.itertuples(index=False))
    return f"<table class='{cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def md_table(df: pd.DataFrame) -> str:
    def cell(v):
        if isinstance(v, float):
            return "-" if math.isnan(v) else f"{v:.4g}"
        return str(v).replace("|", "\\|")
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def _markdown(title, facts, scen, table, figs, failed, runs, out: Path, serves=None, diffs=None, gloss=()) -> str:
    parts = [f"# flemu report: {title}", "", *[f"- {f}" for f in facts], ""]
    if scen:
        parts += ["## Scenario", ""]
        for head, lines in scen:
            parts += [f"### {head}", "", *[f"- {x}" for x in lines], ""]
        if diffs is not None and len(diffs):
            parts += ["### what differs between the conditions", "", md_table(diffs), ""]
    parts += ["## Comparison", "", md_table(table), "", "## Figures", ""]
    for t, p, cap in figs:
        if p is None:
            parts += [f"**{t}**: {cap}", ""]
            continue
        rel = p.relative_to(out.parent)
        parts += [f"### {t}", "", f"![{t}]({rel.as_posix()})", "", cap, ""]
    if serves is not None:
        text, gt, sfigs = serves
        parts += ["## Who the model serves", "", *[f"{x}\n" for x in text]] + ([md_table(gt), ""] if len(gt) else [])
        for t, p, cap in sfigs:
            parts += [f"**{t}**: {cap}", ""] if p is None else \
                [f"### {t}", "", f"![{t}]({p.relative_to(out.parent).as_posix()})", "", cap, ""]
    if len(failed):
        parts += ["## Runs left out", "", md_table(failed[["run", "status", "error"]]), ""]
    parts += ["## Every run", "", md_table(runs), "", "## Glossary", "", "Every column of the tables above.", "",
              *[f"- **{k}**: {v}" for k, v in gloss], ""]
    return "\n".join(parts)

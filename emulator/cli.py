"""The `flemu` command line: run, validate, list, plot, timeline, trace, sweep, compare, report.

`flemu run FILE [--set k=v]... [--out DIR] [--seed N]` runs a scenario with a progress bar;
`flemu validate FILE` checks it; `flemu list [what]` lists every registered component with
its parameters; `flemu plot RUN_DIR` draws accuracy against virtual time.
(The CLI is the application shell: it is the one place in `emulator` that reaches into
`analysis`, and only inside the commands that draw.)
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

from .cli_common import fail as _fail, out

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="flemu: discrete-event emulator of heterogeneous federated learning.")
console = Console(stderr=True)


def _plugin_option():
    return typer.Option([], "--plugin", help="a .py file or module that registers your own components (repeatable)")


def _allow_changed_option():
    return typer.Option(False, "--allow-changed-inputs",
                        help="replay: run with data and trace files whose SHA-256 differs from the recorded one")


def _trust_option():
    return typer.Option([], "--trust-changed-plugins", metavar="NAME",
                        help="replay: import this plugin although its SHA-256 differs from the recorded one "
                             "(module name, file name or path; repeatable)")


def _replay(allow: bool, trust: List[str]):
    from .scenario.inputs import Replay
    return Replay(allow_changed=allow, trust=tuple(trust))


@app.command()
def run(file: Path = typer.Argument(..., help="scenario YAML"),
        set_: List[str] = typer.Option([], "--set", help="override a field: path=value (repeatable)"),
        out_dir: Optional[Path] = typer.Option(None, "--out", help="run directory (default: output.dir)"),
        seed: Optional[int] = typer.Option(None, "--seed", help="override the seed"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
        plugin: List[str] = _plugin_option(),
        allow_changed_inputs: bool = _allow_changed_option(),
        trust_changed_plugins: List[str] = _trust_option()):
    """Run a scenario and write its run directory (a run's config.yaml replays it: its input
    files are found from any folder and checked against their recorded SHA-256)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .runs import outcome, outputs
    from .scenario import schema as sc_mod
    from .errors import FlemuError, ScenarioError
    from .runs.runner import run as run_scenario

    try:
        sc = sc_mod.load(file, set_, seed, plugins=plugin, replay=_replay(allow_changed_inputs, trust_changed_plugins))
        outputs.check_run_target(out_dir if out_dir is not None else Path(sc.output.dir or f"runs/{sc.name}"),
                                 "--out" if out_dir is not None else "output.dir" if sc.output.dir else "run directory")
    except FlemuError as e:
        _fail(e)
    total = sc.run.rounds
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), console=console, disable=quiet, transient=False) as prog:
        bar = prog.add_task(sc.name, total=total if total else sc.run.virtual_time, info="")

        def on_row(row):
            acc = row.get("test_acc")
            info = f"round {row['round']}  t={row['virtual_time']:.1f}s"
            if acc is not None and not (isinstance(acc, float) and math.isnan(acc)):
                info += f"  acc={acc:.4f}"
            elif row.get("test_loss") is not None:
                info += f"  loss={row['test_loss']:.4g}"
            prog.update(bar, completed=row["round"] if total else min(row["virtual_time"], sc.run.virtual_time),
                        info=info)

        try:
            res = run_scenario(sc, out=out_dir, progress=on_row)
        except (ScenarioError, outputs.OutputError) as e:
            _fail(e)
    s = res.summary
    line = f"{s['status']}: {s['rounds']} aggregations, {s['virtual_time']:.1f} virtual s, {s['wall_time']:.1f} wall s"
    if "final_test_acc" in s:
        line += f", test acc {s['final_test_acc']:.4f} (best {s['best_test_acc']:.4f})"
    out.print(line, highlight=False)
    out.print(f"run directory: {res.run_dir}", highlight=False)
    for w in outcome.warnings(s):
        console.print(w, style="yellow", highlight=False, markup=False, soft_wrap=True)
    if outcome.EXIT[s["status"]]:           # failed 2, diverged 3, invalid 4 (docs/reliability.md)
        console.print(s["message"], style="red", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(code=outcome.EXIT[s["status"]])


@app.command()
def validate(file: Path = typer.Argument(..., help="scenario YAML"),
             set_: List[str] = typer.Option([], "--set", help="override a field: path=value"),
             show: bool = typer.Option(False, "--show", help="print the resolved scenario"),
             plugin: List[str] = _plugin_option(),
             allow_changed_inputs: bool = _allow_changed_option(),
             trust_changed_plugins: List[str] = _trust_option()):
    """Check a scenario without running it."""
    from .scenario import schema as sc_mod
    from .errors import ScenarioError

    try:
        sc = sc_mod.load(file, set_, plugins=plugin, replay=_replay(allow_changed_inputs, trust_changed_plugins))
    except ScenarioError as e:
        _fail(e)
    if show:
        out.print(sc_mod.to_yaml(sc), highlight=False, markup=False)
    out.print(f"{file}: valid", highlight=False)


@app.command("list")
def list_(what: Optional[str] = typer.Argument(None, help="algorithms | datasets | partitions | models | "
                                                         "protocols | devices | executors | selection | callbacks | codecs"),
          name: Optional[str] = typer.Argument(None, help="one component: every parameter in full"),
          plugin: List[str] = _plugin_option()):
    """List registered components (yours included) with a one-line description and their
    parameters; `flemu list KIND NAME` shows one component in full."""
    from . import listing, plugins, registry
    from .errors import ScenarioError

    try:
        registry.load_all()                  # built-ins and installed plugins (entry points)
        plugins.load(plugin, None, "--plugin")
    except ScenarioError as e:
        _fail(e)
    if what is None:
        kinds = list(registry.KINDS)
    else:
        kinds = listing.kinds_of(what)
        if kinds is None:
            _fail(f"unknown list {what!r}; one of: {', '.join(listing.GROUPS)}")
    if name is not None:
        found = [k for k in kinds if name in registry.table(k)]
        if not found:
            known = sorted({n for k in kinds for n in registry.table(k)})
            _fail(f"unknown {what} {name!r}; known: {', '.join(known)}{listing.closest(name, known)}")
        for kind in found:
            listing.show_one(out, registry.get(kind, name))
        return
    for kind in kinds:
        t = Table(title=registry.KINDS[kind], title_justify="left", show_lines=False)
        for col, style in (("name", "bold"), ("description", None), ("parameters", None)):
            t.add_column(col, style=style)
        for n, e in sorted(registry.table(kind).items()):
            t.add_row(n + ("" if e.origin == "built-in" else " (plugin)"), e.description, listing.param_text(e.params))
        out.print(t)


PLOTS = ("accuracy", "participation", "fairness")


@app.command(context_settings={"allow_extra_args": False})
def plot(args: List[str] = typer.Argument(..., metavar="[accuracy|participation|fairness] RUN_DIR...",
                                          help="what to draw (default accuracy), then run directories"),
         out_file: Path = typer.Option(None, "--out", "-o", help="PNG to write (default: inside the first run directory)"),
         x: str = typer.Option("virtual_time", help="accuracy: x axis virtual_time | round"),
         y: str = typer.Option("test_acc", help="accuracy: metric test_acc | test_loss | train_loss | gap ...")):
    """Draw a metric against virtual time or rounds (`accuracy`), the participation raster
    (clients x rounds, coloured offline / available / aggregated / dropped), or whom the model
    serves (`fairness`: accuracy per device group, per-client accuracy CDFs, participation shares)."""
    from analysis import fairness_plots, plots

    from .runs import outputs

    kind = args[0] if args and args[0] in PLOTS else "accuracy"
    dirs = [Path(a) for a in (args[1:] if args and args[0] in PLOTS else args)]
    if not dirs:
        _fail("give at least one run directory")
    for d in dirs:
        if not (d / "metrics.csv").exists():
            _fail(f"{d} is not a run directory (no metrics.csv)")
    if kind in ("participation", "fairness"):
        target = out_file or dirs[0] / f"{kind}.png"
    else:
        target = out_file or dirs[0] / ("accuracy_vs_time.png" if (x, y) == ("virtual_time", "test_acc")
                                        else f"{y}_vs_{x}.png")
    try:
        formats = None if kind == "participation" else plots.ACCURACY_FORMATS
        for p in plots.targets(target, formats):     # replace only a figure flemu drew; nothing written else
            outputs.check_file_target(p, "--out" if out_file else "figure")
        if kind == "participation":
            plots.participation_raster(dirs[0], target)
        elif kind == "fairness":
            fairness_plots.fairness(dirs, target)
        else:
            plots.accuracy_vs_time(dirs, target, x=x, y=y)
    except (outputs.OutputError, ValueError) as e:
        _fail(e)
    out.print(f"wrote {target}", highlight=False)


from .cli_traces import traces_app  # noqa: E402  (`flemu traces ...`)
from .cli_timeline import timeline, trace  # noqa: E402  (`flemu timeline`, `flemu trace`)

app.command()(timeline)
app.command()(trace)

app.add_typer(traces_app, name="traces")


# --------------------------------------------------------------------------- studies
def _yaml_value(text: str):
    import yaml

    from .scenario.yaml_input import parse
    try:
        return parse(text)
    except (yaml.YAMLError, ValueError):
        return text


@app.command()
def sweep(file: Path = typer.Argument(..., help="sweep file (with `base:`), or a scenario file used as the base"),
          grid: List[str] = typer.Option([], "--grid", help="an axis: path=[v1, v2] (repeatable)"),
          set_: List[str] = typer.Option([], "--set", help="override for every run: path=value (repeatable)"),
          seeds: Optional[str] = typer.Option(None, "--seeds", help="number of seeds n (0..n-1) or a list [0, 7]"),
          out_dir: Optional[Path] = typer.Option(None, "--out", help="sweep folder (default: the file's `out`, else runs/<name>)"),
          backend: Optional[str] = typer.Option(None, "--backend", help="local (a process per run) | ray"),
          workers: Optional[int] = typer.Option(None, "--workers", "-j", help="runs at once (local default: CPU cores)"),
          address: Optional[str] = typer.Option(None, "--address", help="ray: join this cluster (default: start a local instance)"),
          cpus: Optional[float] = typer.Option(None, "--cpus-per-run", help="ray: CPUs reserved per run (default 1)"),
          gpus: Optional[float] = typer.Option(None, "--gpus-per-run", help="ray: GPUs per run (fractions allowed)"),
          threads: Optional[int] = typer.Option(None, "--threads", help="torch threads of every run (default: the scenario's executor.threads, 1 unless it says, as under `flemu run`; a grid or --set on it wins; recorded, and checked on resume)"),
          retry_failed: Optional[bool] = typer.Option(None, "--retry-failed/--skip-failed", help="re-run failed, invalid and empty runs too / not even crashed ones (default: crashed runs only)"),
          rerun_stale: bool = typer.Option(False, "--rerun-stale", help="re-run finished runs whose scenario changed"),
          dry_run: bool = typer.Option(False, "--dry-run", help="list the runs and their state; run nothing"),
          quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
          plugin: List[str] = _plugin_option()):
    """Run a sweep (variants x grid x seeds) into one folder with an index (sweep.csv).
    Re-running it resumes: finished runs are skipped, crashed ones are retried."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from . import sweep as sw
    from .errors import FlemuError

    res_over = {}
    if cpus is not None:
        res_over["num_cpus"] = cpus
    if gpus is not None:
        res_over["num_gpus"] = gpus
    try:
        spec = sw.load_spec(file, grid=grid, sets=set_, seeds=_yaml_value(seeds) if seeds is not None else None,
                            out=out_dir, plugins=plugin)
        if dry_run:
            _show_plan(spec, sw.run_sweep(spec, backend=backend, workers=workers, threads=threads, dry_run=True))
            return
        with Progress(TextColumn(f"[bold]{spec.name}"), BarColumn(), TextColumn("{task.fields[count]}"),
                      TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TextColumn("ETA"),
                      TimeRemainingColumn(), console=console, disable=quiet) as prog:
            bar = prog.add_task(spec.name, total=None, info="planning", count="")

            def on_progress(d):
                info = f"{d['done']} done · {d['failed']} failed · {d['running']} running"
                if d["skipped"]:
                    info += f" · {d['skipped']} already finished"
                n = d["done"] + d["failed"]
                prog.update(bar, total=d["total"], completed=n, info=info, count=f"{n}/{d['total']}")

            res = sw.run_sweep(spec, backend=backend, workers=workers, address=address, resources=res_over or None,
                               threads=threads, retry_failed=retry_failed, rerun_stale=rerun_stale,
                               progress=on_progress)
    except FlemuError as e:
        _fail(e)
    _report_sweep(spec, res)


def _show_plan(spec, res) -> None:
    """`flemu sweep --dry-run`: a table of the planned runs, their axis values and states."""
    cols = ["run", *[a.name for a in spec.axes], "seed", "status"]
    t = Table(title=f"sweep {spec.name}: {len(res.index)} runs in {spec.dir}", title_justify="left")
    for c in cols:
        t.add_column(c)
    for _, r in res.index.iterrows():
        t.add_row(*[str(r[c]) for c in cols])
    out.print(t)


def _report_sweep(spec, res) -> None:
    """The counts of a finished sweep, its folder, and its failures (exit status 1 if any)."""
    from .runs.outputs import RUN_STATUSES
    c = res.counts
    parts = [f"{c[k]} {k}" for k in (*RUN_STATUSES, "pending") if c.get(k)]
    out.print(f"sweep {spec.name}: {len(res.index)} runs: {', '.join(parts)} "
              f"({c['ran']} run now, {c['skipped']} already finished)", highlight=False)
    out.print(f"sweep folder: {res.dir} (index: {res.dir / 'sweep.csv'})", highlight=False)
    failed = res.index[res.index["status"] == "failed"]
    for _, r in failed.head(10).iterrows():
        console.print(f"failed {r['run']}: {r['error']}", style="red", highlight=False, markup=False, soft_wrap=True)
    if len(failed):
        console.print(f"details: {res.dir / 'failures'}/<run>.json (crashed: re-run the command to retry) or the run's "
                      "summary.json (failed: --retry-failed re-runs it)", highlight=False, markup=False)
        raise typer.Exit(code=1)


COMPARE_HEADER = ("runs", "failed")     # columns of every compare.csv: a CSV without them is not flemu's


@app.command()
def compare(dirs: List[Path] = typer.Argument(..., help="run directories and/or sweep folders"),
            target: Optional[float] = typer.Option(None, "--target", help="target accuracy (default: the runs' run.target_accuracy)"),
            budget: Optional[float] = typer.Option(None, "--budget", help="virtual-time budget (s) for accuracy-at-budget"),
            by: List[str] = typer.Option([], "--by", help="group by these columns (default: the swept axes)"),
            csv: Optional[Path] = typer.Option(None, "--csv", help="CSV to write (default: compare.csv beside the first DIR)")):
    """Compare runs: per condition, mean ± std over seeds of time and rounds to target,
    accuracy at a budget, AUC, straggler share, participation and delay figures."""
    from analysis import fairness, metrics as M
    from analysis.load import load
    from analysis.report import comparison_table

    from .runs import outputs

    for d in dirs:
        if not d.exists():
            _fail(f"{d}: no such run directory or sweep folder")
    try:
        study = load(dirs)
        dest = csv or ((dirs[0] if study.kind == "sweep" else dirs[0].parent) / "compare.csv")
        outputs.check_file_target(dest, "--csv" if csv else "compare CSV", csv_columns=COMPARE_HEADER)
    except (FileNotFoundError, ValueError, outputs.OutputError) as e:
        _fail(str(e))
    per_run = M.run_metrics(study, target=target, budget=budget)
    try:
        cmp = M.compare(study, target=target, budget=budget, by=by or None, per_run=per_run)
    except ValueError as e:
        _fail(str(e))
    keys = list(by) if by else (study.axes or ["condition"])
    table = comparison_table(cmp, keys)
    wide = ["acc. at budget", "round time (s)", "particip. CV", "tau avg", "delta"]   # in the CSV
    table = table[[c for c in table.columns if c not in wide or (c == "acc. at budget" and budget is not None)]]
    _print_frame(table, f"{len(per_run)} runs" + (f", target {study.target if target is None else target}"
                                                  if (target is not None or study.target is not None) else ""))
    for line in M.left_out_lines(study):      # failed, invalid, empty or crashed runs: which and why
        console.print(line, style="yellow", highlight=False, markup=False, soft_wrap=True)
    names = fairness.groups(study)
    if len(names) > 1:          # who took part (and whom the model serves), per device group
        _print_frame(fairness.group_table(cmp, keys, names), "per device group: share of the clients, the data, "
                     "the selections, the aggregated weight, the SGD steps; last evaluated client accuracy")
    cmp.to_csv(dest, index=False)
    out.print(f"wrote {dest}", highlight=False)


def _print_frame(df, title: str) -> None:
    t = Table(title=title, title_justify="left")
    for c in df.columns:
        t.add_column(str(c), overflow="fold")
    for row in df.itertuples(index=False):
        t.add_row(*[str(v) for v in row])
    out.print(t)


@app.command()
def report(dirs: List[Path] = typer.Argument(..., help="a sweep folder, or run directories"),
           out_file: Optional[Path] = typer.Option(None, "--out", "-o", help="report file (.html or .md; default DIR/report.html)"),
           fmt: Optional[str] = typer.Option(None, "--format", help="html | md"),
           target: Optional[float] = typer.Option(None, "--target", help="target accuracy"),
           budget: Optional[float] = typer.Option(None, "--budget", help="virtual-time budget (s)")):
    """Write a self-contained HTML report (figures embedded; PNG + SVG also under figures/),
    or Markdown beside its PNG figures."""
    from analysis import report as R
    from .runs.outputs import OutputError

    if fmt is not None and fmt not in ("html", "md"):
        _fail(f"--format must be html or md, got {fmt!r}")
    for d in dirs:
        if not d.exists():
            _fail(f"{d}: no such run directory or sweep folder")
    try:
        path = R.write(dirs if len(dirs) > 1 else dirs[0], out=out_file, fmt=fmt, target=target, budget=budget)
    except (FileNotFoundError, ValueError, OutputError) as e:
        _fail(str(e))
    out.print(f"wrote {path}", highlight=False)


def main():
    app()


if __name__ == "__main__":
    main()

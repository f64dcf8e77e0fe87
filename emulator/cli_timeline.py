"""`flemu timeline RUN` and `flemu trace RUN -o run.json`: a run's timeline drawn (PNG and an
interactive HTML page) or exported in the Chrome Trace Event format (analysis/timeline.py,
analysis/timeline_draw.py, analysis/trace_export.py), from the run directory only: its
timeline.csv, written when the scenario sets `run.timeline: true`. The commands reach into
`analysis` only when they run, as `flemu plot` does.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .cli_common import fail as _fail, out

ROUNDS_HELP = "a window of rounds FIRST:LAST (e.g. 3:8; 5; 3: or :8), from FIRST's start to LAST's aggregation"
CLIENTS_HELP = "at most this many clients, taken in turn from each device group"
TIMELINE_CLIENTS_HELP = ("at most this many clients, taken in turn from each device group "
                         "(default 200; a line says how many were left out)")


def _load(run_dir: Path, rounds: Optional[str], clients: Optional[int]):
    """The run's timeline in the window asked for; exit 2 with one clear message on bad input."""
    from analysis import timeline as T

    if not (run_dir / "metrics.csv").exists():
        _fail(f"{run_dir} is not a run directory (no metrics.csv)")
    try:
        return T.load(run_dir, T.parse_rounds(rounds), clients)
    except (ValueError, OSError) as e:
        _fail(e)


def timeline(run_dir: Path = typer.Argument(..., help="run directory (written with run.timeline: true)"),
             out_file: Optional[Path] = typer.Option(None, "--out", "-o",
                                                     help="PNG to write (default RUN/timeline.png); the page beside it, .html"),
             rounds: Optional[str] = typer.Option(None, "--rounds", help=ROUNDS_HELP),
             clients: Optional[int] = typer.Option(None, "--clients", help=TIMELINE_CLIENTS_HELP),
             all_clients: bool = typer.Option(False, "--all-clients", help="draw every client of the run")):
    """Draw what each client did when over virtual time: download, compute, upload, late or
    cut, offline, idle; deadlines and aggregations marked; clients grouped by device group.
    Writes a PNG and a self-contained interactive HTML page (zoom, hover; works offline)."""
    from analysis import timeline as T, timeline_draw
    from .runs import outputs

    if all_clients and clients is not None:
        _fail(f"--clients {clients} and --all-clients: give one of them")
    tl = _load(run_dir, rounds, None if all_clients else (T.DEFAULT_CLIENTS if clients is None else clients))
    png = out_file or run_dir / "timeline.png"
    if png.suffix.lower() != ".png":
        _fail(f"--out {png}: give a .png file (the HTML page is written beside it)")
    page = png.with_suffix(".html")
    try:
        for p, what in ((png, "--out" if out_file else "figure"), (page, "timeline page")):
            outputs.check_file_target(p, what)      # both are flemu's to replace before either is written
        timeline_draw.gantt(tl, png)
        timeline_draw.html(tl, page)
    except (outputs.OutputError, ValueError) as e:
        _fail(e)
    if tl.left_out:
        out.print(f"drew {len(tl.clients):,} of the run's {len(tl.groups):,} clients ({tl.left_out:,} left out, "
                  f"taken in turn from each device group); --clients N or --all-clients to change", highlight=False)
    out.print(f"wrote {png} and {page}", highlight=False)


def trace(run_dir: Path = typer.Argument(..., help="run directory (written with run.timeline: true)"),
          out_file: Path = typer.Option(..., "--out", "-o", help="trace file to write (.json)"),
          rounds: Optional[str] = typer.Option(None, "--rounds", help=ROUNDS_HELP),
          clients: Optional[int] = typer.Option(None, "--clients", help=CLIENTS_HELP)):
    """Export the run's timeline in the Chrome Trace Event format (open it in Perfetto,
    ui.perfetto.dev, or chrome://tracing): a process per device group, a thread per client."""
    from analysis import trace_export
    from .runs import outputs

    if out_file.suffix.lower() != ".json":
        _fail(f"--out {out_file}: give a .json file")
    tl = _load(run_dir, rounds, clients)
    try:
        trace_export.write(tl, out_file)
    except (outputs.OutputError, ValueError) as e:
        _fail(e)
    out.print(f"wrote {out_file}", highlight=False)

"""`flemu traces`: convert device traces to flemu's CSV formats (devices/traces.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .cli_common import fail as _fail, out

traces_app = typer.Typer(help="Convert device traces to flemu's CSV formats.", no_args_is_help=True)


@traces_app.command("import-fedscale")
def import_fedscale(capacity: Optional[Path] = typer.Option(None, help="FedScale client_device_capacity pickle"),
                    behaviour: Optional[Path] = typer.Option(None, help="FedScale client_behave_trace pickle"),
                    out_dir: Path = typer.Option(Path("traces"), "--out", help="folder for the CSV files")):
    """Convert FedScale's device-capacity and client-behaviour pickles (read with a restricted
    unpickler: only dicts, lists, strings and numbers) to flemu's trace CSVs."""
    import pickle

    from devices.traces import import_fedscale as convert

    if capacity is None and behaviour is None:
        _fail("give --capacity and/or --behaviour")
    for f in (capacity, behaviour):
        if f is not None and not f.exists():
            _fail(f"file not found: {f}")
    from .runs.outputs import OutputError, check_file_target
    targets = ([out_dir / "compute_trace.csv", out_dir / "links.csv"] if capacity is not None else []) + \
        ([out_dir / "availability_trace.csv"] if behaviour is not None else [])
    try:                 # a trace file is the user's data: an existing one is never replaced
        for t in targets:
            check_file_target(t, "--out trace file")
    except OutputError as e:
        _fail(str(e))
    try:
        written = convert(capacity, behaviour, out_dir)
    except (pickle.UnpicklingError, ValueError, KeyError, TypeError) as e:
        _fail(f"cannot convert: {e}")
    for k, v in written.items():
        out.print(f"{k}: {v}", highlight=False)

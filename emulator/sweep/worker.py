"""One sweep run in its own process: `python -m emulator.sweep.worker SCENARIO OUT ERROR_JSON [CPUS]`.

Runs the resolved scenario into OUT (the runner writes it under a temporary name and renames
it when complete). Exit status 0 when the run directory was written (status complete,
diverged or stalled); otherwise 1, with {type, error, detail} in ERROR_JSON. `run_to_files`
is the same for a Ray task: it runs in a private temporary folder and returns the run
directory's files, which the sweep driver writes into the sweep folder.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Optional


def describe(exc: BaseException) -> dict:
    """{type, error (one line), detail (the full text and traceback)}."""
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    one = " ".join(lines) if lines else repr(exc)
    return {"type": type(exc).__name__, "error": f"{type(exc).__name__}: {one}"[:400],
            "detail": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:]}


def run_one(scenario_file: str, out: str, cpus: Optional[int] = None) -> dict:
    """`cpus`: the cores the run may use (the sweep's share: runner.run)."""
    from ..runs.runner import run
    return run(scenario_file, out=out, cpus=cpus).summary


def run_to_files(scenario: dict, run_id: str, plugins: Optional[dict] = None, cpus: Optional[int] = None) -> dict:
    """Run a resolved scenario mapping in a temporary folder; return {"ok", "files": {name:
    bytes}} or {"ok": False, type, error, detail}. `plugins`: {path: text} of the scenario's
    plugin files, shipped with the task (run instead of reading the paths); `cpus`: the
    cores the task reserved. (Used by the Ray backend.)"""
    import shutil

    from ..plugins import receive
    from ..runs.runner import run
    receive(plugins or {})
    tmp = Path(tempfile.mkdtemp(prefix=f"flemu-{run_id[:40]}-"))
    try:
        out = tmp / "run"
        run(scenario, out=out, cpus=cpus)
        files = {}
        for f in sorted(out.rglob("*")):
            if f.is_file():
                files[str(f.relative_to(out))] = f.read_bytes()
        return {"ok": True, "files": files}
    except Exception as e:       # noqa: BLE001 - every failure is recorded with the run
        return {"ok": False, **describe(e)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    scenario_file, out, err_file = argv[:3]
    try:
        run_one(scenario_file, out, int(argv[3]) if len(argv) == 4 else None)
        return 0
    except BaseException as e:   # noqa: BLE001 - the driver records it; the sweep goes on
        rec = describe(e)
        tmp = f"{err_file}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(rec, f)
        os.replace(tmp, err_file)
        print(rec["detail"], file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

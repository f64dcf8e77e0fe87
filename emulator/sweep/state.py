"""Resume state, read from the sweep folder itself: which runs are finished, failed or pending,
and which finished runs are stale (made with a scenario that differs from today's plan).

Every run directory with a run status is finished, whatever the status: a resumed sweep never
re-runs it. Those that `flemu compare` leaves out (`failed`: a broken contract, `invalid`: an
invariant failed, `empty`: nothing aggregated; RETRIED) and the runs that wrote no directory
(a crash, recorded in failures/<id>.json) are re-run only when asked (`--retry-failed`)."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Optional

import yaml

from ..scenario import schema as scn, yaml_input
from ..errors import FlemuError
from ..runs.outputs import LEFT_OUT, RUN_STATUSES

DONE = RUN_STATUSES           # a run directory with a summary: never re-run unless asked
RETRIED = LEFT_OUT            # ... which `--retry-failed` re-runs, with the runs that crashed


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
    """What must match for a finished run to count: everything but where it was written
    (executor.threads included: a run's numbers depend on its torch thread count)."""
    c = copy.deepcopy(cfg)
    c.pop("output", None)
    return c


def _stored_config(path: Path) -> dict:
    """A finished run's config.yaml, resolved again by today's schema: a field added since
    (with its default) is then filled in on both sides and does not make the run stale; a
    config that no longer validates compares as it was stored (and so differs)."""
    try:
        got = yaml_input.parse(path.read_bytes()) or {}
    except (OSError, ValueError, yaml.YAMLError):
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

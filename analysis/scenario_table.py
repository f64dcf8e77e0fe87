"""The report's scenario section: what every run shares, in a few lines, and one compact table
of what sets the conditions apart (a row per condition, a column per scenario setting that
differs between conditions, each condition described by its first run's resolved config.yaml).

A setting that belongs to a component whose name differs between conditions (`algorithm`
fedavg vs fedasync, `protocol.wait` all vs deadline) is folded into that component's column,
`name (setting value, ...)`, so that a change of algorithm is one column, not thirty.
"""
from __future__ import annotations

import pandas as pd

NAME_KEYS = ("name", "model", "mode", "function")      # the keys that name a component block
NOT_SET = "-"


def _scenario_lines(cfg: dict) -> list:
    """A run's scenario in a few lines (workload, clients, protocol, algorithm, stop)."""
    if not cfg:
        return []
    w = cfg.get("workload") or {}
    lines = []
    if w:
        lines.append(f"workload: {w.get('dataset', {}).get('name')} / {w.get('model', {}).get('name')}, "
                     f"partition {(w.get('partition') or {}).get('name', 'default')}, batch {w.get('batch_size')}")
    cl = cfg.get("clients") or {}
    groups = ", ".join(f"{g.get('name')} ({g.get('fraction') or g.get('count')}: compute "
                       f"{(g.get('compute') or {}).get('model')}, availability {(g.get('availability') or {}).get('model', 'always')})"
                       for g in cl.get("groups", []))
    lines.append(f"clients: {cl.get('count')} in groups {groups}")
    lines.append(f"protocol: {_block(cfg.get('protocol'), skip=('name', 'engine'))}")
    lines.append(f"algorithm: {_block(cfg.get('algorithm'), skip=('name',))}")
    r = cfg.get("run") or {}
    stop = ", ".join(f"{k} {v}" for k, v in r.items() if k in ("rounds", "virtual_time", "target_accuracy"))
    lines.append(f"run: {stop}")
    return lines


def _block(b, skip=()) -> str:
    """`name (key value, key value, ...)` of a component block; nested blocks in brackets."""
    if not isinstance(b, dict):
        return str(b)

    def val(v):
        if isinstance(v, dict):
            inner = ", ".join(f"{k} {val(x)}" for k, x in v.items() if x is not None)
            return f"[{inner}]"
        return str(v)
    params = ", ".join(f"{k} {val(v)}" for k, v in b.items() if k not in skip and v is not None and v != {})
    return f"{b.get('name')}" + (f" ({params})" if params else "")



def _leaves(d, prefix="") -> dict:
    """{dotted.path: value} of every scalar in a nested config (list items as [i])."""
    out = {}
    items = d.items() if isinstance(d, dict) else enumerate(d)
    for k, v in items:
        path = f"{prefix}[{k}]" if isinstance(k, int) else (f"{prefix}.{k}" if prefix else str(k))
        if isinstance(v, (dict, list)) and v:
            out.update(_leaves(v, path))
        else:
            out[path] = v
    return out




def _first_configs(study) -> dict:
    """{condition: its first finished-or-not run's config} in the study's order."""
    out = {}
    for _, row in study.summary.iterrows():
        run = study.runs.get(row["run"])
        if run is not None and row["condition"] not in out:
            out[row["condition"]] = run.config or {}
    return out


def scenario_section(study) -> list:
    """[(heading, lines)]: what every run shares (one section; `differences` has the rest)."""
    configs = _first_configs(study)
    if not configs:
        return []
    all_lines = [_scenario_lines(c) for c in configs.values()]
    common = [x for x in all_lines[0] if all(x in lines for lines in all_lines)]
    if len(study.runs) == 1:
        return [("the run", common)]
    if len(configs) == 1 or not differing_paths(study):
        return [("every run (the same scenario)", common)]
    return [("every run", common)]


def _flat(configs: dict) -> dict:
    return {cond: _leaves({k: v for k, v in cfg.items() if k not in ("name", "seed", "output")})
            for cond, cfg in configs.items()}


def differing_paths(study) -> list:
    """The scenario paths (dotted leaves) whose value differs between the conditions."""
    flat = _flat(_first_configs(study))
    return sorted({k for f in flat.values() for k in f if len({str(g.get(k)) for g in flat.values()}) > 1})


def _owner(path: str, blocks) -> str:
    """The column of a differing path: the deepest block (a component whose name differs) it
    lies in, else the path itself."""
    inside = [b for b in blocks if path.startswith(b + ".") or path.startswith(b + "[")]
    return max(inside, key=len) if inside else path


def _cell(flat: dict, column: str, members: list) -> str:
    """`name (setting value, ...)` of a block column, or the value of a single path."""
    if members == [column]:
        v = flat.get(column)
        return NOT_SET if v is None else str(v)
    heads = [p for p in members if p[len(column) + 1:] in NAME_KEYS]
    head = flat.get(heads[0]) if heads else None
    rest = ", ".join(f"{p[len(column) + 1:]} {flat[p]}" for p in members
                     if p not in heads[:1] and flat.get(p) is not None)
    text = NOT_SET if head is None else str(head)
    return f"{text} ({rest})" if rest else text


def differences(study) -> pd.DataFrame:
    """One row per condition, one column per setting that differs between conditions (component
    blocks folded, see the module); empty when the conditions do not differ."""
    configs = _first_configs(study)
    paths = differing_paths(study) if len(configs) > 1 else []
    if not paths:
        return pd.DataFrame()
    blocks = {p.rsplit(".", 1)[0] for p in paths if "." in p and p.rsplit(".", 1)[1] in NAME_KEYS}
    columns: dict = {}
    for p in paths:
        columns.setdefault(_owner(p, blocks), []).append(p)
    flat = _flat(configs)
    rows = [{"condition": str(cond), **{c: _cell(flat[cond], c, m) for c, m in columns.items()}}
            for cond in configs]
    return pd.DataFrame(rows, columns=["condition", *columns])

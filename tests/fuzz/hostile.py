"""Hostile input drawn from valid scenarios (issue 28): what a careless or hostile user types.

- `hostile_number`: one numeric field of a time model (a group's compute / network /
  availability / energy block, the fleet-wide network settings, the run's time budget) set to
  inf, -inf, NaN, or an extreme its bounds refuse (1e300, -1e300, 2**62, 1e-320, -1e-320);
  a probability spec set to a distribution with a NaN or a negative parameter;
- `broken_trace`: one trace CSV of the scenario cut to its header, given a short row, or a
  non-finite / negative / non-numeric value in its first data row;
- `hostile_name`: the scenario's name with a path separator, a NUL or nothing;
- `hostile_npz`: the arrays of an .npz with a negative, huge or fractional label, a test set
  of another shape, or nothing in it;
- `hostile_pickle`: a FedScale capacity pickle nested too deep, with a length field claiming
  2^40 bytes, a NaN / inf capacity, a global, or cut short.
Each comes with the YAML path (or words) its one error must name.
"""
from __future__ import annotations

import copy
import io
import math
import pickle
import struct
import typing
from dataclasses import dataclass

import numpy as np
from hypothesis import assume, strategies as st

from .malformed import _scalar_type, _set, fmt, walk
from .scenarios import Drawn

NONFINITE = (math.inf, -math.inf, math.nan)


@dataclass
class Hostile:
    drawn: Drawn
    path: str             # the YAML path the one error names
    detail: str = ""

    def __repr__(self):
        return f"at {self.path} ({self.detail}){self.drawn!r}"


def _time_model_leaf(keys) -> bool:
    """A field of a time model: clients.groups[i].(compute|network|availability|energy).x,
    network.x (fleet-wide), run.virtual_time / run.eval_every_seconds."""
    if keys[:2] == ["clients", "groups"] and len(keys) >= 5:
        return keys[3] in ("compute", "network", "availability", "energy")
    if keys[:1] == ["network"] and len(keys) >= 2:
        return True
    return keys[:1] == ["run"] and keys[-1] in ("virtual_time", "eval_every_seconds")


def _extremes(field, kind) -> list:
    """Finite values the field's bounds refuse."""
    lows = [getattr(m, k) for m in field.metadata for k in ("gt", "ge") if getattr(m, k, None) is not None]
    highs = [getattr(m, k) for m in field.metadata for k in ("lt", "le") if getattr(m, k, None) is not None]
    resolved = any(getattr(getattr(m, "func", None), "__name__", "") == "_resolved" for m in field.metadata)
    out = []
    if highs:
        out += [1e300] + ([2 ** 62] if kind == "int" and max(highs) < 2 ** 62 else [])
    if lows:
        out.append(-1e300)
        if min(lows) >= 0 and kind == "float":
            out.append(-1e-320)
        if min(lows) >= 1e-6 or kind == "int":
            out.append(1e-320)
    elif resolved:
        out.append(1e-320)
    if resolved and 1e-320 not in out:
        out.append(1e-320)
    return out


def number_candidates(raw) -> list:
    """(keys, hostile value) for every numeric field of a time model in the scenario `raw`."""
    from emulator.scenario import schema as scenario
    cands = []
    for n in walk(raw, scenario.schema()):
        if not n.field or not _time_model_leaf(n.keys):
            continue
        f = n.model.model_fields[n.field]
        kind = _scalar_type(f.annotation)
        if kind in ("int", "float"):
            cands += [(n.keys, v) for v in (*NONFINITE, *_extremes(f, kind))]
        elif n.field == "p" and f.annotation is typing.Any:
            cands += [(n.keys, v) for v in ({"uniform": [math.nan, 1.0]}, {"beta": [-1.0, 2.0]},
                                            {"beta": [1.0, math.inf]}, [0.5, math.nan], -0.5)]
    return cands


def with_value(raw, keys, value) -> dict:
    out = copy.deepcopy(raw)
    _set(out, keys, value)
    return out


@st.composite
def hostile_number(draw, valid) -> Hostile:
    d = draw(valid)
    cands = number_candidates(d.scenario)
    assume(cands)
    keys, bad = draw(st.sampled_from(cands))
    return Hostile(Drawn(with_value(d.scenario, keys, bad), d.files), fmt(keys), f"-> {bad!r}")


TRACE_MODELS = {("compute", "trace"), ("network", "link_trace"), ("availability", "trace"),
                ("availability", "round_trace")}


def _break_csv(text: str, how: str, column: int) -> str:
    lines = text.splitlines()
    header, first = lines[0], lines[1].split(",")
    if how == "header only":
        return header + "\n"
    if how == "short row":
        return "\n".join([header, ",".join(first[:-1])] + lines[2:]) + "\n"
    first[column] = how
    return "\n".join([header, ",".join(first)] + lines[2:]) + "\n"


@st.composite
def broken_trace(draw, valid) -> Hostile:
    d = draw(valid)
    cands = []
    for gi, g in enumerate(d.scenario["clients"]["groups"]):
        for block in ("compute", "network", "availability"):
            spec = g.get(block)
            if isinstance(spec, dict) and (block, spec.get("model", "link")) in TRACE_MODELS:
                cands.append((gi, block, spec["path"]))
    assume(cands)
    gi, block, ref = draw(st.sampled_from(cands))
    name = ref[len("@file:"):]
    text = d.files[name]
    header = text.splitlines()[0].split(",")
    numeric = [i for i, c in enumerate(header) if c not in ("client", "available")]
    how = draw(st.sampled_from(["header only", "short row", "nan", "inf", "-inf", "-1", "1e400", "fast", "not utf-8"]))
    files = dict(d.files)
    files[name] = (text.encode() + b"\xff\xfe\xfa,1,1\n" if how == "not utf-8"
                   else _break_csv(text, how, draw(st.sampled_from(numeric))))
    return Hostile(Drawn(d.scenario, files), f"clients.groups[{gi}].{block}.path", f"{name}: {how}")


HOSTILE_PATHS = (".", "@file:empty.csv", "no/such/file.csv", "nul\x00byte.csv", "")


@st.composite
def hostile_path(draw, valid) -> Hostile:
    """A trace's `path` naming a folder (the working directory), an empty file, nothing that
    exists, or a name with a NUL."""
    d = draw(valid)
    cands = [(gi, block) for gi, g in enumerate(d.scenario["clients"]["groups"]) for block in ("compute", "network",
             "availability") if isinstance(g.get(block), dict) and "path" in g[block]]
    assume(cands)
    gi, block = draw(st.sampled_from(cands))
    raw = copy.deepcopy(d.scenario)
    bad = draw(st.sampled_from(HOSTILE_PATHS))
    raw["clients"]["groups"][gi][block]["path"] = bad
    files = {**d.files, "empty.csv": ""}
    return Hostile(Drawn(raw, files), f"clients.groups[{gi}].{block}.path", repr(bad))


@st.composite
def hostile_name(draw, valid) -> Hostile:
    d = draw(valid)
    raw = copy.deepcopy(d.scenario)
    raw["name"] = draw(st.sampled_from(["a/b", "/tmp/x", "../up", "a\\b", "", "nul\x00byte", "sp ace", "new\nline"]))
    return Hostile(Drawn(raw, d.files), "name", repr(raw["name"]))


NPZ_BREAKS = ("label -1", "label 1e9", "fractional label", "nan label", "test shape", "empty test", "nan feature")


@st.composite
def hostile_npz(draw):
    """(arrays, the words the error must hold)."""
    n, side = draw(st.integers(4, 12)), draw(st.integers(2, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    x = rng.integers(0, 256, (n, side, side), dtype=np.uint8)
    y = rng.integers(0, 3, n)
    arrays = {"x_train": x, "y_train": y, "x_test": x[:2], "y_test": y[:2]}
    how = draw(st.sampled_from(NPZ_BREAKS))
    i = draw(st.integers(0, n - 1))
    if how in ("label -1", "label 1e9"):
        arrays["y_train"] = y.copy()
        arrays["y_train"][i] = -1 if how == "label -1" else 10 ** 9
        words = "labels are class numbers 0 .. 9999"
    elif how in ("fractional label", "nan label"):
        arrays["y_train"] = y.astype(float)
        arrays["y_train"][i] = 0.5 if how == "fractional label" else math.nan
        words = "must hold whole class numbers"
    elif how == "test shape":
        arrays["x_test"] = rng.integers(0, 256, (2, side + 1, side), dtype=np.uint8)
        words = "they must match"
    elif how == "empty test":
        arrays["x_test"], arrays["y_test"] = x[:0], y[:0]
        words = "needs at least one sample"
    else:
        arrays["x_train"] = x.astype(np.float32)
        arrays["x_train"][i, 0, 0] = math.nan
        words = "must hold finite numbers"
    return arrays, how, words


@st.composite
def hostile_pickle(draw):
    """(bytes, how, the words the one error line must hold)."""
    how = draw(st.sampled_from(["deep", "bytes8", "nan", "inf", "global", "cut"]))
    good = {c: {"computation": float(draw(st.integers(1, 100))), "communication": float(draw(st.integers(1, 5000)))}
            for c in range(draw(st.integers(1, 5)))}
    if how == "deep":
        depth = draw(st.integers(18, 200_000))
        return b"\x80\x04" + b"]" * depth + b"a" * (depth - 1) + b".", how, "nested more than 16 deep"
    if how == "bytes8":
        size = draw(st.integers(2 ** 20, 2 ** 62))
        return b"\x80\x04\x8e" + struct.pack("<Q", size) + b"abc.", how, "not a FedScale trace pickle"
    if how in ("nan", "inf"):
        c = draw(st.sampled_from(sorted(good)))
        key = draw(st.sampled_from(["computation", "communication"]))
        good[c][key] = math.nan if how == "nan" else math.inf
        return pickle.dumps(good), how, f"client {c} has {key} {good[c][key]!r}"
    if how == "global":
        return pickle.dumps({0: {"computation": io.BytesIO, "communication": 1.0}}), how, "refusing to load"
    data = pickle.dumps(good)
    return data[:draw(st.integers(0, len(data) - 1))], how, "not a FedScale trace pickle"

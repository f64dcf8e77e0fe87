"""What `flemu list` prints: the kinds a list name covers, one line of parameters per
component, and one component in full (`flemu list algorithms fedavg`): every parameter with
its type, default and description, and for an algorithm its protocols, per-client state and
message sizes per direction. Built-ins and plugins' components alike."""
from __future__ import annotations

import difflib
import typing

from rich.table import Table

GROUPS = {"algorithms": ["algorithm"], "datasets": ["dataset"], "partitions": ["partition"],
          "models": ["model"], "protocols": ["protocol"], "executors": ["executor"],
          "selection": ["selection"], "callbacks": ["callback"], "codecs": ["codec"],
          "compute": ["compute"], "availability": ["availability"], "network": ["network"],
          "devices": ["compute", "availability", "network", "selection"]}


def kinds_of(what: str):
    key = what if what in GROUPS else what + "s"
    return GROUPS.get(key)


def closest(word: str, options) -> str:
    m = difflib.get_close_matches(str(word), list(options), n=1, cutoff=0.5)
    return f"; did you mean {m[0]!r}?" if m else ""


def _default(f) -> str:
    if f.is_required():
        return "required"
    if f.default_factory is not None:
        return "(default block)"
    return repr(f.get_default(call_default_factory=False))


def param_text(model) -> str:
    parts = []
    for name, f in model.model_fields.items():
        if name in ("name", "model"):
            continue
        d = _default(f)
        parts.append(f"{name} (required)" if d == "required" else f"{name}={d}")
    return ", ".join(parts) or "-"


def _type(ann) -> str:
    s = getattr(ann, "__name__", None) if not typing.get_args(ann) else None
    return s or str(ann).replace("typing.", "")


def show_one(out, e) -> None:
    """One component in full."""
    out.print(f"[bold]{e.name}[/bold]  ({e.kind}; {e.origin})", highlight=False)
    out.print(e.description, highlight=False, markup=False)
    t = Table(show_lines=False, title="parameters", title_justify="left")
    for c in ("parameter", "type", "default", "description"):
        t.add_column(c, overflow="fold")
    for name, f in e.params.model_fields.items():
        if name in ("name", "model"):
            continue
        t.add_row(name, _type(f.annotation), _default(f), f.description or "")
    if e.params.model_fields:
        out.print(t)
    else:
        out.print("parameters: none", highlight=False)
    if e.kind == "algorithm":
        for line in algorithm_lines(e.factory):
            out.print(line, highlight=False, markup=False)


def algorithm_lines(cls) -> list:
    """An algorithm's declared protocols, per-client state and message sizes."""
    from .algorithms.base import Algorithm
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        return []
    state = ", ".join(cls.client_state) if cls.client_state else "none"
    return [f"protocols: {', '.join(sorted(cls.supports))}",
            f"per-client state: {state}",
            f"message sizes: down {cls.down_vectors} model-sized vector(s) per message, "
            f"up {cls.up_vectors} model-sized vector(s) per message"]

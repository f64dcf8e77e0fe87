"""Generate the docs site's Scenario reference page (docs/reference.md) from the schema and the
registries, so the documentation cannot drift from the code (`make docs` writes it; a test
checks that the committed page is current).

    python -m emulator.docs            # print the page
    python -m emulator.docs --write    # write docs/reference.md (only when it changed)
"""
from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel

from . import registry
from .scenario.schema import _TAGGED, schema
from .scenario.validation_errors import bounds

SECTIONS = [  # (YAML path, kind or None, title)
    ("workload.dataset", "dataset", "Datasets"),
    ("workload.partition", "partition", "Partitions"),
    ("workload.model", "model", "Models"),
    ("clients.groups[].compute", "compute", "Compute models"),
    ("clients.groups[].network", "network", "Network links"),
    ("clients.groups[].availability", "availability", "Availability models"),
    ("protocol.select", "selection", "Server-side selection"),
    ("protocol", "protocol", "Protocols"),
    ("algorithm", "algorithm", "Algorithms"),
    ("executor", "executor", "Executors"),
    ("callbacks[]", "callback", "Run callbacks"),
    ("network.codec.up", "codec", "Message codecs (also `network.codec.down`)"),
]


def _type(ann) -> str:
    origin = typing.get_origin(ann)
    if ann is type(None):
        return "null"
    if origin is typing.Literal:
        return " \\| ".join(str(a) for a in typing.get_args(ann))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        plain = [typing.get_args(a)[0] if typing.get_origin(a) is typing.Annotated else a for a in args]
        if plain and all(isinstance(a, type) and issubclass(a, BaseModel)
                         and (a in _TAGGED.values() or a.__name__ == "_Never") for a in plain):
            return "component (see below)"
        return " \\| ".join(_type(a) for a in args)
    if origin is typing.Annotated:
        return _type(typing.get_args(ann)[0])
    if ann is str:
        return "string"
    if ann is int:
        return "integer"
    if ann is float:
        return "number"
    if ann is bool:
        return "boolean"
    if origin is list:
        return f"list of {_type(typing.get_args(ann)[0])}"
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "mapping"
    return getattr(ann, "__name__", str(ann))


def _default(f) -> str:
    if f.is_required():
        return "**required**"
    if f.default_factory is not None:
        try:
            v = f.default_factory()
        except TypeError:
            return "(see below)"
        if isinstance(v, BaseModel):
            d = v.model_dump(exclude_none=True)
            tag = d.get("name") or d.get("model") or d.get("mode")
            return f"`{tag}`" if tag else "defaults"
        return f"`{v!r}`"
    return "—" if f.default is None else f"`{f.default!r}`".replace("|", "\\|")


def _constraints(f) -> str:
    return ", ".join(f"{sign} {v}" for sign, v in bounds(f))


def fields_table(model, prefix="") -> list:
    rows = []
    for name, f in model.model_fields.items():
        if name in ("name", "model") and prefix == "":
            continue
        desc = (f.description or "").replace("|", "\\|")
        cons = _constraints(f)
        rows.append(f"| `{prefix}{name}` | {_type(f.annotation)} | {_default(f)} | {desc}{' (' + cons + ')' if cons else ''} |")
    return rows


def top_level() -> str:
    S = schema()
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, f in S.model_fields.items():
        lines.append(f"| `{name}` | {_type(f.annotation)} | {_default(f)} | {(f.description or _doc(f)).strip()} |")
    nested = {"workload": "Workload", "clients": "Clients", "clients.groups[]": "Group", "run": "Run",
              "clients.groups[].energy": "EnergyParams", "network": "NetworkBlock", "network.codec": "CodecBlock",
              "network.compression": "CompressionParams", "network.server_link": "ServerLinkParams",
              "network.topology": "TopologyParams", "network.topology.links[]": "TopologyLink",
              "output": "Output", "evaluation": "Evaluation"}
    nested["secure_aggregation"] = "SecureAggregationParams"
    models = _nested_models(S)
    for path, cls in nested.items():
        m = models.get(cls)
        if m is None:
            continue
        for name, f in m.model_fields.items():
            cons = _constraints(f)
            lines.append(f"| `{path}.{name}` | {_type(f.annotation)} | {_default(f)} | "
                         f"{(f.description or '').replace('|', chr(92) + '|')}{' (' + cons + ')' if cons else ''} |")
    return "\n".join(lines)


def _doc(f):
    ann = f.annotation
    for a in typing.get_args(ann) or (ann,):
        if isinstance(a, type) and issubclass(a, BaseModel) and a.__doc__:
            return a.__doc__.split("\n")[0]
    return ""


def _nested_models(S) -> dict:
    found = {}

    def walk(ann):
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            if ann.__name__ not in found and ann not in _TAGGED.values():
                found[ann.__name__] = ann
                for f in ann.model_fields.values():
                    walk(f.annotation)
            return
        for a in typing.get_args(ann):
            walk(a)

    walk(S)
    return found


def component_sections() -> str:
    out = []
    for path, kind, title in SECTIONS:
        key = "model" if kind in ("compute", "network", "availability", "selection") else "name"
        out.append(f"#### {title} (`{path}.{key}`)\n")
        out.append("| name | what it is | parameters (default) |")
        out.append("|---|---|---|")
        for name, e in sorted(registry.table(kind).items()):
            params = []
            for pn, f in e.params.model_fields.items():
                if pn in ("name", "model"):
                    continue
                d = "required" if f.is_required() else _default(f).strip("`")
                params.append(f"`{pn}` ({d})")
            out.append(f"| `{name}` | {e.description.replace('|', chr(92) + '|')} | {', '.join(params) or '—'} |")
        out.append("")
    return "\n".join(out)


def reference() -> str:
    return ("## Top-level and nested fields\n\n" + top_level() + "\n\n## Components\n\n"
            "Every block below is chosen by its `name` (device models and selection: `model`); "
            "`flemu list` prints the same tables.\n\n" + component_sections())


PAGE = "docs/reference.md"
HEADER = """# Scenario reference

<!-- Generated by `python -m emulator.docs --write` (make docs) from the scenario schema and the
component registries; edit the descriptions in the code, not here. -->

Every field of a scenario file, its type, its default and what it means; then every component
(dataset, partition, model, device model, selection, protocol, algorithm, executor) with its
parameters. `flemu validate FILE --show` prints a scenario with every default filled in; a
path here is what `--set` and a sweep's grid take (`clients.groups[*].compute.sigma`).

"""


def page() -> str:
    """The whole Scenario reference page."""
    return HEADER + reference().replace("#### ", "### ").rstrip() + "\n"


def write_page(path=PAGE) -> bool:
    """Write the page; True if it changed."""
    p = Path(path)
    text = page()
    if p.exists() and p.read_text() == text:
        return False
    p.write_text(text)
    return True


if __name__ == "__main__":
    if "--write" in sys.argv:
        print(f"{PAGE} updated" if write_page() else f"{PAGE} already current")
    else:
        print(page())

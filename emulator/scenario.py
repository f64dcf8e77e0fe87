"""Scenario files: YAML -> validated pydantic model (DESIGN.md section 5).

- `yaml.safe_load` only; `--set path=value` overrides are applied to the raw mapping first
  (values parsed as YAML: numbers, booleans, lists, null).
- The schema is built from the registries: every registered component is one member of a
  tagged union keyed by its `name` (or `model` for device models), so a new component is
  valid in scenarios as soon as it is registered.
- Every problem of a file is reported together, each with its YAML path
  (`clients.groups[1].compute.sigma`), the value given and what is allowed; an unknown
  name lists the known names and the closest match. Nothing runs before the whole file
  validates.
"""
from __future__ import annotations

import difflib
import functools
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import (BaseModel, BeforeValidator, Discriminator, Field, Tag, ValidationError,
                      create_model, field_validator, model_validator)

from . import fleet, registry
from .errors import ScenarioError
from .registry import Params

# Which key selects the component in each kind of block, and its default when absent.
TAG_KEY = {"compute": "model", "availability": "model", "network": "model", "selection": "model"}
TAG_DEFAULT = {"network": "link", "executor": "sequential"}
_TAGGED: dict[str, type] = {}   # "kind:name" -> member model class


def _tag_key(kind: str) -> str:
    return TAG_KEY.get(kind, "name")


def _shorthand(kind: str):
    key = _tag_key(kind)

    def conv(v):
        return {key: v} if isinstance(v, str) else v
    return conv


class _Never(BaseModel):
    never: Literal["never"]


def tagged(kind: str):
    """The tagged union of every registered component of `kind`."""
    key, default = _tag_key(kind), TAG_DEFAULT.get(kind)
    members = []
    for name, e in registry.table(kind).items():
        m = create_model(f"{kind.title()}_{name}", __base__=e.params,
                         **{key: (Literal[name], Field(name, description=f"{kind} name"))})
        m.__doc__ = e.description
        _TAGGED[f"{kind}:{name}"] = m
        members.append(Annotated[m, Tag(f"{kind}:{name}")])
    if len(members) == 1:
        members.append(Annotated[_Never, Tag("__never__")])

    def disc(v):
        if isinstance(v, dict):
            t = v.get(key, default)
            return None if t is None else f"{kind}:{t}"
        t = getattr(v, key, None)
        return None if t is None else f"{kind}:{t}"

    return Annotated[Union[tuple(members)], Discriminator(disc), BeforeValidator(_shorthand(kind))]


def member(kind: str, name: str, **kw):
    """An instance of a registered component's params, validated (defaults filled in)."""
    if f"{kind}:{name}" not in _TAGGED:
        schema()
    return _TAGGED[f"{kind}:{name}"].model_validate(kw)


def _batch_size(v):
    if v == "full":
        return v
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError("must be a positive integer or 'full'")
    return v


@functools.lru_cache(maxsize=None)
def schema() -> type:
    """Build (once) the Scenario model from the registries."""
    registry.load_all()
    ns = {f"{k.title()}Spec": None for k in registry.KINDS}
    # unions first for device models and selection (protocol params reference them)
    for kind in ("compute", "availability", "network", "selection"):
        for e in registry.table(kind).values():
            e.params.model_rebuild(force=True)
        ns[f"{kind.title()}Spec"] = tagged(kind)
    for kind in registry.KINDS:
        for e in registry.table(kind).values():
            e.params.model_rebuild(force=True, _types_namespace=ns)
    for kind in registry.KINDS:
        if ns.get(f"{kind.title()}Spec") is None:
            ns[f"{kind.title()}Spec"] = tagged(kind)
    T = ns

    class Workload(Params):
        """One model's workload: dataset, partition, model, batch size."""
        dataset: T["DatasetSpec"] = Field(description="dataset block; `name` one of the registered datasets")
        partition: Optional[T["PartitionSpec"]] = Field(None, description="how the dataset is split (default: natural for datasets with their own split, else iid)")
        model: T["ModelSpec"] = Field(description="model block")
        batch_size: Annotated[Union[int, str], BeforeValidator(_batch_size)] = Field(32, description="local mini-batch size, or `full` for full-batch gradients")
        algorithm: Optional[dict] = Field(None, description="multi-model runs: this model's overrides of the algorithm block (e.g. {lr: 0.01})")
        local_steps: Optional[int] = Field(None, ge=1, description="multi-model runs: this model's local steps per round (default: the protocol's)")

    class Group(Params):
        """A device class: how many clients, how fast they compute, their links and availability."""
        name: str = Field(description="group name")
        fraction: Optional[float] = Field(None, gt=0, le=1, description="share of clients.count (fractions sum to 1)")
        count: Optional[int] = Field(None, ge=1, description="or a number of clients (counts sum to clients.count)")
        compute: T["ComputeSpec"] = Field(description="step-time model; required (`{model: instant}` for zero)")
        network: T["NetworkSpec"] = Field(description="link model; required (`instant` for zero)")
        availability: T["AvailabilitySpec"] = Field(default_factory=lambda: member("availability", "always"), description="client-side availability")
        energy: Optional[fleet.EnergyParams] = Field(None, description="power draw {compute_watts, transmit_watts, idle_watts}: energy_j per client per round")

    class Clients(Params):
        """The fleet."""
        count: int = Field(ge=1, description="number of clients N")
        groups: list[Group] = Field(min_length=1, description="device classes (contiguous blocks of client ids, in order)")

        @field_validator("groups")
        @classmethod
        def _sizes(cls, groups, info):
            count = info.data.get("count")
            fr = [g.fraction for g in groups]
            ct = [g.count for g in groups]
            if all(f is not None for f in fr) and all(c is None for c in ct):
                if abs(sum(fr) - 1.0) > 1e-9:
                    raise ValueError(f"group fractions sum to {sum(fr):g}; they must sum to 1")
            elif all(c is not None for c in ct) and all(f is None for f in fr):
                if count is not None and sum(ct) != count:
                    raise ValueError(f"group counts sum to {sum(ct)}; they must sum to clients.count = {count}")
            else:
                raise ValueError("give every group either a `fraction` or a `count` (the same kind for all groups)")
            names = [g.name for g in groups]
            if len(set(names)) != len(names):
                raise ValueError(f"group names must be distinct, got {names}")
            return groups

    class Run(Params):
        """When the run stops and how often it evaluates."""
        rounds: Optional[int] = Field(None, ge=1, description="number of aggregations")
        virtual_time: Optional[float] = Field(None, gt=0, description="or a virtual-time budget in seconds")
        eval_every: int = Field(1, ge=1, description="evaluate every this many aggregations")
        eval_train: bool = Field(False, description="also evaluate the global model on the whole training set at each evaluation (columns full_train_loss, full_train_acc)")
        eval_every_seconds: Optional[float] = Field(None, gt=0, description="or at the first aggregation at or after every multiple of this many virtual seconds")
        target_accuracy: Optional[float] = Field(None, gt=0, le=1, description="report time/rounds to reach this test accuracy")

        @model_validator(mode="after")
        def _stop(self):
            if self.rounds is None and self.virtual_time is None:
                raise ValueError("give `rounds` or `virtual_time` (or both: whichever comes first)")
            return self

    class NetworkSettings(Params):
        """Fleet-wide network: message accounting, shared links."""
        bytes_per_param: int = Field(4, ge=1, description="bytes per parameter on the wire (float32: 4)")
        overhead_bytes: int = Field(0, ge=0, description="bytes added to every message (headers)")
        compression: fleet.CompressionParams = Field(default_factory=fleet.CompressionParams, description="{up, down}: ratio applied to the parameter bytes")
        server_link: Optional[fleet.ServerLinkParams] = Field(None, description="the server's access link, shared by all transfers (max-min fair)")
        topology: Optional[fleet.TopologyParams] = Field(None, description="a networkx topology of shared links (nodes, links, server, attach)")

    class Output(Params):
        """Where and what the run writes."""
        dir: Optional[str] = Field(None, description="run directory (default runs/<name>)")
        clients_csv: Literal["all", "participants"] = Field("all", description="rows for every client each round, or only for the selected ones")
        events: bool = Field(False, description="also write events.csv: every client state transition (time, client, state, round, detail)")

    class Scenario(Params):
        """A flemu scenario."""
        name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$", description="run name (letters, digits, _ . -)")
        description: Optional[str] = Field(None, description="free text")
        seed: int = Field(0, ge=0, description="the run's one integer seed")
        workload: Optional[Workload] = Field(None, description="the workload (single-model runs)")
        workloads: Optional[list[Workload]] = Field(None, min_length=1, description="one workload per model (multi-model runs)")
        clients: Clients
        protocol: T["ProtocolSpec"] = Field(description="protocol block; `name` one of the registered protocols")
        algorithm: T["AlgorithmSpec"] = Field(description="algorithm block; `name` one of the registered algorithms")
        run: Run
        executor: T["ExecutorSpec"] = Field(default_factory=lambda: member("executor", "sequential"), description="executor block")
        network: NetworkSettings = Field(default_factory=NetworkSettings)
        output: Output = Field(default_factory=Output)

        @model_validator(mode="after")
        def _one_workload_key(self):
            if (self.workload is None) == (self.workloads is None):
                raise ValueError("give exactly one of `workload` (one model) or `workloads` (a list, multi-model)")
            return self

        @property
        def workload_list(self) -> list:
            return self.workloads if self.workloads is not None else [self.workload]

    return Scenario


# --------------------------------------------------------------------------- loading
def parse_override(item: str):
    if "=" not in item:
        raise ScenarioError([(f"--set {item}", "overrides look like path=value, e.g. algorithm.lr=0.1")])
    path, _, val = item.partition("=")
    try:
        value = yaml.safe_load(val) if val != "" else ""
    except yaml.YAMLError:
        value = val
    return path.strip(), value


_SEG = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def split_path(path: str) -> list:
    out = []
    for name, idx in _SEG.findall(path):
        if idx:
            out.append(int(idx))
        elif name.isdigit():
            out.append(int(name))
        else:
            out.append(name)
    return out


def apply_overrides(raw: dict, overrides) -> dict:
    """Set each `path=value` in the raw mapping (creating mappings on the way)."""
    problems = []
    for item in overrides or ():
        if isinstance(item, tuple):
            path, value = item
        else:
            path, value = parse_override(item)
        keys = split_path(path)
        if not keys:
            problems.append((f"--set {path}", "empty path"))
            continue
        node = raw
        ok = True
        for i, k in enumerate(keys[:-1]):
            nxt = keys[i + 1]
            if isinstance(k, int):
                if not isinstance(node, list) or k >= len(node):
                    problems.append((f"--set {path}", f"{format_path(keys[:i + 1])} is not an existing list item"))
                    ok = False
                    break
                node = node[k]
            else:
                if not isinstance(node, dict):
                    problems.append((f"--set {path}", f"{format_path(keys[:i])} is not a mapping"))
                    ok = False
                    break
                if k not in node or node[k] is None:
                    node[k] = [] if isinstance(nxt, int) else {}
                elif isinstance(node[k], str) and not isinstance(nxt, int):
                    node[k] = {TAG_KEY.get(k, "name"): node[k]}   # shorthand `partition: iid`
                node = node[k]
        if not ok:
            continue
        last = keys[-1]
        if isinstance(last, int):
            if not isinstance(node, list) or last >= len(node):
                problems.append((f"--set {path}", f"{format_path(keys)} is not an existing list item"))
                continue
        elif not isinstance(node, dict):
            problems.append((f"--set {path}", f"{format_path(keys[:-1])} is not a mapping"))
            continue
        node[last] = value
    if problems:
        raise ScenarioError(problems)
    return raw


def format_path(keys) -> str:
    s = ""
    for k in keys:
        s += f"[{k}]" if isinstance(k, int) else (f".{k}" if s else str(k))
    return s


def read_yaml(path) -> dict:
    p = Path(path)
    if not p.exists():
        raise ScenarioError([("", f"scenario file not found: {path}")], source=str(path))
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ScenarioError([("", f"not valid YAML{where}: {getattr(e, 'problem', e)}")], source=str(path))
    if raw is None:
        raise ScenarioError([("", "the file is empty; a scenario is a YAML mapping (name, workload, clients, "
                                  "protocol, algorithm, run)")], source=str(path))
    if not isinstance(raw, dict):
        raise ScenarioError([("", f"a scenario is a YAML mapping, got {type(raw).__name__}")], source=str(path))
    return raw


def load(source, overrides=(), seed: Optional[int] = None, base_dir=None):
    """Scenario from a path, a YAML string with a newline, a dict, or a Scenario."""
    S = schema()
    if isinstance(source, BaseModel):
        raw = dump(source)
        src = None
    elif isinstance(source, dict):
        import copy
        raw = copy.deepcopy(source)
        src = None
    elif isinstance(source, str) and "\n" in source:
        raw = yaml.safe_load(source)
        src = None
        if not isinstance(raw, dict):
            raise ScenarioError([("", "the scenario text is empty" if raw is None else
                                  f"a scenario is a YAML mapping, got {type(raw).__name__}")])
    else:
        raw = read_yaml(source)
        src = str(source)
        base_dir = base_dir or Path(source).resolve().parent
    try:
        apply_overrides(raw, overrides)
    except ScenarioError as e:
        e.source = src
        raise
    if seed is not None:
        raw["seed"] = int(seed)
    try:
        sc = S.model_validate(raw, context={"base_dir": str(base_dir) if base_dir else None})
    except ValidationError as e:
        raise ScenarioError(explain(e, raw, S), source=src) from None
    problems = cross_check(sc)
    if problems:
        raise ScenarioError(problems, source=src)
    return sc


def algorithm_for(sc, index: int):
    """The algorithm block of model `index`: the scenario's, with the workload's overrides."""
    wl = sc.workload_list[index]
    if not wl.algorithm:
        return sc.algorithm
    merged = {**sc.algorithm.model_dump(), **wl.algorithm}
    merged["name"] = sc.algorithm.name
    return type(sc.algorithm).model_validate(merged)


def cross_check(sc) -> list:
    """Checks across blocks, each located at the YAML path of the field to change:
    the algorithm runs under the protocol, several workloads only under a multi-model
    protocol, selection and wait counts within the fleet, topology attachments name groups."""
    problems = []
    algo = registry.get("algorithm", sc.algorithm.name).factory
    proto = sc.protocol.name
    if proto not in algo.supports:
        problems.append(("algorithm.name", f"algorithm {sc.algorithm.name!r} does not run under protocol.name "
                                           f"{proto!r}; it supports: {', '.join(sorted(algo.supports))}"))
    if sc.workloads is not None and not getattr(registry.get("protocol", proto).factory, "multi_model", False):
        multi = sorted(n for n, e in registry.table("protocol").items() if getattr(e.factory, "multi_model", False))
        allowed = f"protocols that train several models: {', '.join(multi)}" if multi else \
            "no protocol trains several models yet"
        problems.append(("workloads", f"{len(sc.workloads)} workloads given, but protocol.name {proto!r} trains one "
                                      f"model (use `workload:`); {allowed}"))
    for i, wl in enumerate(sc.workloads or []):
        if wl.algorithm is not None:                   # the merged block must validate
            try:
                algorithm_for(sc, i)
            except ValidationError as e:
                for loc, msg in explain(e, dict(wl.algorithm), type(sc.algorithm)):
                    problems.append((f"workloads[{i}].algorithm.{loc}" if loc else f"workloads[{i}].algorithm", msg))
    if sc.workloads is None and (sc.workload.algorithm is not None or sc.workload.local_steps is not None):
        problems.append(("workload", "algorithm / local_steps overrides belong to multi-model workloads (`workloads:`)"))
    n = sc.clients.count
    sel = getattr(sc.protocol, "select", None)
    k = getattr(sel, "k", None)
    if k is not None and k > n:
        problems.append(("protocol.select.k", f"{k} clients per round, but clients.count is {n}"))
    mk = getattr(sc.protocol, "k", None)                       # multi_model's clients per round
    if mk is not None and mk > n:
        problems.append(("protocol.k", f"{mk} clients per round, but clients.count is {n}"))
    sets = getattr(sel, "sets", None)
    if sets is not None and any(c >= n for s in sets for c in s):
        problems.append(("protocol.select.sets", f"client ids must be below clients.count = {n}"))
    p = getattr(sel, "p", None)
    if isinstance(p, list) and len(p) != n:
        problems.append(("protocol.select.p", f"{len(p)} probabilities for clients.count = {n} clients"))
    wait = getattr(sc.protocol, "wait", None)
    wk = getattr(wait, "k", None)
    if wk is not None and wk > n:
        problems.append(("protocol.wait.k", f"waits for {wk} uploads, but clients.count is {n}"))
    assignment = getattr(sc.protocol, "assignment", None)      # multi-model equal groups (multimodel.md A5)
    M = len(sc.workload_list)
    if assignment in ("mfa_rand", "mfa_rr") and M > 1 and not sc.protocol.allow_unequal_groups:
        K = sc.protocol.k if sc.protocol.k is not None else n
        if K % M:
            problems.append(("protocol.k" if sc.protocol.k is not None else "clients.count",
                             f"{K} clients per round do not split into {M} equal groups (one per model); "
                             f"set protocol.allow_unequal_groups: true for sizes that differ by one"))
    topo = sc.network.topology
    if topo is not None:
        groups = {g.name for g in sc.clients.groups}
        unknown = sorted(set(topo.attach) - groups)
        if unknown:
            problems.append(("network.topology.attach", f"names unknown groups {unknown}; groups are {sorted(groups)}"))
    return problems


def dump(sc: BaseModel) -> dict:
    """The resolved scenario (defaults filled in) as plain data, component names first."""
    return _tag_first(sc.model_dump(mode="json", exclude_none=True))


def _tag_first(x):
    if isinstance(x, dict):
        keys = sorted(x, key=lambda k: 0 if k in ("name", "model", "mode") and isinstance(x[k], str) else 1)
        return {k: _tag_first(x[k]) for k in keys}
    if isinstance(x, list):
        return [_tag_first(v) for v in x]
    return x


def to_yaml(sc: BaseModel) -> str:
    return yaml.safe_dump(dump(sc), sort_keys=False, default_flow_style=None, width=100)


# --------------------------------------------------------------------------- error messages
def _short(v, n=60) -> str:
    s = repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def _closest(word, options):
    m = difflib.get_close_matches(str(word), list(options), n=1, cutoff=0.5)
    return f"; did you mean {m[0]!r}?" if m else ""


def _model_at(S, loc):
    """The pydantic model class validating the mapping at `loc` (None if unknown)."""
    cur: Any = S
    for k in loc:
        if isinstance(k, str) and ":" in k and k in _TAGGED:
            cur = _TAGGED[k]
            continue
        if isinstance(k, int):
            continue
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)) or k not in cur.model_fields:
            return None
        cur = _first_model(cur.model_fields[k].annotation)
    return cur if isinstance(cur, type) and issubclass(cur, BaseModel) else None


def _first_model(ann):
    """The first model class inside an annotation (a tagged union's member is then
    replaced by the one its tag in the error location names)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for a in typing.get_args(ann):
        m = _first_model(a)
        if m is not None:
            return m
    return None


def _without_plain_tags(S, loc) -> list:
    """`loc` without the tags pydantic puts after a plain discriminated union (protocol.wait's
    `mode`: an error in `{mode: deadline}` is located at wait.deadline.seconds); users never
    write them. Registry unions ('kind:name' tags) are left to the caller."""
    out, cur, tags = [], S, None
    for k in loc:
        if tags is not None:
            member, tags = tags.get(k) if isinstance(k, str) else None, None
            if member is not None:
                cur = member
                continue
        out.append(k)
        if isinstance(k, str) and k in _TAGGED:
            cur = _TAGGED[k]
            continue
        if isinstance(k, int):                   # a list item: the same model goes on
            continue
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)) or k not in cur.model_fields:
            cur = None
            continue
        f = cur.model_fields[k]
        disc = f.discriminator if isinstance(f.discriminator, str) else None
        cur = _first_model(f.annotation)
        if disc:
            tags = {}
            for m in _members(f.annotation):
                t = m.model_fields.get(disc)
                for v in (typing.get_args(t.annotation) if t is not None else ()):
                    if isinstance(v, str):
                        tags[v] = m
    return out


def _members(ann):
    """The model classes inside an annotation (a union's members)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        yield ann
    for a in typing.get_args(ann):
        yield from _members(a)


def explain(err: ValidationError, raw, S) -> list:
    problems = []
    for e in err.errors():
        loc = _without_plain_tags(S, list(e["loc"]))
        clean = [k for k in loc if not (isinstance(k, str) and (k in _TAGGED or k == "__never__"
                                                                 or k.startswith(("function-", "tagged-union"))))]
        path = format_path(clean)
        typ = e["type"]
        ctx = e.get("ctx") or {}
        if typ == "union_tag_invalid" and ":" not in str(ctx.get("tag", "")):
            key = str(ctx.get("discriminator", "'name'")).strip("'")
            problems.append((f"{path}.{key}" if path else key,
                             f"unknown {key} {ctx.get('tag')!r}; known: {ctx.get('expected_tags')}"))
        elif typ == "union_tag_invalid":
            tag = str(ctx.get("tag", ""))
            kind, _, name = tag.partition(":")
            known = sorted(registry.table(kind)) if kind in registry.KINDS else []
            key = _tag_key(kind)
            problems.append((f"{path}.{key}" if path else key,
                             f"unknown {registry.KINDS.get(kind, kind).split(' (')[0][:-1] if kind in registry.KINDS else 'name'} "
                             f"{name!r}; known: {', '.join(known)}{_closest(name, known)}"))
        elif typ == "union_tag_not_found" and not isinstance(e.get("input"), dict):
            problems.append((path, f"expected a mapping, got {_short(e.get('input'))}"))
        elif typ == "union_tag_not_found":
            kind = _kind_of(S, clean)
            if kind:
                known, key = sorted(registry.table(kind)), _tag_key(kind)
            else:                      # a plain discriminated union (protocol.wait: mode)
                key = str(ctx.get("discriminator", "'name'")).strip("'")
                known = _tags_at(S, loc, key)
            problems.append((f"{path}.{key}", f"missing `{key}`; one of: {', '.join(known)}"))
        elif typ == "extra_forbidden":
            parent = _model_at(S, loc[:-1])
            allowed = [k for k in (parent.model_fields if parent else {})]
            extra = f"; allowed here: {', '.join(allowed)}{_closest(loc[-1], allowed)}" if allowed else ""
            problems.append((path, f"unknown key (value {_short(e.get('input'))}){extra}"))
        elif typ == "missing":
            problems.append((path, "required field missing"))
        elif typ == "model_type" or typ == "dict_type":
            problems.append((path, f"expected a mapping, got {_short(e.get('input'))}"))
        else:
            msg = e["msg"]
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, "):]
            inp = e.get("input")
            got = "" if isinstance(inp, dict) else f" (got {_short(inp)})"
            problems.append((path, f"{msg}{got}"))
    # one message per (path, text)
    seen, out = set(), []
    for p in problems:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def _tags_at(S, loc, key) -> list:
    """The values the tag `key` may take in the union at `loc` (its members' literals)."""
    parent = _model_at(S, loc[:-1])
    f = parent.model_fields.get(loc[-1]) if parent is not None else None
    out = []
    for m in _members(f.annotation if f is not None else None):
        tag = m.model_fields.get(key)
        if tag is not None:
            out += [v for v in typing.get_args(tag.annotation) if isinstance(v, str)]
    return out


def _kind_of(S, loc):
    """Which registry kind the union at `loc` belongs to."""
    last = loc[-1] if loc else None
    names = {"dataset": "dataset", "partition": "partition", "model": "model", "algorithm": "algorithm",
             "protocol": "protocol", "compute": "compute", "availability": "availability",
             "network": "network", "select": "selection", "executor": "executor"}
    return names.get(last)

"""Scenario files: YAML -> validated pydantic model (docs/architecture.md section 5).

- `yaml.safe_load` only; `--set path=value` overrides are applied to the raw mapping first
  (values parsed as YAML: numbers, booleans, lists, null; emulator/scenario/overrides.py).
- The schema is built from the registries: every registered component is one member of a
  tagged union keyed by its `name` (or `model` for device models), so a new component is
  valid in scenarios as soon as it is registered.
- Every problem of a file is reported together, each with its YAML path
  (`clients.groups[1].compute.sigma`), the value given and what is allowed; an unknown
  name lists the known names and the closest match. Nothing runs before the whole file
  validates.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Literal, Optional, Union

import yaml
from pydantic import (BaseModel, BeforeValidator, Discriminator, Field, Tag, ValidationError,
                      create_model, field_validator, model_validator)

from . import fleet, inputs, yaml_input
from .inputs import Inputs
from .evaluation import Evaluation
from .secure_aggregation import SecureAggregationParams
from .. import registry
from .names import check_name
from ..errors import ScenarioError
from devices import limits

from .quantities import FiniteParams
from ..registry import Params
from .tags import TAG_DEFAULT, TAG_KEY  # noqa: F401  (TAG_KEY: re-exported)
from .tags import TAGGED as _TAGGED
from .tags import UnionMember
from .tags import tag_key as _tag_key
from .overrides import apply_overrides, expand_path, parse_override, split_path  # noqa: F401  (re-exported)
from .checks import algorithm_for, cross_check  # noqa: F401  (algorithm_for: re-exported)
from .validation_errors import explain, format_path, remember_known_names  # noqa: F401  (format_path: re-exported)


def _shorthand(kind: str):
    key = _tag_key(kind)

    def conv(v):
        return {key: v} if isinstance(v, str) else v
    return conv


class _Never(BaseModel):
    never: Literal["never"]


def _spec_fields(params: type, ns: Optional[dict]) -> dict:
    """Fields of `params` declared with a union's name (`select: "SelectionSpec"`), typed
    with this build's union: pydantic resolves such a name once per class, so a member
    registered later (a plugin's selection model) would not be seen through the shared class."""
    out: dict = {}
    for klass in reversed(params.__mro__):
        for fname, ann in getattr(klass, "__annotations__", {}).items():
            ann = ann.strip("'\"") if isinstance(ann, str) else ann
            if isinstance(ann, str) and ns and ns.get(ann) is not None and fname in params.model_fields:
                f = params.model_fields[fname]
                kw = {"default_factory": f.default_factory} if f.default_factory is not None else \
                    ({} if f.is_required() else {"default": f.default})
                out[fname] = (ns[ann], Field(description=f.description, **kw))
    return out


def tagged(kind: str, ns: Optional[dict] = None):
    """The tagged union of every registered component of `kind`."""
    key, default = _tag_key(kind), TAG_DEFAULT.get(kind)
    members = []
    for name, e in registry.table(kind).items():
        m = create_model(f"{kind.title()}_{name}", __base__=(e.params, UnionMember), **_spec_fields(e.params, ns),
                         **{key: (Literal[name], Field(name, description=f"{kind} name"))})
        m.__doc__ = e.description
        m.union_name = name
        _TAGGED[f"{kind}:{name}"] = m
        members.append(Annotated[m, Tag(f"{kind}:{name}")])
    if len(members) == 1:
        members.append(Annotated[_Never, Tag("__never__")])

    def disc(v):
        if isinstance(v, dict):
            t = v.get(key, default)
            return None if t is None else f"{kind}:{t}"
        return f"{kind}:{v.union_name}" if isinstance(v, UnionMember) else None

    return Annotated[Union[tuple(members)], Discriminator(disc), BeforeValidator(_shorthand(kind))]


def member(kind: str, name: str, **kw):
    """An instance of a registered component's params, validated (defaults filled in)."""
    schema()                       # (re)built if the registry changed since
    return _TAGGED[f"{kind}:{name}"].model_validate(kw)


def _batch_size(v):
    if v == "full":
        return v
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError("must be a positive integer or 'full'")
    return v


class Run(FiniteParams):
    """When the run stops and how often it evaluates."""
    rounds: Optional[int] = Field(None, ge=1, description="number of aggregations")
    virtual_time: Optional[float] = Field(None, gt=0, le=limits.MAX_SECONDS, description="or a virtual-time budget in seconds")
    eval_every: int = Field(1, ge=1, description="evaluate every this many aggregations")
    eval_train: bool = Field(False, description="also evaluate the global model on the whole training set at each evaluation (columns full_train_loss, full_train_acc)")
    eval_every_seconds: Optional[float] = Field(None, gt=0, le=limits.MAX_SECONDS, description="or at the first aggregation at or after every multiple of this many virtual seconds")
    target_accuracy: Optional[float] = Field(None, gt=0, le=1, description="report time/rounds to reach this test accuracy")
    timeline: Optional[bool] = Field(None, description="also write timeline.csv: when each client's download, compute and upload began and ended, and its offline periods (`flemu timeline`, `flemu trace`)")

    @model_validator(mode="after")
    def _stop(self):
        if self.rounds is None and self.virtual_time is None:
            raise ValueError("give `rounds` or `virtual_time` (or both: whichever comes first)")
        return self

class NetworkSettings(FiniteParams):
    """Fleet-wide network: message accounting, shared links."""
    bytes_per_param: int = Field(4, ge=1, le=limits.MAX_BYTES_PER_PARAM, description="bytes per parameter on the wire (float32: 4)")
    overhead_bytes: int = Field(0, ge=0, le=limits.MAX_OVERHEAD_BYTES, description="bytes added to every message (headers; at most 1 GiB, so int64 byte counters never wrap)")
    compression: fleet.CompressionParams = Field(default_factory=fleet.CompressionParams, description="{up, down}: ratio applied to the parameter bytes; values untouched (the codec `ratio`; network.codec for codecs that change values)")
    server_link: Optional[fleet.ServerLinkParams] = Field(None, description="the server's access link, shared by all transfers (max-min fair)")
    topology: Optional[fleet.TopologyParams] = Field(None, description="a networkx topology of shared links (nodes, links, server, attach)")


def _network_model(T: dict) -> type:
    """The network block with its codecs, typed with this build's codec union `T`."""

    class CodecBlock(Params):
        """{up, down}: each direction's codec, a name or {name, ...} (docs/algorithms/compression.md)."""
        up: Optional[T["CodecSpec"]] = Field(None, description="upload codec (absent: the ratio network.compression.up)")
        down: Optional[T["CodecSpec"]] = Field(None, description="download codec: none, ratio, fp16 or bf16 (absent: the ratio network.compression.down)")

    class NetworkBlock(NetworkSettings):
        """Fleet-wide network: message accounting, codecs, shared links."""
        codec: Optional[CodecBlock] = Field(None, description="{up, down}: codecs that change the values and the bytes (docs/algorithms/compression.md)")

    return NetworkBlock


def _check_group_sizes(groups, count):
    """Every group has a fraction (summing to 1) or every group a count (summing to
    clients.count); group names are distinct."""
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


def _unions() -> dict:
    """"<Kind>Spec" -> the tagged union of every registered component of that kind (device
    models and selection first: protocol parameters reference them)."""
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
            ns[f"{kind.title()}Spec"] = tagged(kind, ns)
    return ns


_SCHEMA: dict = {}      # registry generation -> Scenario model


def schema() -> type:
    """The Scenario model built from the registries, rebuilt whenever they changed (a
    component registered after a schema was built is valid at the next call)."""
    g = registry.generation()
    S = _SCHEMA.get(g)
    if S is None:
        _SCHEMA.clear()
        S = _SCHEMA[g] = _build_schema()
        remember_known_names(S)
    return S


schema.cache_clear = _SCHEMA.clear     # type: ignore[attr-defined]  (the old lru_cache's call)


class Output(Params):
    """Where and what the run writes."""
    dir: Optional[str] = Field(None, description="run directory (default runs/<name>)")
    clients_csv: Literal["auto", "all", "participants"] = Field(
        "auto", description="rows for every client each round (a dense log), or only for the selected ones (a sparse "
        "log: the clients whose state changed); auto: all below 100,000 clients, participants from there "
        "(docs/performance.md, Fleet scale); config.yaml records the resolved value")
    events: bool = Field(False, description="also write events.csv: every client state transition (time, client, state, round, detail)")


#: fleets of at least this many clients log sparsely under `output.clients_csv: auto`
SPARSE_LOG_FROM = 100_000


def resolve_fleet_scale(sc) -> None:
    """Resolve the options whose default depends on the fleet's size, so that config.yaml
    says what ran: `output.clients_csv: auto` and a generated data set's `generation: auto`."""
    from ..workloads.keyed import GeneratedParams, is_keyed
    n = sc.clients.count
    if sc.output.clients_csv == "auto":
        sc.output.clients_csv = "participants" if n >= SPARSE_LOG_FROM else "all"
    for wl in sc.workload_list:
        if isinstance(wl.dataset, GeneratedParams) and wl.dataset.generation == "auto":
            wl.dataset.generation = "keyed" if is_keyed("auto", n) else "sequential"


def _workload_model(T: dict) -> type:
    """The workload block, typed with this build's unions `T`."""

    class Workload(Params):
        """One model's workload: dataset, partition, model, batch size."""
        dataset: T["DatasetSpec"] = Field(description="dataset block; `name` one of the registered datasets")
        partition: Optional[T["PartitionSpec"]] = Field(None, description="how the dataset is split (default: natural for datasets with their own split, else iid)")
        model: T["ModelSpec"] = Field(description="model block")
        batch_size: Annotated[Union[int, str], BeforeValidator(_batch_size)] = Field(32, description="local mini-batch size, or `full` for full-batch gradients")
        algorithm: Optional[dict] = Field(None, description="multi-model runs: this model's overrides of the algorithm block (e.g. {lr: 0.01})")
        local_steps: Optional[int] = Field(None, ge=1, description="multi-model runs: this model's local steps per round (default: the protocol's)")

    return Workload


def _clients_model(T: dict) -> type:
    """The fleet block (its device groups), typed with this build's unions `T`."""

    class Group(FiniteParams):
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
            return _check_group_sizes(groups, info.data.get("count"))

    return Clients


def _build_schema() -> type:
    """The Scenario model of the registries as they are now."""
    T = _unions()
    Workload, Clients, Network = _workload_model(T), _clients_model(T), _network_model(T)

    class Scenario(Params):
        """A flemu scenario."""
        name: Annotated[str, BeforeValidator(check_name)] = Field(
            description="run name (letters, digits, _ . -)")       # and more: names.NAME_RULE
        description: Optional[str] = Field(None, description="free text")
        seed: int = Field(0, ge=0, description="the run's one integer seed")
        workload: Optional[Workload] = Field(None, description="the workload (single-model runs)")
        workloads: Optional[list[Workload]] = Field(None, min_length=1, description="one workload per model (multi-model runs)")
        clients: Clients
        protocol: T["ProtocolSpec"] = Field(description="protocol block; `name` one of the registered protocols")
        algorithm: T["AlgorithmSpec"] = Field(description="algorithm block; `name` one of the registered algorithms")
        run: Run
        evaluation: Optional[Evaluation] = Field(None, description="per-client evaluation on each client's local test rows, with every global evaluation (absent: none; docs/fairness.md)")
        executor: T["ExecutorSpec"] = Field(default_factory=lambda: member("executor", "sequential"), description="executor block")
        plugins: Optional[list[str]] = Field(None, description="Python files (relative to this file) or modules imported before validation: they register your own components (recorded with absolute paths)")
        callbacks: Optional[list[T["CallbackSpec"]]] = Field(None, description="run callbacks (record, stop, checkpoint): registered names with their parameters, e.g. [{name: mlflow}]")
        network: Network = Field(default_factory=Network)
        output: Output = Field(default_factory=Output)
        secure_aggregation: Optional[SecureAggregationParams] = Field(None, description="secure aggregation's extra messages and round trips (SecAgg, SecAgg+; docs/algorithms/secagg.md); absent: none")
        inputs: Optional[Inputs] = Field(None, description="written by flemu into config.yaml: the files the run read (data, traces, plugins) with their SHA-256, checked by a replay (docs/reliability.md)")

        @model_validator(mode="after")
        def _one_workload_key(self):
            if (self.workload is None) == (self.workloads is None):
                raise ValueError("give exactly one of `workload` (one model) or `workloads` (a list, multi-model)")
            resolve_fleet_scale(self)
            return self

        @property
        def workload_list(self) -> list:
            return self.workloads if self.workloads is not None else [self.workload]

    return Scenario


# --------------------------------------------------------------------------- loading
parse_yaml, read_yaml = yaml_input.parse_or_explain, yaml_input.read_mapping   # (historic names)


def load(source, overrides=(), seed: Optional[int] = None, base_dir=None, plugins=(), replay=None):
    """Scenario from a path, a YAML string with a newline, a dict, or a Scenario. Its
    `plugins` (relative to the scenario's folder) and the extra `plugins` (command line:
    relative to the working directory) are imported first and recorded resolved. The files
    it reads are recorded in `inputs`; a scenario carrying `inputs` (a replay) finds them
    again and refuses changed ones, except as `replay` (an `inputs.Replay`) allows."""
    if isinstance(source, BaseModel):
        raw = dump(source)
        src = None
    elif isinstance(source, dict):
        raw = copy.deepcopy(source)
        src = None
    elif isinstance(source, str) and "\n" in source:
        raw = parse_yaml(source)
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
    opts, replaying = replay or inputs.Replay(), "inputs" in raw
    expect, folder = inputs.check(raw, Path(src).resolve().parent if src else None, opts, src)
    folder = folder if replaying else base_dir      # a replay keeps its scenario's folder
    from ..plugins import load_for
    load_for(raw, plugins, folder if folder and Path(folder).is_dir() else base_dir, src, expect, opts.trust)
    S = schema()
    found: dict = {}
    try:
        sc = S.model_validate(raw, context={"base_dir": str(base_dir) if base_dir else None, inputs.COLLECT: found})
    except ValidationError as e:
        raise ScenarioError(explain(e, raw, S), source=src) from None
    problems = cross_check(sc)
    if problems:
        raise ScenarioError(problems, source=src)
    inputs.record(sc, found, folder)
    return sc


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

"""A registered component's parameters as a hypothesis strategy.

Every component registered today has a hand-tuned strategy below (`HINTS`): values that keep a
run well under a second (few steps, small dimensions) while covering every field of its
parameter model, including the odd corners the schema allows (a step time of 1 ms, an
availability of 0, a sequence that selects nobody). A component registered later gets the
generic strategy built from its pydantic model (`from_model`), so it is fuzzed from the day it
lands; `test_fuzz.py` lists which components that is.

A strategy returns the parameter mapping (without the component's name). Components that read
a file write it into `ctx.files` and put `@file:<name>` where the path goes; the scenario's
`materialize` writes the files and substitutes their absolute paths.
"""
from __future__ import annotations

import csv
import io
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional

import annotated_types as at
from hypothesis import strategies as st
from pydantic import BaseModel

OMIT = object()          # "leave the field out" (its default applies)


@dataclass
class Ctx:
    """What a component's parameters may depend on."""
    n: int = 1                        # clients.count
    size: int = 1                     # clients in the device group being drawn
    classification: bool = True       # model 0 is a classifier (labels, FLOP counts)
    all_classification: bool = True  # every model is (the flops compute model needs that)
    protocol: str = "rounds"
    files: dict = field(default_factory=dict)   # name -> text of files the scenario needs

    def file(self, stem: str, text: str) -> str:
        name = f"{stem}_{len(self.files)}.csv"
        self.files[name] = text
        return f"@file:{name}"


def drop_omitted(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not OMIT}


def opt(strategy, p_omit: float = 0.5):
    """The field left out (its default) or drawn."""
    return st.one_of(st.just(OMIT), strategy)


def fixed_dict(**fields) -> st.SearchStrategy:
    return st.fixed_dictionaries(fields).map(drop_omitted)


def fl(lo, hi):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


def pos(lo, hi):
    """A positive float, often a round number (hand-checkable), sometimes tiny."""
    return st.one_of(st.sampled_from([v for v in (0.001, 0.01, 0.1, 0.5, 1.0, 2.0) if lo <= v <= hi]), fl(lo, hi))


def dur0(hi):
    """A duration that may be 0: 0, or at least devices/limits.py's MIN_SECONDS (shorter ones
    are refused: lost to float rounding in virtual time)."""
    return st.one_of(st.just(0.0), pos(1e-6, hi))


def prob():
    return st.one_of(st.sampled_from([0.0, 0.5, 1.0]), fl(0.0, 1.0))


REDRAW = st.sampled_from(["step", "round", "client"])


def _csv(header, rows) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


# ---------------------------------------------------------------------------- probabilities
def prob_spec(ctx: Ctx):
    """bernoulli / sine `p`: a number, one per client of the group, a distribution, or 'labels'."""
    choices = [prob(),
               st.lists(prob(), min_size=ctx.size, max_size=ctx.size),
               st.tuples(fl(0.0, 1.0), fl(0.0, 1.0)).map(lambda t: {"uniform": sorted(t)}),
               st.tuples(fl(0.2, 5.0), fl(0.2, 5.0)).map(lambda t: {"beta": list(t)})]
    if ctx.classification:
        choices.append(st.just("labels"))
    return st.one_of(*choices)


# ---------------------------------------------------------------------------- trace files
@st.composite
def step_trace(draw, ctx: Ctx):
    kind = draw(st.sampled_from(["step_time", "sample_time", "speed"]))
    lo, hi = {"step_time": (0.001, 1.0), "sample_time": (1e-5, 0.05), "speed": (1.0, 200.0)}[kind]
    clients = draw(st.integers(1, 4))
    rows = []
    for c in range(clients):
        starts = sorted(set(draw(st.lists(fl(0.0, 20.0), min_size=0, max_size=3))) | {0.0})
        rows += [(c, s, draw(pos(lo, hi))) for s in starts]
    return ctx.file("steps", _csv(["client", "start", kind], rows))


@st.composite
def link_table(draw, ctx: Ctx):
    clients = draw(st.integers(1, 4))
    rows = [(c, draw(pos(0.05, 100.0)), draw(pos(0.05, 100.0))) for c in range(clients)]
    return ctx.file("links", _csv(["client", "up_mbps", "down_mbps"], rows))


@st.composite
def round_table(draw, ctx: Ctx):
    clients, rounds = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    rows = [(r, c, draw(st.sampled_from(["1", "0", "true", "no"]))) for r in range(1, rounds + 1)
            for c in range(clients)]
    at = draw(st.integers(0, len(rows) - 1))          # someone is available once (else refused: never online)
    rows[at] = (*rows[at][:2], draw(st.sampled_from(["1", "true"])))
    return ctx.file("rounds", _csv(["round", "client", "available"], rows))


@st.composite
def interval_table(draw, ctx: Ctx):
    clients = draw(st.integers(1, 4))
    periodic = draw(st.booleans())
    rows = []
    for c in range(clients):
        t = draw(fl(0.0, 2.0))
        for _ in range(draw(st.integers(1, 3))):
            length = draw(pos(0.01, 5.0))
            rows.append([c, round(t, 6), round(t + length, 6)])
            t += length + draw(fl(0.0, 3.0))
        if periodic:
            span = rows[-1][2] + draw(fl(0.1, 3.0))
            for r in rows:
                if r[0] == c:
                    r.append(round(span, 6))
    header = ["client", "start", "end"] + (["period"] if periodic else [])
    return ctx.file("online", _csv(header, rows))


# ---------------------------------------------------------------------------- components
def _compute(ctx):
    return {
        "constant": fixed_dict(step_time=pos(0.001, 2.0)),
        "instant": st.just({}),
        "lognormal": fixed_dict(mean_step_time=pos(0.001, 2.0), sigma=pos(0.01, 2.0), redraw=opt(REDRAW)),
        "normal": fixed_dict(mean_step_time=pos(0.001, 2.0), std=pos(0.001, 1.0), floor=opt(pos(0.0001, 0.5)),
                             redraw=opt(REDRAW)),
        "uniform": st.tuples(pos(0.001, 2.0), pos(0.001, 2.0), opt(REDRAW)).map(
            lambda t: drop_omitted({"low": min(t[:2]), "high": max(t[:2]), "redraw": t[2]})),
        "exponential": fixed_dict(mean_step_time=pos(0.001, 2.0), redraw=opt(REDRAW)),
        "iterations": st.one_of(
            fixed_dict(fixed=st.integers(0, 4), period=opt(pos(0.1, 2.0))),
            fixed_dict(mean=fl(-1.0, 5.0), std=opt(fl(0.0, 2.0)), period=opt(pos(0.1, 2.0)))),
        "flops": st.one_of(fixed_dict(profile=st.sampled_from(
            ["low_end_phone", "high_end_phone", "laptop_cpu", "edge_gpu", "datacenter_gpu"])),
            fixed_dict(gflops=pos(1e-6, 10.0))),
        "trace": step_trace(ctx).map(lambda p: {"path": p}),
    }


LAT = dict(jitter=opt(dur0(0.2)), jitter_dist=opt(st.sampled_from(["exponential", "uniform", "lognormal"])),
           jitter_sigma=opt(pos(0.1, 2.0)))


def _network(ctx):
    return {
        "link": fixed_dict(latency=dur0(0.5), up_mbps=pos(0.01, 100.0),
                           down_mbps=pos(0.01, 100.0), spread=opt(fl(0.0, 1.0)), **LAT),
        "instant": st.just({}),
        "link_trace": st.tuples(link_table(ctx), dur0(0.5),
                                fixed_dict(**LAT)).map(lambda t: {"path": t[0], "latency": t[1], **t[2]}),
    }


def _availability(ctx):
    return {
        "always": st.just({}),
        "bernoulli": fixed_dict(p=prob_spec(ctx)),
        "sine": fixed_dict(p=opt(prob_spec(ctx)), amplitude=opt(prob()), period=opt(pos(0.5, 30.0)),
                           phase=opt(fl(-7.0, 7.0))),
        "markov": fixed_dict(p_on_off=pos(0.01, 1.0), p_off_on=pos(0.01, 1.0)),
        "round_trace": fixed_dict(path=round_table(ctx), repeat=opt(st.booleans())),
        "markov_time": fixed_dict(mean_on=pos(0.05, 20.0), mean_off=pos(0.05, 20.0)),
        "diurnal": diurnal(),
        "trace": fixed_dict(path=interval_table(ctx), repeat=opt(st.booleans())),
    }


@st.composite
def diurnal(draw):
    """Probabilities kept within [0.05, 0.95]: at 0 or 1 in every slot the model scans its
    max_scan_slots (10^6 slots per client, seconds each) before it answers `never` (a slow corner
    make fuzz found, documented in the README, not a wrong result)."""
    mean = draw(fl(0.1, 0.9))
    amp = draw(fl(0.0, min(mean, 1.0 - mean) - 0.05))
    return drop_omitted({"mean": mean, "amplitude": amp, "period": draw(opt(pos(1.0, 200.0))),
                         "phase": draw(opt(fl(-7.0, 7.0))), "slot": draw(opt(pos(0.1, 50.0))),
                         "spread": draw(opt(prob()))})


def k_or_fraction(ctx):
    return st.one_of(fixed_dict(k=st.integers(1, ctx.n)), fixed_dict(fraction=st.one_of(st.just(1.0), fl(0.01, 1.0))))


def _selection(ctx):
    ids = st.integers(0, ctx.n - 1)
    return {
        "all": st.just({}),
        "uniform": k_or_fraction(ctx),
        "cyclic": k_or_fraction(ctx),
        "reshuffled_cyclic": k_or_fraction(ctx),
        "biased": st.one_of(
            fixed_dict(p=st.one_of(prob(), st.lists(prob(), min_size=ctx.n, max_size=ctx.n))),
            fixed_dict(start=prob(), step=opt(fl(0.0, 0.5)), every=opt(st.integers(1, 5)), floor=opt(prob()))),
        "sequence": fixed_dict(sets=st.lists(st.lists(ids, max_size=min(ctx.n, 6)), min_size=1, max_size=4),
                               repeat=opt(st.booleans())),
    }


def _executor(ctx):
    common = dict(device=opt(st.just("cpu")), dtype=opt(st.sampled_from(["float32", "float64"])))
    return {
        "sequential": fixed_dict(**common),
        "batched": fixed_dict(chunk=opt(st.integers(1, 8)), **common),
        "auto": fixed_dict(chunk=opt(st.integers(1, 8)), min_jobs=opt(st.integers(2, 6)),
                           max_step_macs=opt(pos(1.0, 1e7)), **common),
    }


LR = st.one_of(st.sampled_from([0.01, 0.05, 0.1]), fl(0.001, 0.3))
SCHED = dict(lr=LR, server_lr=opt(pos(0.1, 1.5)), lr_schedule=opt(st.sampled_from(["constant", "inv_sqrt"])))
FEDAVG = dict(lr=LR, momentum=opt(fl(0.0, 0.9)), weight_decay=opt(fl(0.0, 0.01)), lr_decay=opt(fl(0.5, 1.0)),
              lr_offset=opt(pos(0.5, 100.0)), weighting=opt(st.sampled_from(["samples", "uniform"])),
              server_lr=opt(pos(0.1, 1.5)))


def _constants():
    return st.one_of(
        st.just(OMIT),
        fixed_dict(mode=st.just("estimate"), ema=opt(fl(0.0, 0.99)),
                   sigma2_unit=opt(st.sampled_from(["batch", "sample"]))),
        fixed_dict(mode=st.just("fixed"), L=pos(0.1, 10.0), G2=pos(0.1, 10.0), sigma2=pos(0.1, 10.0)),
        fixed_dict(mode=st.just("slope"), s=fl(-2.0, 2.0)),
        fixed_dict(mode=st.just("proportional")))


def _tsfl(extra=None):
    @st.composite
    def draw_it(draw):
        clip = draw(st.sampled_from(["waterfill", "none"]))
        d = {"lr": draw(LR), "constants": draw(_constants()), "clip": clip,
             "cap_theta": draw(opt(pos(0.5, 4.0))) if clip == "waterfill" else OMIT}
        if extra:
            d.update({k: draw(v) for k, v in extra.items()})
        return drop_omitted(d)
    return draw_it()


def _algorithm(ctx):
    return {
        "fedavg": fixed_dict(**FEDAVG),
        "fedprox": fixed_dict(**FEDAVG, mu=opt(fl(0.0, 1.0))),
        "fedumf": fixed_dict(**{**FEDAVG, "weighting": opt(st.sampled_from(["uniform", "data_size", "samples"]))},
                             alpha=opt(prob()), fusion_gate=opt(st.sampled_from(["aggregated", "selected"])),
                             unfinished=opt(st.sampled_from(["skip", "wait", "partial"])),
                             max_fusion_age=opt(st.integers(1, 3))),
        "fedasync": fixed_dict(lr=LR, alpha=opt(pos(0.01, 1.0)),
                               staleness=opt(fixed_dict(function=opt(st.sampled_from(["constant", "polynomial", "hinge"])),
                                                        a=opt(pos(0.1, 2.0)), b=opt(fl(0.0, 5.0)))),
                               staleness_offset=opt(st.integers(0, 2)), prox_rho=opt(fl(0.0, 0.1)),
                               buffer=opt(st.integers(1, 3)), buffer_mode=opt(st.sampled_from(["model", "delta"])),
                               server_lr=opt(pos(0.1, 1.5))),
        "dms": _tsfl({"zero_tau": opt(st.sampled_from(["include", "exclude"]))}),
        "tsfl_optimal": _tsfl(),
        "fedasync_interval": fixed_dict(lr=LR, gamma=opt(fl(0.0, 0.99)), prox_rho=opt(fl(0.0, 0.1))),
        "fedau": fixed_dict(**SCHED, cutoff=opt(st.integers(1, 5))),
        "fedavg_active": fixed_dict(**SCHED, weighting=opt(st.sampled_from(["samples", "uniform"])),
                                    momentum=opt(fl(0.0, 0.9)), weight_decay=opt(fl(0.0, 0.01))),
        "fedawe": fixed_dict(**SCHED, clip_norm=opt(pos(0.01, 10.0))),
        "fedsum_b": fixed_dict(**SCHED, step_on_empty=opt(st.booleans())),
        "fedsum": fixed_dict(**SCHED, step_on_empty=opt(st.booleans())),
        "fedsum_cr": fixed_dict(**SCHED, step_on_empty=opt(st.booleans())),
        "scaffold": fixed_dict(**SCHED, single_uplink=opt(st.booleans())),
        "mifa": fixed_dict(**SCHED),
        "fedvarp": fixed_dict(**SCHED),
    }


KIND_HINTS: dict[str, Callable[[Ctx], dict]] = {
    "compute": _compute, "network": _network, "availability": _availability, "selection": _selection,
    "executor": _executor, "algorithm": _algorithm,
}

# Components the generator does not draw, with the reason (the test lists them).
NOT_DRAWN = {
    ("dataset", "mnist5k"): "28x28 CNN-sized data: a run takes seconds, not well under one (covered by the "
                            "quickstart and the paper tests)",
    ("model", "cnn_mnist"): "needs 28x28 images (mnist5k); seconds per run",
    ("model", "cnn_mcmahan"): "1.7 M parameters: seconds per run",
    ("model", "cnn_fmnist"): "needs 28x28 images; seconds per run",
    ("model", "vgg11"): "9 M parameters (BatchNorm): seconds per step on a CPU",
    ("model", "resnet18"): "11 M parameters (BatchNorm): seconds per step on a CPU",
}


def hinted(kind: str, name: str, ctx: Ctx) -> Optional[st.SearchStrategy]:
    f = KIND_HINTS.get(kind)
    if f is None:
        return None
    return f(ctx).get(name)


def component(kind: str, name: str, ctx: Ctx) -> st.SearchStrategy:
    """The parameters of a registered component: its hand-tuned strategy, else the generic one."""
    s = hinted(kind, name, ctx)
    if s is not None:
        return s
    from emulator import registry
    return from_model(registry.get(kind, name).params)


# ---------------------------------------------------------------------------- generic
def _bounds(meta) -> tuple:
    lo = hi = None
    lo_open = hi_open = False
    for m in meta:
        if isinstance(m, at.Ge):
            lo = m.ge
        elif isinstance(m, at.Gt):
            lo, lo_open = m.gt, True
        elif isinstance(m, at.Le):
            hi = m.le
        elif isinstance(m, at.Lt):
            hi, hi_open = m.lt, True
    return lo, hi, lo_open, hi_open


def from_annotation(ann, meta=()) -> Optional[st.SearchStrategy]:
    """A strategy for one field from its annotation and constraints (None: no idea)."""
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Annotated:
        return from_annotation(args[0], tuple(meta) + tuple(args[1:]))
    if origin is Literal:
        return st.sampled_from(list(args))
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        parts = [from_annotation(a, meta) for a in args if a is not type(None)]
        parts = [p for p in parts if p is not None]
        return st.one_of(*parts) if parts else None
    if ann is bool:
        return st.booleans()
    lo, hi, lo_open, hi_open = _bounds(meta)
    if ann is int:
        a = 0 if lo is None else int(math.floor(lo)) + (1 if lo_open else 0)
        b = a + 4 if hi is None else int(math.ceil(hi)) - (1 if hi_open else 0)
        return st.integers(a, min(b, a + 4))
    if ann is float:
        a = 0.0 if lo is None else float(lo)
        b = a + 2.0 if hi is None else float(hi)
        return st.floats(a, b, exclude_min=lo_open, exclude_max=hi_open, allow_nan=False, allow_infinity=False)
    if ann is str:
        return st.sampled_from(["a", "b"])
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return from_model(ann)
    if origin is list:
        inner = from_annotation(args[0]) if args else None
        return None if inner is None else st.lists(inner, min_size=1, max_size=3)
    return None


def from_model(model: type) -> st.SearchStrategy:
    """Generic parameters of a pydantic model: required fields drawn, optional ones left at their
    default or drawn; candidates that its own validators refuse are filtered out."""
    fields = {}
    for name, f in model.model_fields.items():
        if name in ("name", "model"):
            continue
        s = from_annotation(f.annotation, f.metadata)
        if f.is_required():
            fields[name] = s if s is not None else st.nothing()
        elif s is not None:
            fields[name] = opt(s)

    def valid(d) -> bool:
        try:
            model.model_validate(d)
            return True
        except Exception:      # noqa: BLE001 - its own validators refused the combination
            return False
    return fixed_dict(**fields).filter(valid)


def generic_components() -> list:
    """(kind, name) of registered components without a hand-tuned strategy (fuzzed generically)."""
    from emulator import registry
    out = []
    for kind in KIND_HINTS:
        for name in registry.table(kind):
            if hinted(kind, name, Ctx()) is None:
                out.append((kind, name))
    return out

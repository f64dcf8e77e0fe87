"""Whole valid scenarios as a hypothesis strategy (`scenarios()`), and `materialize` that writes
the files a drawn scenario needs.

What is drawn: a fleet of 1-50 clients in 1-4 device groups (counts or fractions), every
compute, link and availability model, energy; fleet-wide message accounting, a shared server
link and a networkx topology; every protocol with every selection and wait mode, and every
algorithm under each protocol its class `supports`; one workload, or 1-3 for `multi_model`
(with per-workload algorithm overrides and local steps); `logreg` / a small `mlp` on `digits`,
`synthetic` or a tiny user file (`npz`, `mnist_idx`), or the `quadratic` model on `quadratic` /
`client_quadratic`; a few rounds of a few steps, so that a run takes well under a second;
the run block, the executor and the output switches.

A drawn scenario is valid: it passes `emulator.scenario.load`. What a run must then do is in
`checks.py`.
"""
from __future__ import annotations

import copy
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from hypothesis import assume, strategies as st

from . import params as P
from .params import OMIT, Ctx, drop_omitted, fl, opt, pos, prob

CLASSIFIER_DATA = ("digits", "synthetic", "npz", "mnist_idx")
QUADRATIC_DATA = ("quadratic", "client_quadratic")


@dataclass
class Drawn:
    """A drawn scenario (a plain mapping, file paths as `@file:<name>`) and its files."""
    scenario: dict
    files: dict = field(default_factory=dict)       # name -> str or bytes

    def __repr__(self):       # what hypothesis prints for a falsifying example: paste-able YAML
        import yaml
        files = "".join(f"\n# file {k}:\n" + (v if isinstance(v, str) else f"<{len(v)} bytes>")
                        for k, v in self.files.items())
        return "\n" + yaml.safe_dump(self.scenario, sort_keys=False, default_flow_style=None, width=110) + files


def materialize(drawn: Drawn, folder) -> dict:
    """Write the drawn files into `folder`; return a copy of the scenario with their absolute paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, data in drawn.files.items():
        f = folder / name
        if isinstance(data, bytes):
            f.write_bytes(data)
        else:
            f.write_text(data)
        paths[f"@file:{name}"] = str(f.resolve())

    def sub(x):
        if isinstance(x, dict):
            return {k: sub(v) for k, v in x.items()}
        if isinstance(x, list):
            return [sub(v) for v in x]
        if isinstance(x, str) and x in paths:
            return paths[x]
        return x
    return sub(copy.deepcopy(drawn.scenario))


def group_sizes(n: int, groups: list) -> list:
    from emulator.workloads.partitions import largest_remainder
    if "count" in groups[0]:
        return [g["count"] for g in groups]
    return list(largest_remainder(np.array([g["fraction"] for g in groups]), n))


# ---------------------------------------------------------------------------- data files
def _npz_bytes(xtr, ytr, xte, yte) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
    return buf.getvalue()


def _idx_bytes(arr: np.ndarray, magic: int) -> bytes:
    head = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    return head + arr.astype(np.uint8).tobytes()


@st.composite
def image_files(draw, ctx: Ctx, kind: str) -> dict:
    """A tiny image data set (4x4 or 5x5 grey, or 4x4x3 for npz) written as a user file."""
    n_train = draw(st.integers(5 * ctx.n + 1, 5 * ctx.n + 40))   # enough for 3 shards or 5 samples per client
    n_test = draw(st.integers(1, 12))
    classes = draw(st.integers(2, 4))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    side = draw(st.sampled_from([4, 5]))
    shape = (side, side, 3) if kind == "npz" and draw(st.booleans()) else (side, side)
    xtr = rng.integers(0, 256, (n_train, *shape)).astype(np.uint8)
    xte = rng.integers(0, 256, (n_test, *shape)).astype(np.uint8)
    ytr = rng.integers(0, classes, n_train).astype(np.uint8)
    yte = rng.integers(0, classes, n_test).astype(np.uint8)
    extra = {"normalize": draw(opt(st.booleans())), "max_train": draw(opt(st.integers(5 * ctx.n, n_train + 5)))}
    if kind == "npz":
        name = f"data_{len(ctx.files)}.npz"
        ctx.files[name] = _npz_bytes(xtr, ytr, xte, yte)
        return drop_omitted({"name": "npz", "path": f"@file:{name}", **extra})
    out = {"name": "mnist_idx"}
    for key, arr, magic in (("train_images", xtr, 0x803), ("train_labels", ytr, 0x801),
                            ("test_images", xte, 0x803), ("test_labels", yte, 0x801)):
        name = f"{key}_{len(ctx.files)}.idx"
        ctx.files[name] = _idx_bytes(arr, magic)
        out[key] = f"@file:{name}"
    return drop_omitted({**out, **extra})


# ---------------------------------------------------------------------------- workloads
@st.composite
def partition(draw, ctx: Ctx, dataset: str, natural: bool):
    names = ["iid", "dirichlet", "shards", "lognormal"] + (["natural"] if natural else [])
    name = draw(st.sampled_from(names + [None]))           # None: the default (natural / iid)
    if name is None:
        return OMIT
    if name == "dirichlet":
        sizes = draw(opt(st.one_of(st.builds(lambda s: {"lognormal": s}, pos(0.05, 1.5)),
                                   st.builds(lambda p: {"pattern": p}, st.lists(st.integers(1, 5), min_size=1, max_size=3)))))
        return drop_omitted({"name": name, "alpha": draw(pos(0.05, 10.0)), "min_size": draw(opt(st.integers(0, 2))),
                             "sizes": sizes})
    if name == "shards":
        return drop_omitted({"name": name, "classes_per_client": draw(opt(st.integers(1, 3)))})
    if name == "lognormal":
        return drop_omitted({"name": name, "sigma": draw(pos(0.05, 1.5)), "min_size": draw(opt(st.integers(1, 2)))})
    return {"name": name}


@st.composite
def workload(draw, ctx: Ctx, dataset: str, multi: bool, algorithm: str):
    if dataset in QUADRATIC_DATA:
        if dataset == "quadratic":
            ds = drop_omitted({"name": dataset, "block": draw(opt(st.integers(1, 3))), "mu": draw(opt(pos(1e-4, 1.0))),
                               "grad_noise": draw(opt(st.one_of(st.just(0.0), pos(0.001, 0.5)))),
                               "noise_samples": draw(opt(st.integers(2, 6)))})
        else:
            d = draw(st.integers(1, 4))
            if draw(st.booleans()):
                rows = st.lists(pos(0.1, 3.0), min_size=d, max_size=d)
                given = {"a": draw(st.lists(rows, min_size=ctx.n, max_size=ctx.n)),
                         "c": draw(st.lists(st.lists(fl(-2.0, 2.0), min_size=d, max_size=d), min_size=ctx.n, max_size=ctx.n))}
            else:
                lo, hi = sorted(draw(st.tuples(pos(0.1, 3.0), pos(0.1, 3.0))))
                given = {"dim": d, "a_range": draw(opt(st.just([lo, hi]))), "c_std": draw(opt(fl(0.0, 2.0)))}
            ds = drop_omitted({"name": dataset, **given, "init": draw(opt(st.lists(fl(-2.0, 2.0), min_size=d, max_size=d))),
                               "grad_noise": draw(opt(st.one_of(st.just(0.0), pos(0.001, 0.5)))),
                               "noise_samples": draw(opt(st.integers(2, 6)))})
        wl = {"dataset": ds, "partition": draw(opt(st.just({"name": "natural"}))), "model": {"name": "quadratic"}}
    else:
        if dataset == "digits":
            ds = drop_omitted({"name": "digits", "test_fraction": draw(opt(fl(0.1, 0.3)))})
        elif dataset == "synthetic":
            ds = drop_omitted({"name": "synthetic", "alpha": draw(opt(fl(0.0, 2.0))), "beta": draw(opt(fl(0.0, 2.0))),
                               "iid": draw(opt(st.booleans())), "dim": draw(st.integers(1, 10)),
                               "classes": draw(st.integers(2, 5)), "scale": draw(opt(st.sampled_from(["std", "var"]))),
                               "max_samples_per_client": draw(st.integers(12, 40)),
                               "test_fraction": draw(opt(fl(0.1, 0.5)))})
        else:
            ds = draw(image_files(ctx, dataset))
        hidden = st.one_of(st.integers(1, 6), st.lists(st.integers(1, 5), min_size=1, max_size=2))
        model = draw(st.one_of(st.just({"name": "logreg"}), st.builds(lambda h: {"name": "mlp", "hidden": h}, hidden)))
        wl = {"dataset": ds, "partition": draw(partition(ctx, dataset, natural=dataset == "synthetic")), "model": model}
    wl["batch_size"] = draw(opt(st.one_of(st.integers(1, 16), st.just("full"))))
    if multi:
        wl["algorithm"] = draw(opt(algorithm_overrides(algorithm)))
        wl["local_steps"] = draw(opt(st.integers(1, 3)))
    return drop_omitted(wl)


def algorithm_overrides(algorithm: str):
    from emulator import registry
    fields = registry.get("algorithm", algorithm).params.model_fields
    keys = [k for k in ("lr", "server_lr", "momentum", "weight_decay", "lr_decay") if k in fields]
    vals = {"lr": P.LR, "server_lr": pos(0.1, 1.5), "momentum": fl(0.0, 0.9), "weight_decay": fl(0.0, 0.01),
            "lr_decay": fl(0.5, 1.0)}
    return st.fixed_dictionaries({}, optional={k: vals[k] for k in keys})


# ---------------------------------------------------------------------------- fleet and network
@st.composite
def fleet(draw, ctx: Ctx):
    n = ctx.n
    n_groups = draw(st.integers(1, 4))
    by_count = draw(st.booleans()) and n_groups <= n
    names = [f"g{i}" for i in range(n_groups)]
    if by_count:
        cuts = sorted(draw(st.lists(st.integers(1, n - 1), min_size=n_groups - 1, max_size=n_groups - 1,
                                    unique=True))) if n_groups > 1 else []
        counts = np.diff([0, *cuts, n]).tolist()
        groups = [{"name": nm, "count": int(c)} for nm, c in zip(names, counts)]
    else:
        raw = draw(st.lists(st.integers(1, 8), min_size=n_groups, max_size=n_groups))
        fr = [r / sum(raw) for r in raw]
        fr[-1] = 1.0 - sum(fr[:-1])                          # sums to 1 within the validator's 1e-9
        groups = [{"name": nm, "fraction": f} for nm, f in zip(names, fr)]
    sizes = group_sizes(n, groups)
    from emulator import registry
    compute_names = sorted(n_ for n_ in registry.table("compute") if n_ != "flops" or ctx.all_classification)
    for g, size in zip(groups, sizes):
        gctx = Ctx(n=n, size=int(size), classification=ctx.classification,
                   all_classification=ctx.all_classification, protocol=ctx.protocol, files=ctx.files)
        cname = draw(st.sampled_from(compute_names))
        g["compute"] = {"model": cname, **draw(P.component("compute", cname, gctx))}
        nname = draw(st.sampled_from(sorted(registry.table("network"))))
        g["network"] = {"model": nname, **draw(P.component("network", nname, gctx))}
        aname = draw(st.sampled_from(sorted(registry.table("availability"))))
        if aname != "always" or draw(st.booleans()):
            g["availability"] = {"model": aname, **draw(P.component("availability", aname, gctx))}
        if draw(st.integers(0, 4)) == 0:
            g["energy"] = drop_omitted({"compute_watts": draw(fl(0.0, 10.0)), "transmit_watts": draw(fl(0.0, 5.0)),
                                        "idle_watts": draw(opt(fl(0.0, 1.0)))})
    return {"count": n, "groups": groups}


@st.composite
def network_settings(draw, groups: list):
    net = {"bytes_per_param": draw(opt(st.integers(1, 8))), "overhead_bytes": draw(opt(st.integers(0, 2000))),
           "compression": draw(opt(st.fixed_dictionaries({}, optional={"up": pos(0.01, 1.0), "down": pos(0.01, 1.0)})))}
    if draw(st.integers(0, 3)) == 0:
        net["server_link"] = drop_omitted({"up_mbps": draw(pos(0.05, 100.0)), "down_mbps": draw(pos(0.05, 100.0)),
                                           "latency": draw(opt(P.dur0(0.2)))})
    if draw(st.integers(0, 3)) == 0:
        nodes = [f"n{i}" for i in range(draw(st.integers(1, 4)))]
        node = st.sampled_from(nodes)
        # a spanning path keeps every node reachable from the server; extra links make cycles
        links = [{"a": a, "b": b} for a, b in zip(nodes, nodes[1:])]
        links += draw(st.lists(st.builds(lambda a, b: {"a": a, "b": b}, node, node), max_size=2))
        for link in links:
            link["mbps"] = draw(pos(0.05, 100.0))
            if draw(st.booleans()):
                link["latency"] = draw(P.dur0(0.1))
        attach = draw(st.dictionaries(st.sampled_from([g["name"] for g in groups]), node, max_size=len(groups)))
        net["topology"] = drop_omitted({"nodes": nodes, "links": links, "server": draw(node),
                                        "attach": attach if attach else OMIT})
    return drop_omitted(net)


# ---------------------------------------------------------------------------- protocols
def local_work(ctx: Ctx):
    return st.one_of(st.builds(lambda s: {"local_steps": s}, st.integers(0, 3)),
                     st.builds(lambda e: {"local_epochs": e}, fl(0.001, 0.05)))


@st.composite
def selection(draw, ctx: Ctx):
    from emulator import registry
    name = draw(st.sampled_from(sorted(registry.table("selection"))))
    return {"model": name, **draw(P.component("selection", name, ctx))}


@st.composite
def wait_mode(draw, ctx: Ctx, first_k: bool = True):
    modes = ["all", "deadline"] + (["first_k"] if first_k else [])
    mode = draw(st.sampled_from(modes))
    if mode == "all":
        return draw(st.sampled_from(["all", {"mode": "all"}]))
    if mode == "deadline":
        return {"mode": "deadline", "seconds": draw(pos(0.01, 5.0))}
    return {"mode": "first_k", "k": draw(st.integers(1, ctx.n))}


def _bounded_iterations(groups) -> bool:
    """Every group's compute model bounds the iterations that fit in an interval (so that leaving
    `max_iterations` out cannot ask for thousands of steps)."""
    for g in groups:
        c = g["compute"]
        if c["model"] == "iterations":
            continue
        if c["model"] == "constant" and c["step_time"] >= 0.05:
            continue
        if c["model"] == "uniform" and c["low"] >= 0.05:
            continue
        return False
    return True


@st.composite
def protocol(draw, ctx: Ctx, name: str, groups: list, n_models: int):
    if name == "rounds":
        return drop_omitted({"name": name, **draw(local_work(ctx)), "select": draw(opt(selection(ctx))),
                             "wait": draw(opt(wait_mode(ctx))),
                             "broadcast": draw(opt(st.sampled_from(["unicast", "multicast"])))})
    if name == "intervals":
        bounded = _bounded_iterations(groups)
        interval = draw(pos(0.05, 5.0))
        max_it = draw(st.integers(0, 3)) if not bounded or draw(st.booleans()) else OMIT
        sizes = OMIT
        if draw(st.integers(0, 3)) == 0:
            m = draw(st.integers(1, 3))
            sizes = drop_omitted({"mean": draw(st.lists(pos(1.0, 30.0), min_size=m, max_size=m)),
                                  "std": draw(st.lists(fl(0.0, 5.0), min_size=m, max_size=m)),
                                  "redraw": draw(opt(st.sampled_from(["per_interval", "once"])))})
        return drop_omitted({"name": name, "interval": interval,
                             "iteration": draw(opt(st.sampled_from(["epoch", "batch"]))),
                             "max_iterations": max_it, "min_iterations": draw(opt(st.integers(0, 2))),
                             "select": draw(opt(selection(ctx))), "data_sizes": sizes})
    if name == "async":
        return {"name": name, **draw(local_work(ctx))}
    if name == "multi_model":
        M = n_models
        gain = drop_omitted({
            "metric": draw(opt(st.sampled_from(["test_acc", "test_loss", "gap", "dist_to_opt", "full_train_acc"]))),
            "eps": draw(opt(st.one_of(fl(0.0, 1.0), st.lists(fl(0.0, 1.0), min_size=M, max_size=M)))),
            "hit_rule": draw(opt(st.sampled_from(["simultaneous", "max_first_hit", "first_model"]))),
            "T1": draw(opt(pos(0.5, 10.0))), "tau1": draw(opt(pos(0.5, 10.0))),
            "stop_at_target": draw(opt(st.booleans()))})
        assignment = draw(st.sampled_from(["mfa_rand", "mfa_rr", "sequential"]))
        k = draw(opt(st.integers(1, ctx.n)))
        unequal = draw(opt(st.booleans()))
        if assignment != "sequential" and (ctx.n if k is OMIT else k) % M and unequal is not True:
            unequal = True                  # K clients must split into M equal groups otherwise (A5)
        return drop_omitted({"name": name, **draw(local_work(ctx)), "assignment": assignment, "k": k,
                             "rr_resample": draw(opt(st.sampled_from(["frame", "round"]))),
                             "allow_unequal_groups": unequal,
                             "rounds_per_model": draw(opt(st.integers(1, 3))),
                             "init": draw(opt(st.sampled_from(["auto", "zeros", "framework"]))),
                             "wait": draw(opt(wait_mode(ctx, first_k=False))), "gain": gain or OMIT})
    # a protocol registered later: its parameters from its model
    return {"name": name, **draw(P.component("protocol", name, ctx))}


# ---------------------------------------------------------------------------- the scenario
@st.composite
def scenarios(draw, protocols=None, algorithms=None, max_clients: int = 50):
    """A valid scenario (`Drawn`). `protocols` / `algorithms` restrict the draw."""
    from emulator import registry
    protos = sorted(protocols or registry.table("protocol"))
    proto = draw(st.sampled_from(protos))
    algos = sorted(n for n, e in registry.table("algorithm").items()
                   if proto in e.factory.supports and (algorithms is None or n in algorithms))
    assume(algos)
    algo = draw(st.sampled_from(algos))
    multi = bool(getattr(registry.get("protocol", proto).factory, "multi_model", False))
    n = draw(st.one_of(st.integers(1, 6), st.integers(1, max_clients)))
    M = draw(st.integers(1, 3)) if multi else 1
    datasets = [draw(st.sampled_from(CLASSIFIER_DATA + QUADRATIC_DATA)) for _ in range(M)]
    ctx = Ctx(n=n, protocol=proto, classification=datasets[0] in CLASSIFIER_DATA,
              all_classification=all(d in CLASSIFIER_DATA for d in datasets))
    wls = [draw(workload(ctx, d, multi, algo)) for d in datasets]
    clients = draw(fleet(ctx))
    sc = {"name": "fuzz", "seed": draw(st.integers(0, 2**31 - 1))}
    if multi:
        sc["workloads"] = wls
    else:
        sc["workload"] = wls[0]
    sc["clients"] = clients
    sc["protocol"] = draw(protocol(ctx, proto, clients["groups"], M))
    sc["algorithm"] = {"name": algo, **draw(P.component("algorithm", algo, ctx))}
    sc["run"] = draw(run_block(ctx, proto, sc["protocol"], clients["groups"]))
    ex = draw(st.sampled_from(sorted(registry.table("executor"))))
    sc["executor"] = {"name": ex, **draw(P.component("executor", ex, ctx))}
    net = draw(network_settings(clients["groups"]))
    if net:
        sc["network"] = net
    out = drop_omitted({"clients_csv": draw(opt(st.sampled_from(["all", "participants"]))),
                        "events": draw(opt(st.booleans()))})
    if out:
        sc["output"] = out
    return Drawn(sc, dict(ctx.files))


# availability in continuous time: a client may go offline before any of its work completes
# (on periods of 0.1 s against a 2 s download): progress is possible but can take ~1e9 attempts,
# a run no budget of rounds ends (make fuzz drew one: async, markov_time on 0.1 s / off 1 s,
# 0.01 Mbit/s downlink). Such fleets always get a virtual-time budget.
CONTINUOUS = ("markov_time", "diurnal", "trace")


@st.composite
def run_block(draw, ctx: Ctx, proto: str, pblock: dict, groups=()):
    run = {}
    timed = any(isinstance(g.get("availability"), dict) and g["availability"].get("model") in CONTINUOUS
                for g in groups)
    if proto == "intervals" and draw(st.integers(0, 3)) == 0:
        # a virtual-time budget alone: intervals take exactly `interval` each, so few of them
        run["virtual_time"] = pblock["interval"] * draw(fl(0.5, 4.0))
    else:
        run["rounds"] = draw(st.integers(1, 4))
        if timed or draw(st.integers(0, 3)) == 0:
            run["virtual_time"] = draw(pos(0.01, 10.0)) if not timed else draw(pos(0.01, 60.0))
    run["eval_every"] = draw(opt(st.integers(1, 3)))
    run["eval_train"] = draw(opt(st.booleans()))
    run["eval_every_seconds"] = draw(opt(pos(0.05, 5.0))) if draw(st.integers(0, 3)) == 0 else OMIT
    run["target_accuracy"] = draw(opt(pos(0.05, 1.0)))
    return drop_omitted(run)

"""Checks across the blocks of a validated scenario (what no single block's model can see):
the algorithm runs under the protocol, several workloads only under a multi-model protocol,
selection and wait counts within the fleet, topology attachments name groups. Each problem is
located at the YAML path of the field to change."""
from __future__ import annotations

from pydantic import ValidationError

from . import registry
from .validation_errors import explain


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
    if sc.workloads is not None and not registry.get("protocol", proto).factory.multi_model:
        multi = sorted(n for n, e in registry.table("protocol").items() if e.factory.multi_model)
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
    assignment = getattr(sc.protocol, "assignment", None)      # multi-model equal groups (docs/algorithms/multimodel.md A5)
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

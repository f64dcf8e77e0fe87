"""Checks across the blocks of a validated scenario (what no single block's model can see):
the algorithm runs under the protocol, several workloads only under a multi-model protocol,
the counts of every block within the fleet (each block's declared `Params.fleet_problems`:
selection and wait counts, client ids), topology attachments name groups. Each problem is
located at the YAML path of the field to change."""
from __future__ import annotations

from pydantic import ValidationError

from .. import registry
from ..codecs.exchange import ExchangeCodec
from .secure_aggregation import secure_aggregation_problems
from .selection_params import selection_problems
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
    protocol, every block's declared fleet problems (`Params.fleet_problems`: selection and
    wait counts within the fleet), topology attachments name groups."""
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
    ev = sc.evaluation
    if ev is not None and ev.charge and not registry.get("protocol", proto).factory.charges_evaluation:
        able = sorted(n for n, e in registry.table("protocol").items() if e.factory.charges_evaluation)
        problems.append(("evaluation.charge", f"protocol.name {proto!r} has no pause between rounds to hold a "
                                              f"charged evaluation in; charge: true works under {', '.join(able)} "
                                              "(or leave charge: false: the evaluation is then off the clock)"))
    problems += sc.fleet_problems("", registry.FleetSize(sc.clients.count, len(sc.workload_list)))
    problems += selection_problems(sc)
    problems += secure_aggregation_problems(sc)
    problems += codec_problems(sc, algo)
    topo = sc.network.topology
    if topo is not None:
        groups = {g.name for g in sc.clients.groups}
        unknown = sorted(set(topo.attach) - groups)
        if unknown:
            problems.append(("network.topology.attach", f"names unknown groups {unknown}; groups are {sorted(groups)}"))
    return problems


def codec_problems(sc, algo) -> list:
    """`network.codec` (docs/algorithms/compression.md 1.1, 1.4): not beside a compression ratio
    of the same direction; on the download only a codec that needs no reference; on the upload
    a codec that changes values only for an algorithm that declares its `up_reference`."""
    block = sc.network.codec
    if block is None:
        return []
    problems = []
    for d in ("up", "down"):
        spec = getattr(block, d)
        if spec is None:
            continue
        cls = registry.get("codec", spec.name).factory
        if getattr(sc.network.compression, d) != 1.0:
            problems.append((f"network.compression.{d}", f"is {getattr(sc.network.compression, d):g} and "
                             f"network.codec.{d} is {spec.name!r}: give one (the codec `ratio` is the compression ratio)"))
        if d == "down" and cls.relative:
            able = sorted(n for n, e in registry.table("codec").items() if not e.factory.relative)
            problems.append(("network.codec.down", f"{spec.name!r} encodes an update, and the download carries the "
                             f"model, which the clients hold no reference for; on the download use one of: {', '.join(able)}"))
        if d == "up" and cls.changes_values and algo.up_reference not in ("start", "zero"):
            problems.append(("network.codec.up", f"algorithm {sc.algorithm.name!r} does not declare what its upload is "
                             "relative to (up_reference), so a codec cannot encode it; use `none` or `ratio` "
                             "(bytes only), or declare up_reference in the algorithm (docs/algorithms/compression.md 1.1)"))
        if d == "up" and issubclass(cls, ExchangeCodec):
            problems += exchange_problems(sc, spec.name, algo)
    return problems


def exchange_problems(sc, name: str, algo) -> list:
    """An exchange codec on the upload (compression.md 2.6): under a protocol that runs its
    second phase, over dedicated links, without secure aggregation (whose masking of the
    second phase is not modelled), for an algorithm whose guarantee does not rest on each
    upload alone (`upload_sensitivity`: DP-FedAvg's clipping of the decoded upload)."""
    at, out = "network.codec.up", []
    proto = registry.get("protocol", sc.protocol.name).factory
    if not proto.exchanges:
        able = sorted(n for n, e in registry.table("protocol").items() if e.factory.exchanges)
        out.append((at, f"{name!r} is a two-phase exchange, run by protocol.name {', '.join(able)}; here "
                        f"{sc.protocol.name!r} (docs/algorithms/compression.md 2.6)"))
    if sc.network.server_link is not None or sc.network.topology is not None:
        out.append((at, f"{name!r}'s second phase is timed over dedicated client links; remove "
                        "network.server_link / network.topology (docs/algorithms/compression.md 2.6)"))
    if sc.secure_aggregation is not None:
        out.append((at, f"{name!r} with secure_aggregation: the masking of its second phase is not modelled; "
                        "remove one of them (docs/algorithms/compression.md 2.6)"))
    if algo.upload_sensitivity:
        out.append((at, f"{name!r} decodes each upload with P̂, which comes from every client's P, so "
                        f"algorithm {sc.algorithm.name!r}'s bound on one client's clipped upload (its sensitivity) "
                        "no longer holds; use a per-message codec (qsgd, topk, ...) or `none`, or dp_sgd, "
                        "whose privacy is local (docs/algorithms/compression.md 2.6)"))
    return out

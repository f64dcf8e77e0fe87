"""FedUMF — B. Li, S. Chen, K. Yu, "Model Fusion from Unauthorized Clients in Federated
Learning", Mathematics 2022, 10(20), 3751 (docs/algorithms/fedumf.md; cited as `Alg.1 Ln`, the
spec's rules as [E1]-[E6], its choices as A1-A19).

Every client receives the broadcast theta_t each round (Alg.1 L6-L7). Selected clients
(S_t) train K local steps and upload; unselected ("unauthorized") clients also train K steps
from theta_t and keep g_t^i = theta_{t+1}^i - theta_{t,0}^i (Alg.1 L15, [E4]) without
uploading. A client selected now whose previous round's work was not aggregated starts from
the fused point (Alg.1 L8-L9, [E2])

    theta_{t,0}^i = theta_t + alpha (eta_t / eta_{t-1}) g_{t-1}^i,

and the server averages the selected models (Alg.1 L19, [E6]): 1/M (`weighting: uniform`) or
m_i-weighted (`data_size`, A12).

This module is the math: which g is fused, with which coefficient, what is kept. When a
background job ends in virtual time, whether it finished before its client was selected
again, and what happens to it then (`unfinished: skip | wait | partial`, A15) is the
protocol's business (sim/protocols/background.py); it tells this module through `keep` and
`forget`. g is kept in the per-client state store, lazily: the job behind it is computed only
if the client fuses it (spec 2.6), otherwise it is overwritten unread and never computed.

Edge cases (spec 2.5): t = 1 fuses nothing (g_0 = 0, ratio 1, A13); a client selected (or,
under the default `fusion_gate: aggregated`, aggregated) in t-1 does not fuse; several
unselected rounds in a row keep only the latest g; a client that never trained, or was
offline in t-1, has no g (`max_fusion_age: 1`: only g from the previous round is fused;
larger values allow older ones, rescaled by eta_t / eta_r); alpha = 0 fuses nothing and the
trajectory is FedAvg's.
"""
from __future__ import annotations

import warnings
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from ..compute.jobs import LocalSpec
from ..compute.lazy import derived
from ..registry import register
from .base import Aggregation, BackgroundTraining, sample_weights, weighted_sum
from .fedavg import FedAvg, FedAvgParams

# why a selected client did not fuse (clients.csv fuse_skipped), spec 2.6
REASONS = ("none", "first_round", "selected_prev", "no_update", "unfinished", "offline")
_CODE = {r: i for i, r in enumerate(REASONS)}


class FedUMFParams(FedAvgParams):
    alpha: float = Field(1.0, ge=0, description="fusion coefficient alpha (paper: (0, 1]; 0 = FedAvg)")
    weighting: Literal["uniform", "data_size", "samples"] = Field(
        "uniform", description="server weights 1/M (Alg.1 L19) or m_i-weighted (data_size)")
    fusion_gate: Literal["aggregated", "selected"] = Field(
        "aggregated", description="fuse when the previous round's model was not aggregated, or literally i not in S_{t-1}")
    unfinished: Literal["skip", "wait", "partial"] = Field(
        "skip", description="a background job still running when its client is selected: abandon it, wait for it, or fuse its completed steps")
    max_fusion_age: int = Field(1, ge=1, description="fuse a kept update at most this many rounds old")

    @field_validator("alpha")
    @classmethod
    def _alpha(cls, v):
        if v > 1:
            warnings.warn(f"algorithm.alpha = {v} > 1 is outside the paper's range (0, 1]", stacklevel=2)
        return v


class FedUMF(FedAvg, BackgroundTraining):
    """Declares `BackgroundTraining`: the protocol runs background jobs for S_t^c."""

    name = "fedumf"
    client_state = ("g",)
    up_reference = None           # uploads mix kept work and models: no codec (compression.md 1.1)
    supports = frozenset({"rounds"})

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        st = self.states
        self.g_round = st.scalars("g_round", np.int64, 0)     # round of the kept g (0: none)
        self.g_lr = st.scalars("g_lr", np.float64, 0.0)       # eta of the round it was computed in
        self.missing = st.scalars("missing", np.int8, 0)      # why there is no g (a REASONS code)
        self.absent = st.scalars("absent_round", np.int64, 0)  # last round the client was offline
        self.prev_selected: set = set()
        self.prev_aggregated: set = set()
        self._selected: set = set()   # S_t
        self._specs: dict = {}        # this round's selected clients: their LocalSpec (start, for g)
        self._fusion: dict = {}       # this round's selected clients: (fused, reason)
        self._uploaded: dict = {}     # this round's selected clients that finished training: their job
        self.counts = {"fused": 0, "kept": 0, "lost_unfinished": 0, "lost_offline": 0, "lost_superseded": 0}

    # -- the protocol's notices (BackgroundTraining) ------------------------------------------
    @property
    def unfinished(self) -> str:
        return self.p.unfinished

    def begin_round(self, t: int, selected, available) -> None:
        """Round t starts: S_t and the clients online now (the others miss theta_t)."""
        off = np.ones(self.ctx.num_clients, dtype=bool)
        off[np.asarray(available, dtype=np.int64)] = False
        self.absent[off] = t
        self._selected = {int(c) for c in selected}
        self._specs, self._fusion, self._uploaded = {}, {}, {}

    def keep(self, client: int, t: int, result, spec: LocalSpec) -> None:
        """Client's round-t job ended in virtual time: keep g_t^i = theta_{t+1}^i - theta_{t,0}^i
        (Alg.1 L15, [E4]), lazily; it replaces any older g (spec 2.5)."""
        start = spec.start
        self.states.put("g", client, derived(lambda r, s: r.params - s, result, start))
        self.g_round[client] = t
        self.g_lr[client] = self.lr(t)
        self.missing[client] = 0
        self.counts["kept"] += 1

    def forget(self, client: int, reason: str) -> None:
        """Client's background work produced nothing to fuse: it went `offline`, was
        abandoned `unfinished` when the client was selected, or `superseded` by the next
        round's job (A15): any kept g is dropped."""
        self.states.drop("g", client)
        self.g_round[client] = 0
        self.missing[client] = _CODE["offline"] if reason == "offline" else _CODE["unfinished"]
        self.counts[f"lost_{reason}"] = self.counts.get(f"lost_{reason}", 0) + 1

    # -- the four verbs ------------------------------------------------------------------------
    def fusion(self, client: int, t: int) -> tuple:
        """(coefficient alpha eta_t / eta_r, or None, and the reason recorded) for a selected client."""
        if t == 1:                                                   # S_0 = {}, g_0 = 0 (spec 2.5)
            return None, "first_round"
        prev = self.prev_selected if self.p.fusion_gate == "selected" else self.prev_aggregated
        if client in prev:                                           # Alg.1 L8: i in S_{t-1}
            return None, "selected_prev"
        r = int(self.g_round[client])
        if r == 0 or t - r > self.p.max_fusion_age:
            if self.absent[client] == t - 1:
                return None, "offline"
            code = int(self.missing[client])
            return None, REASONS[code] if code else "no_update"
        return self.p.alpha * self.lr(t) / float(self.g_lr[client]), "none"   # [E2] ratio eta_t/eta_r

    def local_spec(self, client, t, received):
        theta = received.vectors[0]                                  # [E1] Alg.1 L7
        coef, reason = self.fusion(client, t)
        start = theta
        if coef is not None and self.p.alpha > 0:                    # [E2] Alg.1 L9 (alpha = 0: FedAvg)
            g = self.states.get("g", client)
            start = derived(lambda gv, x=theta, k=coef: x + k * gv, g)
        self._fusion[client] = (coef is not None, reason)
        if coef is not None:
            self.counts["fused"] += 1
        spec = LocalSpec(start=start, rule=self.local_rule(t))       # [E3] Alg.1 L11-L14
        self._specs[client] = spec
        return spec

    def background_spec(self, client, t, received) -> LocalSpec:
        """An unselected client's K steps from theta_t (Alg.1 L7, L11-L14; it never fuses)."""
        return LocalSpec(start=received.vectors[0], rule=self.local_rule(t))

    def aggregate(self, t, arrivals):
        # [E6] Alg.1 L19: theta_{t+1} = (1/M) sum_{i in S_t} theta_{t+1}^i (or m_i-weighted)
        weighting = "samples" if self.p.weighting in ("data_size", "samples") else "uniform"
        agg = Aggregation()
        if arrivals:
            p = sample_weights(arrivals, weighting)
            self.x = weighted_sum([a.vectors[0] for a in arrivals], p)
            agg.weights = {a.client: float(w) for a, w in zip(arrivals, p)}
        aggregated = {c for c, w in agg.weights.items() if w > 0}
        # a selected client whose trained model was not aggregated (lost upload, deadline)
        # keeps it as g: under fusion_gate `aggregated` it fuses it when next selected (A15)
        for cid, fut in self._uploaded.items():
            if cid not in aggregated:
                self.keep(cid, t, fut, self._specs[cid])
        self.prev_selected = self._selected
        self.prev_aggregated = aggregated
        fused = {c: int(f) for c, (f, _) in self._fusion.items()}
        agg.client_cols = {"fused": fused, "fuse_skipped": {c: r for c, (_, r) in self._fusion.items()}}
        agg.round_cols = {"n_fused": int(sum(fused.values()))}
        return agg

    def upload(self, client, t, result):
        # Alg.1 L16-L17: upload theta_{t+1}^i (one model-sized message, [E5])
        self._uploaded[client] = result
        return super().upload(client, t, result)

    def summary(self) -> dict:
        """Updates kept (a job ended with its g), fused (read by a fusing client), lost
        (abandoned unfinished, superseded, or its client went offline); a kept update never fused
        is overwritten unread and its job never computed (summary grad_steps_skipped)."""
        c = self.counts
        return {"fedumf": {"updates_kept": c["kept"], "updates_fused": c["fused"],
                           "updates_lost_unfinished": c["lost_unfinished"],
                           "updates_lost_superseded": c["lost_superseded"],
                           "updates_lost_offline": c["lost_offline"]}}


register("algorithm", "fedumf", FedUMFParams,
         "FedUMF (Li et al. 2022): unselected clients train too and fuse that update when next selected",
         FedUMF)

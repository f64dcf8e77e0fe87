"""FedNova: normalised averaging (Wang et al. 2020, "Tackling the Objective Inconsistency
Problem in Heterogeneous Federated Optimization", NeurIPS, Eq. 6-7 with local SGD, a_i = tau_i).
Under `intervals` every client completes as many steps tau_i as fit in the interval; plain
FedAvg then weights fast clients' drift more and converges to another point. FedNova
averages the normalised updates and rescales by the effective steps:

    d_i     = (x_t - x_i) / tau_i
    tau_eff = sum_i p_i tau_i
    x_{t+1} = x_t - tau_eff sum_i p_i d_i

A client's model then enters with weight w_i = tau_eff p_i / tau_i (these need not sum to 1:
weights_total = None). Clients with no step are left out.
"""
import numpy as np

from emulator.api import Aggregation, FedAvg, FedAvgParams, register, size_weights


@register("algorithm", "fednova", FedAvgParams, "FedNova (Wang et al. 2020): normalised averaging of local updates")
class FedNova(FedAvg):
    supports = frozenset({"rounds", "intervals"})
    weights_total = None

    def aggregate(self, t, arrivals):
        worked = [a for a in arrivals if a.steps > 0]
        if not worked:
            return Aggregation()
        p = size_weights(np.array([a.n_samples for a in worked], dtype=np.float64), self.p.weighting)
        tau = np.array([a.steps for a in worked], dtype=np.float64)
        tau_eff = float(p @ tau)
        w = tau_eff * p / tau                                   # weight of x_i in x_{t+1}
        step = sum(wi * (self.x - a.vectors[0]) for wi, a in zip(w.tolist(), worked))   # tau_eff sum p_i d_i
        self.x = self.x - step
        return Aggregation({a.client: float(wi) for a, wi in zip(worked, w)})

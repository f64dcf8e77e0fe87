"""W1 in Flower's simulation engine (benchmark P1 peer), run by a venv with flwr[simulation]:

    <flower venv>/bin/python benchmarks/flower_w1.py SPEC.npz     (SPEC written by benchmarks/run.py)

The spec holds W1's data, each round's chosen clients and their mini-batches (the ones
flemu used), client sizes and the initial vector, so Flower trains exactly the same
clients on the same batches: cnn_mnist, SGD lr 0.05, sample-weighted FedAvg, 2 threads
(one Ray actor with 2 CPUs). Prints one JSON line: startup_s (Ray and the engine up to the
first round's configure_fit), s_per_round (first configure_fit to the last aggregation; Ray's
shutdown not counted), rounds.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

SPEC = sys.argv[1]
_data = {}


def data():
    if not _data:
        z = np.load(SPEC)
        _data.update({k: z[k] for k in z.files})
        _data["xt"] = torch.from_numpy(_data["x"])
        _data["yt"] = torch.from_numpy(_data["y"])
    return _data


def make_model():
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    from emulator.workloads.models import CnnMnist
    return CnnMnist(1, 28, 28, 10)


def main():
    import flwr
    from flwr.client import NumPyClient
    from flwr.common import ndarrays_to_parameters
    from flwr.server import ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import start_simulation

    torch.set_num_threads(2)
    d = data()
    rounds = int(d["chosen"].shape[0])
    model0 = make_model()
    w0 = torch.from_numpy(d["w0"])
    torch.nn.utils.vector_to_parameters(w0, model0.parameters())
    init = [p.detach().numpy().copy() for p in model0.parameters()]
    marks = {}

    class W1Client(NumPyClient):
        def __init__(self, pid):
            self.pid = pid

        def fit(self, parameters, config):
            torch.set_num_threads(2)
            d = data()
            r = int(config["round"]) - 1
            pos = int(np.flatnonzero(d["chosen"][r] == self.pid)[0])
            model = make_model()
            for p, a in zip(model.parameters(), parameters):
                p.data = torch.from_numpy(np.array(a))
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            for idx in d["batches"][r, pos]:
                idx = torch.from_numpy(idx)
                opt.zero_grad()
                F.cross_entropy(model(d["xt"][idx]), d["yt"][idx]).backward()
                opt.step()
            return [p.detach().numpy() for p in model.parameters()], int(d["sizes"][self.pid]), {}

    def client_fn(context):
        return W1Client(int(context.node_config["partition-id"])).to_client()

    class SameClients(FedAvg):
        """FedAvg (sample-weighted) on the clients flemu chose in each round."""

        def configure_fit(self, server_round, parameters, client_manager):
            marks.setdefault("first_round", time.perf_counter())
            client_manager.wait_for(len(d["sizes"]), timeout=600)
            by_pid = {c.partition_id: c for c in client_manager.all().values()}
            ins = flwr.common.FitIns(parameters, {"round": server_round})
            return [(by_pid[int(c)], ins) for c in d["chosen"][server_round - 1]]

        def aggregate_fit(self, server_round, results, failures):
            out = super().aggregate_fit(server_round, results, failures)
            marks["last_round_end"] = time.perf_counter()
            return out

    strategy = SameClients(fraction_evaluate=0.0, min_available_clients=len(d["sizes"]),
                           initial_parameters=ndarrays_to_parameters(init), accept_failures=False)
    t0 = time.perf_counter()
    hist = start_simulation(client_fn=client_fn, num_clients=len(d["sizes"]), strategy=strategy,
                            config=ServerConfig(num_rounds=rounds),
                            client_resources={"num_cpus": 2, "num_gpus": 0.0},
                            ray_init_args={"num_cpus": 2, "include_dashboard": False, "log_to_driver": False})
    print(json.dumps({"flwr": flwr.__version__, "startup_s": marks["first_round"] - t0,
                      "s_per_round": (marks["last_round_end"] - marks["first_round"]) / rounds, "rounds": rounds,
                      "losses": str(hist.losses_distributed)[:80]}))


if __name__ == "__main__":
    main()

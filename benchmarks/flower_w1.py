"""W1 in Flower's Simulation Runtime (benchmark P1 peer), written the way Flower's own
quickstart-pytorch app is written today (the Message API):

    <flower venv>/bin/python benchmarks/flower_w1.py SPEC.npz ACTORS [OUT.npy]

- a `ClientApp` whose `@app.train()` function loads the global arrays into a PyTorch model,
  runs the client's local SGD and replies with its arrays and `num-examples`;
- a `ServerApp` whose `@app.main()` runs Flower's message-API `FedAvg` strategy
  (`flwr.serverapp.strategy.FedAvg`, weighted by `num-examples`, no client evaluation),
  with `configure_train` sending each round to the clients flemu chose;
- `flwr.simulation.run_simulation` with the Ray backend, ACTORS actors on the machine's 2
  CPUs: ACTORS=2 gives each actor 1 CPU and 1 torch thread (two clients train at once),
  ACTORS=1 one actor of 2 CPUs and 2 torch threads. Both are reported.

Each actor process loads SPEC (W1's data, every round's chosen clients and their
mini-batches, client sizes, the initial vector) once, on its first message (as Flower's
examples cache their federated dataset per process), so a round costs
Flower what it costs any Flower app: messages, (de)serialisation, actor scheduling, training.

Before the first round the server asks every node for its partition id (a `query`
message each), to address the clients flemu chose; that is start-up, not round time.
Prints one JSON line: flwr, actors, startup_s (program start to the first round),
s_per_round (median of rounds 2..R: round 1 carries the actors' data loading),
s_per_round_mean (rounds 2..R), rounds. OUT.npy, if given, receives the final global
parameters as one flat vector (benchmarks/run.py compares it with its own replay).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
T0 = time.perf_counter()
_state: dict = {}          # per process (each Ray actor): spec arrays and the model
_marks: dict = {}          # the server's round times (the ServerApp runs in this process)


def make_model():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from emulator.workloads.models import CnnMnist
    return CnnMnist(1, 28, 28, 10)


def state() -> dict:
    if not _state:
        torch.set_num_threads(int(os.environ["W1_THREADS"]))
        z = np.load(os.environ["W1_SPEC"])
        chosen = z["chosen"]
        _state.update(x=torch.from_numpy(z["x"]), y=torch.from_numpy(z["y"]), chosen=chosen,
                      batches=torch.from_numpy(z["batches"]), sizes=z["sizes"], w0=z["w0"],
                      pos=[{int(c): j for j, c in enumerate(cs)} for cs in chosen])
    return _state


# ------------------------------------------------------------------------ ClientApp
def client_app():
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    app = ClientApp()

    @app.train()
    def train(msg, context):
        s = state()
        pid = int(context.node_config["partition-id"])
        r = int(msg.content["config"]["server-round"]) - 1
        model = make_model()                 # as Flower's examples do: a model per message
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for idx in s["batches"][r, s["pos"][r][pid]]:
            opt.zero_grad()
            F.cross_entropy(model(s["x"][idx]), s["y"][idx]).backward()
            opt.step()
        content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                              "metrics": MetricRecord({"num-examples": int(s["sizes"][pid])})})
        return Message(content=content, reply_to=msg)

    @app.query()
    def query(msg, context):
        content = RecordDict({"metrics": MetricRecord({"partition-id": int(context.node_config["partition-id"])})})
        return Message(content=content, reply_to=msg)

    return app


# ------------------------------------------------------------------------ ServerApp
def server_app(rounds: int, num_clients: int):
    from flwr.app import ArrayRecord, Message, MessageType, RecordDict
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg

    app = ServerApp()

    class SameClients(FedAvg):
        """Flower's FedAvg (weighted by num-examples) on the clients flemu chose each round."""

        node_of: dict = {}

        def configure_train(self, server_round, arrays, config, grid):
            _marks.setdefault("rounds", []).append(time.perf_counter())
            config["server-round"] = server_round
            record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
            nodes = [self.node_of[int(c)] for c in state()["chosen"][server_round - 1]]
            return self._construct_messages(record, nodes, MessageType.TRAIN)

    @app.main()
    def main(grid, context):
        while len(list(grid.get_node_ids())) < num_clients:
            time.sleep(0.05)
        asks = [Message(RecordDict(), dst_node_id=n, message_type=MessageType.QUERY) for n in grid.get_node_ids()]
        SameClients.node_of = {int(r.content["metrics"]["partition-id"]): r.metadata.src_node_id
                               for r in grid.send_and_receive(asks)}
        model = make_model()
        torch.nn.utils.vector_to_parameters(torch.from_numpy(state()["w0"]), model.parameters())
        strategy = SameClients(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=num_clients)
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=rounds)
        _marks["end"] = time.perf_counter()
        model.load_state_dict(result.arrays.to_torch_state_dict())
        _marks["final"] = torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy()

    return app


def main():
    spec, actors = sys.argv[1], int(sys.argv[2])
    out = sys.argv[3] if len(sys.argv) > 3 else None
    threads = 2 // actors
    # the actors are processes Ray starts from this environment: they read it on first use
    os.environ.update(W1_SPEC=str(Path(spec).resolve()), W1_THREADS=str(threads),
                      OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                      PYTHONPATH=os.pathsep.join([str(ROOT / "benchmarks"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    torch.set_num_threads(2)
    import flwr
    from flwr.simulation import run_simulation
    z = np.load(spec)
    rounds, num_clients = int(z["chosen"].shape[0]), int(z["sizes"].shape[0])
    backend = {"client_resources": {"num_cpus": 2 // actors, "num_gpus": 0.0},
               "init_args": {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False}}
    run_simulation(server_app=server_app(rounds, num_clients), client_app=client_app(),
                   num_supernodes=num_clients, backend_config=backend)
    starts = _marks["rounds"] + [_marks["end"]]
    per = np.diff(starts)
    if out:
        np.save(out, _marks["final"])
    print(json.dumps({"flwr": flwr.__version__, "actors": actors, "threads_per_actor": threads,
                      "startup_s": starts[0] - T0, "s_per_round": float(np.median(per[1:])),
                      "s_per_round_mean": float(per[1:].mean()), "round_s": per.tolist(), "rounds": rounds}))


if __name__ == "__main__":
    # run as the importable module `flower_w1`, so that Ray ships the ClientApp's functions
    # by reference (actors import this file) instead of pickling them with their globals
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import flower_w1
    flower_w1.main()

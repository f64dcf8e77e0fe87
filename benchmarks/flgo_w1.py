"""W1-het in FLGo 0.4.4 (`flgo.simulator`'s virtual clock), an emulation peer of
benchmarks/emulation.py (issue 29):

    <flgo venv>/bin/python benchmarks/flgo_w1.py SPEC.npz ROUNDS

SPEC (written by benchmarks/emulation.py): the W1 rows x / y, each client's rows, the initial
vector w0, every round's selection `chosen` and each selected client's mini-batches
`batches` [rounds, K, steps, B] (global rows), each client's job duration `dur` [clients,
(compute, comm)] and the task (E0 wait for all, E1 a deadline, E2 the first k uploads).

All through FLGo's own extension points, the way an FLGo user writes an experiment:
- a benchmark generated from a config file (`flgo.gen_benchmark_from_file`: `train_data`,
  `get_model` = emulator's CnnMnist) and a task from it with a partitioner giving each
  client its W1 rows (`flgo.gen_task_by_`);
- an algorithm module: `Server(BasicServer)` whose `sample()` returns the spec's selection for
  the round, `Client(BasicClient)` whose `train()` runs the client's mini-batches for the round
  (plain SGD lr 0.05, as BasicClient.train does with FLGo's calculator); aggregation: FLGo's
  `uniform` mean (every W1 client holds 320 samples, so sample-weighted FedAvg is the mean);
- a simulator, `BasicSimulator` subclass whose `update_client_responsiveness` gives each
  client its latency (download + compute + upload) in clock ticks of 0.1 us: FLGo's clock
  advances by whole ticks (`clock.step(int(delta_t))`), and at 0.1 us every W1-het duration is
  a whole number of ticks, so the round lengths are exact;
- E1: `server.tolerance_for_latency` is the deadline; E2 (first k of K): FLGo has no count
  barrier, so the server's `iterate` communicates asynchronously (packages go into FLGo's
  clock queue) and steps the clock from arrival to arrival until k have come, then drops
  the rest from the queue (FLGo's `clock.get_until` / `conditionally_clear`);
- best settings found: `num_parallels: 2, parallel_type: 't'` (two clients trained at once on
  threads of one torch thread each), no evaluation between rounds, no log file, no tqdm.

torch 2.13 refuses a `Subset` subclass that overrides `__getitem__` without `__getitems__`;
FLGo 0.4.4's `TaskDataset` does, so the harness gives it `__getitems__` (a list of
`__getitem__`); only FLGo's own data loaders use it (set-up), the timed training reads the
spec's batches.
Prints one JSON line: s_per_round (median of rounds 2..R), cpu_s_per_round, round_s, jobs_trained,
process_cpu_s (the process's CPU seconds since it started, all threads), outcome {aggregated:
[[client, ...] per round], close: [virtual close time per round]}. With W1_FINAL set, the final
global vector is saved there (.npy).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
TICK = 1e-7                                   # seconds per FLGo clock unit
CONFIG = '''
import os, numpy as np, torch
z = np.load(os.environ["W1_SPEC"])

class Rows(torch.utils.data.Dataset):
    def __init__(self, x, y):
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y).long()
    def __len__(self):
        return len(self.y)
    def __getitem__(self, i):
        return self.x[i], self.y[i]
    def __getitems__(self, idx):          # torch 2.13's DataLoader asks for this
        return [(self.x[i], self.y[i]) for i in idx]

train_data = Rows(z["x"], z["y"])
test_data = Rows(z["x"][:64], z["y"][:64])

def get_model():
    import sys
    sys.path.insert(0, os.environ["W1_ROOT"])
    from emulator.workloads.models import CnnMnist
    return CnnMnist(1, 28, 28, 10)
'''


def main():
    spec, rounds = sys.argv[1], int(sys.argv[2])
    os.environ.update(W1_SPEC=str(Path(spec).resolve()), W1_ROOT=str(ROOT))
    torch.set_num_threads(int(os.environ.get("W1_THREADS", "1")))      # per client-training thread
    z = np.load(spec)
    cfg = json.loads(str(z["task"]))
    task_kind = cfg["task"]
    chosen = z["chosen"] if "chosen" in z else None
    batches, dur = torch.from_numpy(z["batches"]), z["dur"]
    x, y = torch.from_numpy(z["x"]), torch.from_numpy(z["y"]).long()
    rows = z["client_rows"]
    ticks = np.rint(dur.sum(axis=1) / TICK).astype(np.int64)
    if not np.allclose(ticks * TICK, dur.sum(axis=1), rtol=0, atol=1e-12):
        raise SystemExit("a duration is not a whole number of FLGo ticks")

    import flgo
    import flgo.algorithm.fedbase as fb
    import flgo.benchmark.partition as fbp
    import flgo.simulator.base as ss

    work = Path(tempfile.mkdtemp(prefix="flgo_w1_", dir=os.environ.get("W1_TMP")))
    os.chdir(work)
    (work / "w1_config.py").write_text(CONFIG)
    sys.path.insert(0, str(work))
    bmk_name = flgo.gen_benchmark_from_file("w1het_bmk", str(work / "w1_config.py"), target_path=str(work))
    import importlib
    bmk = importlib.import_module(bmk_name)
    bmk.visualize = lambda *a, **k: None     # task generation plots the partition otherwise (minutes, untimed)
    from flgo.benchmark.toolkits.cv.classification import FromDatasetPipe
    # torch 2.13's Subset check: FLGo 0.4.4's TaskDataset overrides __getitem__ only
    FromDatasetPipe.TaskDataset.__getitems__ = lambda self, idx: [self[i] for i in idx]

    class W1Rows(fbp.BasicPartitioner):
        """Each client its W1 rows (flemu's IID partition)."""
        def __init__(self):
            self.num_clients = len(rows)

        def __call__(self, data):
            return [r.tolist() for r in rows]

    task = str(work / "task")
    flgo.gen_task_by_(bmk, W1Rows(), task_path=task)

    marks = {"wall": [], "cpu": [], "length": [], "aggregated": [], "uploads": [], "start": []}
    jobs = [0]

    job_of = [0] * len(rows)

    class Client(fb.BasicClient):
        def train(self, model):
            if chosen is None:                      # E3: the client's next job
                steps = batches[self.id, job_of[self.id]]
                job_of[self.id] += 1
            else:
                r = self.server.current_round - 1
                steps = batches[r, int(np.flatnonzero(chosen[r] == self.id)[0])]
            opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
            model.train()
            for idx in steps:
                opt.zero_grad()
                F.cross_entropy(model(x[idx]), y[idx]).backward()
                opt.step()
            jobs[0] += 1

    class Server(fb.BasicServer):
        def initialize(self):
            # FLGo's default tolerance, 999,999 ticks, would be 0.1 s at these ticks
            self.tolerance_for_latency = int(round(cfg["deadline"] / TICK)) if task_kind == "E1" else 10 ** 15

        def sample(self):
            return [int(c) for c in chosen[self.current_round - 1]]

        def iterate(self):
            marks["wall"].append(time.perf_counter())
            marks["cpu"].append(time.process_time())
            start = self.gv.clock.current_time
            self.selected_clients = self.sample()
            if task_kind == "E2":
                models = self.first_k(cfg["first_k"])
            else:
                models = self.communicate(self.selected_clients)["model"]
            self.model = self.aggregate(models)
            marks["length"].append((self.gv.clock.current_time - start) * TICK)
            marks["aggregated"].append(sorted(int(c) for c in self.received_clients))
            return len(models) > 0

        def first_k(self, k):
            """Over-selection with FLGo's clock queue: all selected clients train and their
            packages are queued at their arrival times; the clock steps from arrival to
            arrival until k have come; the others are cleared from the queue."""
            clock = self.gv.clock
            got = self.communicate(self.selected_clients, asynchronous=True)
            pkgs = [{key: v[i] for key, v in got.items()} for i in range(len(got.get("__cid", [])))]
            while len(pkgs) < k:
                if not clock.q.queue:
                    raise RuntimeError(f"first_k: {len(pkgs)} packages, queue empty, got keys {list(got)}, "
                                       f"selected {len(self.selected_clients)}, t {clock.current_time}")
                nxt = clock.q.queue[0].time                      # the next arrival
                clock.step(int(nxt - clock.current_time))
                pkgs += clock.get_until(clock.current_time)
            pkgs = pkgs[:k]
            clock.conditionally_clear(lambda p: True)
            # every selected client is free again (FLGo's synchronous path sets arrivals offline and
            # the next flush brings them back; late ones idle): otherwise with_availability would
            # drop them from a later selection
            self.gv.simulator.set_client_state(self.gv.simulator.idx2id(list(self.selected_clients)), "idle")
            self.received_clients = [p["__cid"] for p in pkgs]
            return self.unpack(pkgs)["model"]

    from flgo.algorithm import fedasync
    merges = {"client": [], "time": [], "staleness": []}

    class AsyncServer(fedasync.Server):
        """FLGo's FedAsync (flgo.algorithm.fedasync: alpha 0.6, polynomial staleness a = 0.5),
        every idle client dispatched in id order (all busy, as flemu's async); when no upload is
        due, the clock jumps to the next arrival in FLGo's clock queue (FLGo's own run loop steps
        one tick per iteration: 5.7 million iterations per fast-client job at 0.1 us ticks)."""

        def initialize(self):
            super().initialize()
            self.alpha, self.flag, self.poly_a = cfg["alpha"], "poly", cfg["staleness_a"]

        def sample(self):
            return [c for c in range(len(rows)) if c not in self.concurrent_clients]

        def _if_exit(self):                   # `rounds` uploads merged (FLGo counts model updates)
            return len(merges["client"]) >= rounds

        def iterate(self):
            clock = self.gv.clock
            if not marks["start"]:
                marks["start"] = [time.perf_counter(), time.process_time()]
            self.selected_clients = self.sample()
            self.concurrent_clients.update(set(self.selected_clients))
            self.model._round = self.current_round
            got = self.communicate(self.selected_clients, asynchronous=True)
            while len(got["__cid"]) == 0:
                clock.step(int(clock.q.queue[0].time - clock.current_time))
                got = self.communicate([], asynchronous=True)
            marks["wall"].append(time.perf_counter())
            marks["cpu"].append(time.process_time())
            marks["uploads"].append(len(got["__cid"]))
            self.concurrent_clients.difference_update(set(got["__cid"]))
            for cid, m in zip(got["__cid"], got["model"]):
                merges["client"].append(int(cid))
                merges["time"].append(clock.current_time * TICK)
                merges["staleness"].append(int(self.current_round - m._round))
            return self.package_handler(got)

    class Simulator(ss.BasicSimulator):
        """Each client's latency: its W1-het job duration, in clock ticks."""
        def update_client_responsiveness(self, client_ids, *args, **kwargs):
            self.set_variable(client_ids, "latency", [int(ticks[c]) for c in client_ids])

    algo = type(sys)("w1het_fedavg")
    algo.Server, algo.Client = (AsyncServer if task_kind == "E3" else Server), Client
    option = {"num_rounds": 10 ** 9 if chosen is None else rounds, "proportion": 1.0 if chosen is None else chosen.shape[1] / len(rows), "num_steps": cfg["steps"],
              "learning_rate": cfg["lr"], "batch_size": cfg["batch"], "aggregate": "uniform",
              "num_parallels": 2, "parallel_type": "t", "train_holdout": 0.0, "test_holdout": 0.0,
              "eval_interval": 10 ** 6, "no_tqdm": True, "log_level": "WARNING", "no_log_console": True,
              "gpu": [], "seed": 0}
    runner = flgo.init(task, algo, option=option, Simulator=Simulator)
    w0 = torch.from_numpy(z["w0"])
    torch.nn.utils.vector_to_parameters(w0.clone(), runner.model.parameters())
    runner.run()
    t_end = [time.perf_counter(), time.process_time()]
    wall = np.diff(marks["wall"] + [t_end[0]])
    cpu = np.diff(marks["cpu"] + [t_end[1]])
    if task_kind == "E3":
        # seconds per merge over the run: from the first dispatch to the last update (FLGo merges
        # every upload due at one tick in one update)
        done = sum(marks["uploads"])
        per = [(marks["wall"][-1] - marks["start"][0]) / done]
        cpu_per = [(marks["cpu"][-1] - marks["start"][1]) / done]
        outcome = merges
    else:
        per, cpu_per = wall[1:], cpu[1:]
        outcome = {"aggregated": marks["aggregated"], "close": np.cumsum(marks["length"]).tolist()}
    final = torch.nn.utils.parameters_to_vector(runner.model.parameters()).detach().numpy()
    if os.environ.get("W1_FINAL"):             # the final global vector, for benchmarks/emulation.py
        np.save(os.environ["W1_FINAL"], final)
    print(json.dumps({"peer": "flgo 0.4.4", "task": task_kind, "s_per_round": float(np.median(per)),
                      "cpu_s_per_round": float(np.median(cpu_per)), "round_s": wall.tolist(),
                      "uploads_per_update": marks["uploads"], "jobs_trained": jobs[0], "rounds": len(wall),
                      "final_norm": float(np.linalg.norm(final)), "process_cpu_s": time.process_time(), "outcome": outcome}))


if __name__ == "__main__":
    main()

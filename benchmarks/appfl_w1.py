"""W1-het in APPFL 1.12's virtual-time simulator (`appfl.vsim`), an emulation peer of
benchmarks/emulation.py (issue 29):

    <appfl venv>/bin/python benchmarks/appfl_w1.py SPEC.npz ROUNDS

SPEC (written by benchmarks/emulation.py): the W1 rows x / y, each client's rows, the initial
vector w0, each client's job duration `dur` [clients, (compute, comm)], the task (E0 wait for
all, E1 a deadline, E2 the first k uploads, E3 FedAsync), and for E0-E2 every round's
selection `chosen` with each selected client's mini-batches `batches` [rounds, K, steps, B]
(global rows), for E3 every client's mini-batches per job `batches` [clients, jobs, steps, B].

All APPFL machinery, as its own vsim example (examples/vsim/run_vsim.py) builds it: a
`ServerAgent` (SyncScheduler + FedAvgAggregator, or AsyncScheduler + FedAsyncAggregator with
alpha 0.6 and polynomial staleness a = 0.5), one `ClientAgent` per client with APPFL's
`VanillaTrainer` (step mode, 10 steps, torch SGD lr 0.05, batch 32, no shuffling, no
validation), and the vsim drivers, through their extension points:
- `ClientProfile` subclass: each client's compute and communication seconds are the spec's
  (APPFL's own profile is a compute factor times a measured or fixed step time plus a
  bandwidth in MiB-based Mbit/s; the subclass gives the same numbers exactly);
- `SyncSimDriver` subclass whose `_select_participants` returns the spec's selection for the
  round and points each selected client's dataset at that round's mini-batches (the trainer's
  DataLoader reads the dataset in order, so one pass of 10 batches of 32 is the spec's);
  `AsyncSimDriver` subclass whose `_dispatch_idle` dispatches idle clients in id order (every
  client busy, as flemu's `async`) and whose `_handle_train_start` points the client at its
  next job's mini-batches.
Tasks: E0 count mode, min_responses = K (the round closes at the last arrival); E1 window mode,
window = the deadline, min_responses 1; E2 count mode, min_responses = k; E3 AsyncSimDriver,
max_in_flight = every client. Best settings found: `optimize_memory: False` everywhere APPFL
reads it (client agent, trainer, server agent, scheduler, aggregator: the default runs a full
gc.collect() several times per client per round, 0.4 s each with 100 client agents alive),
`train_data_shuffle: False`, no validation, logging to a null handler.

Prints one JSON line: s_per_round (median of rounds 2..R; E3: of merges 2..M), cpu_s_per_round,
round_s, jobs_trained, process_cpu_s (the process's CPU seconds since it started, all threads),
outcome (E0-E2 {aggregated, close}; E3 {client, time, staleness} per merge). With W1_FINAL set,
the final global vector is saved there (.npy).
"""
from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
METRIC = '''
import numpy as np
def accuracy(y_true, y_pred):
    return float(np.mean(y_true == np.argmax(y_pred, axis=1)) * 100)
'''
MODEL = '''
import sys
sys.path.insert(0, {root!r})
from emulator.workloads.models import CnnMnist
'''


class RoundRows(torch.utils.data.Dataset):
    """A client's samples in the order of its current job's mini-batches (set per job)."""

    def __init__(self, x, y, rows):
        self.x, self.y, self.rows = x, y, rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        r = self.rows[i]
        return self.x[r], self.y[r]


def main():
    spec, rounds = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(int(os.environ.get("W1_THREADS", "2")))
    z = np.load(spec)
    cfg = json.loads(str(z["task"]))
    kind = cfg["task"]
    x, y = torch.from_numpy(z["x"]), torch.from_numpy(z["y"]).long()
    batches = torch.from_numpy(z["batches"]).flatten(-2)          # [.., .., steps * B]
    dur = z["dur"]
    n = len(z["sizes"])

    from omegaconf import OmegaConf
    from appfl.agent import ClientAgent, ServerAgent
    from appfl.vsim import AsyncSimDriver, ClientProfile, SyncSimDriver

    work = Path(tempfile.mkdtemp(prefix="appfl_w1_", dir=os.environ.get("W1_TMP")))
    (work / "w1_model.py").write_text(MODEL.format(root=str(ROOT)))
    (work / "w1_metric.py").write_text(METRIC)
    is_async = kind == "E3"
    server_cfg = OmegaConf.create({
        "client_configs": {
            "train_configs": {"trainer": "VanillaTrainer", "mode": "step", "num_local_steps": cfg["steps"],
                              "optim": "SGD", "optim_args": {"lr": cfg["lr"]}, "loss_fn": "CrossEntropyLoss",
                              "metric_path": str(work / "w1_metric.py"), "metric_name": "accuracy",
                              "do_validation": False, "do_pre_validation": False, "send_gradient": False,
                              "train_batch_size": cfg["batch"], "train_data_shuffle": False, "use_dp": False,
                              "optimize_memory": False, "device": "cpu"},
            "model_configs": {"model_path": str(work / "w1_model.py"), "model_name": "CnnMnist",
                              "model_kwargs": {"in_ch": 1, "side_h": 28, "side_w": 28, "classes": 10}},
            "comm_configs": {"compressor_configs": {"enable_compression": False}}},
        "server_configs": {
            "num_clients": n, "device": "cpu", "optimize_memory": False, "num_global_epochs": 10 ** 9 if is_async else rounds,
            "logging_output_dirname": str(work / "output"), "logging_output_filename": "result",
            **({"scheduler": "AsyncScheduler", "scheduler_kwargs": {"optimize_memory": False},
                "aggregator": "FedAsyncAggregator",
                "aggregator_kwargs": {"alpha": cfg["alpha"], "staleness_fn": "polynomial", "optimize_memory": False,
                                      "staleness_fn_kwargs": {"a": cfg["staleness_a"]}}}
               if is_async else
               {"scheduler": "SyncScheduler", "scheduler_kwargs": {"same_init_model": True, "optimize_memory": False},
                "aggregator": "FedAvgAggregator",
                "aggregator_kwargs": {"client_weights_mode": "equal", "optimize_memory": False}})}})
    server = ServerAgent(server_agent_config=server_cfg)
    w0 = torch.from_numpy(z["w0"])
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(w0.clone(), server.model.parameters())
    clients, data = [], {}
    for c in range(n):
        ds = RoundRows(x, y, torch.as_tensor(z["client_rows"][c]))
        ccfg = OmegaConf.create({"client_id": str(c), "optimize_memory": False,
                                 "train_configs": {"device": "cpu", "logging_output_dirname": str(work / "output")}})
        agent = ClientAgent(client_agent_config=ccfg)
        agent.train_dataset, agent.val_dataset = ds, None
        data[str(c)] = ds
        clients.append(agent)
    client_cfg = server.get_client_configs()
    for a in clients:
        a.load_config(client_cfg)

    class SpecProfile(ClientProfile):
        """The spec's seconds for this client (APPFL's profile extension point)."""

        def __init__(self, comp, comm):
            super().__init__()
            self.comp, self.comm = float(comp), float(comm)

        def compute_time(self, compute_second_per_step, num_steps, **kwargs):
            return self.comp

        def comm_time(self, model_bytes, **kwargs):
            return self.comm

    profiles = {str(c): SpecProfile(*dur[c]) for c in range(n)}
    marks = {"wall": [], "cpu": []}
    jobs = [0]
    logger = logging.getLogger("appfl_w1")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False

    if is_async:
        job_of = {str(c): 0 for c in range(n)}

        class Driver(AsyncSimDriver):
            def _dispatch_idle(self):
                for cid in (str(c) for c in range(n)):
                    if len(self.active) >= self.max_in_flight:
                        break
                    if cid not in self.active:
                        self.active.add(cid)
                        self._push(self.virtual_time, "train_start", cid)
                self._max_active = max(self._max_active, len(self.active))

            def _handle_train_start(self, cid, dispatch_time):
                data[cid].rows = batches[int(cid), job_of[cid]]
                job_of[cid] += 1
                jobs[0] += 1
                super()._handle_train_start(cid, dispatch_time)

            def _handle_train_complete(self, cid, completion_time):
                marks["wall"].append(time.perf_counter())
                marks["cpu"].append(time.process_time())
                super()._handle_train_complete(cid, completion_time)

            def _training_finished(self):
                return len(self.history) >= rounds

        driver = Driver(server, clients, profiles, max_in_flight=n, logger=logger, base_step_time=1.0)
    else:
        chosen = z["chosen"]

        class Driver(SyncSimDriver):
            def _select_participants(self):
                marks["wall"].append(time.perf_counter())
                marks["cpu"].append(time.process_time())
                r = self._round
                for j, c in enumerate(chosen[r]):
                    data[str(c)].rows = batches[r, j]
                jobs[0] += len(chosen[r])
                return [str(c) for c in chosen[r]]

        k = chosen.shape[1]
        mode = {"E0": dict(mode="count", min_responses=k), "E1": dict(mode="window", min_responses=1,
                                                                      window_duration=cfg["deadline"]),
                "E2": dict(mode="count", min_responses=cfg["first_k"])}[kind]
        driver = Driver(server, clients, profiles, participants_per_round=k, logger=logger, base_step_time=1.0,
                        target_rounds=rounds, **mode)
    t0 = (time.perf_counter(), time.process_time())
    driver.run()
    marks["wall"].append(time.perf_counter())
    marks["cpu"].append(time.process_time())
    wall, cpu = np.diff(marks["wall"]), np.diff(marks["cpu"])
    if is_async:
        h = driver.history
        outcome = {"client": [int(r["cid"]) for r in h], "time": [float(r["vtime"]) for r in h],
                   "staleness": [int(r["staleness"]) for r in h]}
        # seconds per merge over the run: from the driver's start (the first dispatches are trained
        # there) to the last merge (equal arrival times are merged back to back, so per-merge
        # intervals would say nothing)
        m = len(h)
        wall = np.array([(marks["wall"][m - 1] - t0[0]) / m] * 2)
        cpu = np.array([(marks["cpu"][m - 1] - t0[1]) / m] * 2)
    else:
        h = [r for r in driver.history if not r["skipped"]]
        outcome = {"aggregated": [sorted(int(c) for c in r["accepted_cids"]) for r in h],
                   "close": [float(r["t_barrier"]) for r in h]}
    final = torch.nn.utils.parameters_to_vector(server.model.parameters()).detach().numpy()
    if os.environ.get("W1_FINAL"):             # the final global vector, for benchmarks/emulation.py
        np.save(os.environ["W1_FINAL"], final)
    print(json.dumps({"peer": "appfl 1.12", "task": kind, "s_per_round": float(np.median(wall[1:])),
                      "cpu_s_per_round": float(np.median(cpu[1:])), "round_s": wall.tolist(),
                      "jobs_trained": jobs[0], "rounds": len(wall), "final_norm": float(np.linalg.norm(final)), "process_cpu_s": time.process_time(),
                      "outcome": outcome}))


if __name__ == "__main__":
    main()

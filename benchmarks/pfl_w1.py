"""Workload W1 in Apple's pfl-research simulator (pip `pfl` 0.6.0, PyTorch backend).

    OMP_NUM_THREADS=2 benchmarks/results/tmp_pfl_venv/bin/python benchmarks/pfl_w1.py SPEC.npz \
        [OUT.npy] [--rounds R] [--procs P]

(that venv also needs `pydantic`, which emulator.workloads.models imports.)
SPEC.npz (written by benchmarks/run.py): x [N,1,28,28] f32, y [N] i64, chosen [rounds,K] client ids,
batches [rounds,K,steps,B] global row numbers, sizes [clients] sample counts, w0 flat f32 initial
parameters (torch `model.parameters()` order). Model: emulator's CnnMnist(1,28,28,10).

What runs, all pfl machinery: `FederatedAveraging` + `SimulatedBackend` + `PyTorchModel` (local
optimiser torch SGD lr 0.05; central optimiser SGD lr 1.0, so new global = the weighted average of
the local models) over a `FederatedDataset` whose user sampler yields the spec's `chosen` clients
round by round, in order. Each user dataset is an in-memory `PyTorchTensorDataset` holding the
client's rows for that round in batch order; pfl slices it in order (no shuffling), so one local
epoch with local_batch_size=B is exactly the spec's batches. Weighting: pfl's FedAvg weighs every
user 1 unless given a weighting postprocessor; we pass pfl's `WeightByDatapoints` (weight =
len(user dataset) = steps*B = the sample count when sizes == steps*B, as in W1), else a 3-line
`WeightBySize` that uses `sizes`.

Configuration (pfl docs, "Fast distributed simulations"): in-memory `Dataset`s are pfl's fastest data
path, and pfl shards each cohort across worker processes with native torch.distributed (gloo on
CPU) set up by PFL_WORKER_ADDRESSES / PFL_WORKER_RANK; Horovod is only an alternative launcher and
is not needed. On the 2-core box 2 processes x 1 torch thread (~1.45 s/round) beat 1 process x 2
threads (~1.70 s/round; plain loop on 1 thread ~2.6 s), so --procs defaults to 2: the script
re-launches itself once per rank, rank 0 reports. K must be divisible by P (pfl's sampler draws
world_size users per step). Per-round metric printing (`send_metrics_to_platform`) is off. pfl
always evaluates the users in round 0 (0 % evaluation_frequency == 0): the excluded warm-up round.
`use_torch_compile=True` is not used: in pfl 0.6.0 it is a no-op for training (pfl calls
model.loss(), which torch.compile's wrapper forwards to the uncompiled module).

Output, one JSON line on stdout: startup_s (program start -> first round starts; mostly importing
torch ~2 s and pfl ~2 s, which pulls in scipy via pfl.privacy), s_per_round / s_per_round_mean
(median / mean over rounds 2..R; a round = one pfl central iteration, timed by a
TrainingProcessCallback), round_s (all rounds), params_rel_diff = ||w_pfl - w_ref|| / ||w_ref||
against a plain torch FedAvg loop that rank 0 runs afterwards (ref_s_per_round: its round time,
same torch threads as one pfl worker). The reference sums in pfl's float order (see below), since
in W1 a last-bit difference in the average grows to ~1e-4 within five rounds (ReLU/max-pool
switching); in that order pfl and the reference agree bit for bit (params_rel_diff 0.0).
"""
from __future__ import annotations

import os
import time

T0 = float(os.environ.get("PFL_W1_T0") or time.time())  # program start (launcher's, for workers)

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

LR, SERVER_LR = 0.05, 1.0
CORES = len(os.sched_getaffinity(0))


def launch(procs: int) -> int:
    """Start `procs` pfl workers (this script, PFL_WORKER_RANK=i); rank 0's stdout is ours."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PFL_W1_T0": repr(T0), "OMP_NUM_THREADS": str(max(1, CORES // procs)),
           "PFL_WORKER_ADDRESSES": ",".join(f"localhost:{port + i}" for i in range(procs))}
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    workers = [subprocess.Popen([sys.executable, *sys.argv], env={**env, "PFL_WORKER_RANK": str(i)},
                                stdout=None if i == 0 else subprocess.DEVNULL) for i in range(procs)]
    try:
        while any(w.poll() is None for w in workers):
            if any(w.returncode not in (None, 0) for w in workers):  # one died: the rest would hang
                break
            time.sleep(0.05)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    return max(w.returncode for w in workers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec")
    ap.add_argument("out", nargs="?", help="save pfl's final global parameters here (.npy, flat)")
    ap.add_argument("--rounds", type=int, default=None, help="default: all rounds in the spec")
    ap.add_argument("--procs", type=int, default=2, help="pfl worker processes (1 = in-process)")
    args = ap.parse_args()
    if args.procs > 1 and "PFL_WORKER_RANK" not in os.environ:
        sys.exit(launch(args.procs))
    rank = int(os.environ.get("PFL_WORKER_RANK", 0))
    os.environ.setdefault("PFL_PYTORCH_DEVICE", "cpu")  # read by pfl at import

    import warnings

    import torch
    import torch.nn.functional as F
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    threads = int(os.environ.get("OMP_NUM_THREADS", CORES))
    torch.set_num_threads(threads)
    # pfl 0.6.0 all-reduces with the deprecated torch.distributed.reduce_op (works on torch 2.13).
    warnings.filterwarnings("ignore", message=".*reduce_op", category=FutureWarning)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from emulator.workloads.models import CnnMnist

    import pfl
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.aggregate.weighting import WeightByDatapoints, WeightingStrategy
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.pytorch import PyTorchTensorDataset
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.internal.ops import pytorch_ops
    from pfl.metrics import Metrics, Weighted
    from pfl.model.pytorch import PyTorchModel

    spec = np.load(args.spec)
    R = args.rounds or len(spec["chosen"])
    chosen, sizes = spec["chosen"][:R], spec["sizes"]
    xt, yt = torch.from_numpy(spec["x"]), torch.from_numpy(spec["y"])
    bt = torch.from_numpy(spec["batches"][:R])
    w0 = torch.from_numpy(spec["w0"])
    (_, K, steps, B), world = bt.shape, pytorch_ops.distributed.world_size
    assert R <= len(spec["chosen"]) and K % world == 0, "rounds <= spec rounds; cohort % procs == 0"

    class Net(CnnMnist):  # pfl's PyTorchModel wants loss() and metrics() on the module
        def loss(self, x, y, eval=False):
            self.eval() if eval else self.train()
            return F.cross_entropy(self(x), y)

        @torch.no_grad()
        def metrics(self, x, y, eval=False):
            self.eval()
            return {"loss": Weighted(F.cross_entropy(self(x), y, reduction="sum").item(), len(y))}

    class WeightBySize(WeightingStrategy):  # sample-weighted FedAvg by the client's full count
        def postprocess_one_user(self, *, stats, user_context):
            stats.reweight(int(sizes[user_context.user_id]))
            return stats, Metrics()

    class RoundTimer(TrainingProcessCallback):
        def __init__(self) -> None:
            self.marks: list[float] = []
            self.first_wall = 0.0

        def on_train_begin(self, *, model):
            self.first_wall, self.marks = time.time(), [time.perf_counter()]
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            self.marks.append(time.perf_counter())
            return False, Metrics()

    order = iter([(r, j) for r in range(R) for j in range(K)])  # the spec's clients, round by round

    def make_user(key: tuple[int, int]) -> PyTorchTensorDataset:
        r, j = key
        idx = bt[r, j].reshape(-1)  # the client's steps*B rows in batch order
        return PyTorchTensorDataset((xt[idx], yt[idx]), user_id=int(chosen[r, j]))

    net = Net(1, 28, 28, 10)
    vector_to_parameters(w0.clone(), net.parameters())
    model = PyTorchModel(net, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(net.parameters(), lr=SERVER_LR))
    weighting = WeightByDatapoints() if (sizes[chosen] == steps * B).all() else WeightBySize()
    backend = SimulatedBackend(training_data=FederatedDataset(make_user, lambda: next(order)),
                               val_data=None, postprocessors=[weighting])
    timer = RoundTimer()
    FederatedAveraging().run(
        NNAlgorithmParams(central_num_iterations=R, evaluation_frequency=10**9,
                          train_cohort_size=K, val_cohort_size=0),
        backend, model,
        NNTrainHyperParams(local_num_epochs=1, local_learning_rate=LR, local_batch_size=B),
        NNEvalHyperParams(local_batch_size=None), callbacks=[timer], send_metrics_to_platform=False)
    w_pfl = parameters_to_vector(net.parameters()).detach().clone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    if rank != 0:
        return
    if args.out:
        np.save(args.out, w_pfl.numpy())

    # Plain reference: same clients and batches, torch SGD, then sample-weighted FedAvg written as
    # w + sum_i n_i (w_i - w) / sum_i n_i (= sum_i n_i w_i / sum_i n_i), in float32, summed over
    # pfl's worker shards (users k, k+P, ...) then across shards, with pfl's torch thread count:
    # pfl's float order, because float-order noise amplifies (1e-8 -> 1e-4 in five W1 rounds).
    ref, w, ref_times = CnnMnist(1, 28, 28, 10), w0.clone(), []
    for r in range(R):
        t = time.perf_counter()
        shards = [torch.zeros_like(w) for _ in range(world)]
        for j, c in enumerate(chosen[r]):
            vector_to_parameters(w.clone(), ref.parameters())
            opt = torch.optim.SGD(ref.parameters(), lr=LR)
            for b in bt[r, j]:
                opt.zero_grad()
                F.cross_entropy(ref(xt[b]), yt[b]).backward()
                opt.step()
            shards[j % world] += (parameters_to_vector(ref.parameters()).detach() - w) * float(sizes[c])
        w = w + sum(shards) * (1.0 / float(sizes[chosen[r]].sum()))
        ref_times.append(time.perf_counter() - t)

    laps = np.diff(timer.marks)
    timed = laps[1:] if R > 1 else laps
    print(json.dumps({
        "pfl": pfl.__version__,
        "config": f"{world} proc x {threads} torch thread(s)"
                  + (", torch.distributed gloo" if world > 1 else "")
                  + f", in-memory PyTorchTensorDataset, FedAvg+SimulatedBackend, {type(weighting).__name__}",
        "startup_s": round(timer.first_wall - T0, 3),
        "s_per_round": round(float(np.median(timed)), 4),
        "s_per_round_mean": round(float(np.mean(timed)), 4),
        "rounds": R,
        "round_s": [round(float(v), 4) for v in laps],
        "ref_s_per_round": round(float(np.median(ref_times[1:] or ref_times)), 4),
        "final_params_sha": hashlib.sha256(w_pfl.numpy().tobytes()).hexdigest()[:16],
        "params_rel_diff": float((w_pfl - w).norm() / w.norm()),
    }), flush=True)


if __name__ == "__main__":
    main()

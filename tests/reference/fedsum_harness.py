"""Running the FedSUM family and its baselines in the emulator on the spec's quadratic
(docs/algorithms/fedsum.md section 8: N = 3, d = 2, f_i = 1/2 (x - b_i)^T A_i (x - b_i), x^0 = 0), float64,
full-batch (exact) gradients, with a prescribed participation sequence replayed through the
`round_trace` availability model and `select: all`; and the matching NumPy reference run of
Appendix A. Spec rounds are 0-based: the emulator's round t is the spec's t - 1."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from . import fedsum_reference as ref

A_DIAG = [[1.0, 2.0], [2.0, 1.0], [1.0, 1.0]]
B = [[1.0, 0.0], [0.0, 1.0], [2.0, 3.0]]
XSTAR = np.array([0.75, 1.0])


def write_trace(path: Path, seq, client: int) -> Path:
    """A round_trace CSV of one client: online in (1-based) round t + 1 iff client in seq[t]."""
    lines = ["round,client,available"] + [f"{t + 1},{client},{int(client in St)}" for t, St in enumerate(seq)]
    path.write_text("\n".join(lines) + "\n")
    return path


def quad_scenario(algo: dict, seq, trace_dir: Path, K: int = 3, rounds=None, step_times=(1.0, 1.0, 1.0),
                  network="instant", executor="sequential") -> dict:
    """The spec's N = 3 quadratic under participation `seq` (repeated if rounds > len(seq))."""
    n = len(A_DIAG)
    key = abs(hash(str(seq))) % 10**8
    # one group per client (its own step time), each replaying its own column of `seq`
    groups = [{"name": f"c{i}", "count": 1, "compute": {"model": "constant", "step_time": step_times[i]},
               "network": network, "availability": {"model": "round_trace", "path": str(
                   write_trace(Path(trace_dir) / f"seq_{key}_{i}.csv", seq, i))}}
              for i in range(n)]
    return {
        "name": "fedsum_quad",
        "seed": 0,
        "workload": {"dataset": {"name": "client_quadratic", "a": A_DIAG, "c": B},
                     "model": {"name": "quadratic"}, "batch_size": "full"},
        "clients": {"count": n, "groups": groups},
        "protocol": {"name": "rounds", "select": {"model": "all"}, "local_steps": K},
        "algorithm": copy.deepcopy(algo),
        "run": {"rounds": rounds or len(seq)},
        "executor": {"name": executor, "dtype": "float64"},
    }


def run_world(sc: dict, each=None):
    """Run a scenario without writing a run directory; returns (iterates x^0..x^T as float64
    NumPy arrays, the world). The iterates are read from the algorithm after every aggregation;
    `each(algorithm, row)`, if given, is called there too."""
    from emulator.scenario import schema as scenario
    from emulator.sim.world import World

    holder = {}
    xs = []

    def grab(row):
        algo = holder["w"].tasks[0].algorithm
        xs.append(algo.global_params().detach().double().numpy().copy())
        if each is not None:
            each(algo, row)

    w = World(scenario.load(copy.deepcopy(sc)), progress=grab)     # round 0's row gives x^0
    holder["w"] = w
    w.run()
    return xs, w


def inv_sqrt(eta0):
    """The spec's decaying schedule eta_l^t = eta0 / sqrt(t/10 + 1), t 0-based."""
    return lambda t: eta0 / np.sqrt(t / 10 + 1)


# name -> (algorithm block for the emulator, reference(grads, x0, seq, eta_l, eta_g, K) -> iterates)
METHODS = {
    "fedsum_b": ({"name": "fedsum_b"}, lambda *a: ref.fedsum_family("B", *a)),
    "fedsum": ({"name": "fedsum"}, lambda *a: ref.fedsum_family("SUM", *a)),
    "fedsum_cr": ({"name": "fedsum_cr"}, lambda *a: ref.fedsum_family("CR", *a)),
    "fedavg": ({"name": "fedavg", "weighting": "uniform"}, ref.fedavg),
    "fedavg_active": ({"name": "fedavg_active"}, ref.fedavg),
    "scaffold": ({"name": "scaffold"}, ref.scaffold),
    "scaffold_1up": ({"name": "scaffold", "single_uplink": True}, ref.scaffold),
    "mifa": ({"name": "mifa"}, ref.mifa),
    "fedvarp": ({"name": "fedvarp"}, ref.fedvarp),
    "fedau": ({"name": "fedau"}, ref.fedau),
    "fedawe": ({"name": "fedawe"}, ref.fedawe),
    "fedawe_clip": ({"name": "fedawe", "clip_norm": 0.5}, lambda *a: ref.fedawe(*a, clip=0.5)),
}


def algo_block(method: str, lr: float, server_lr: float = 1.0, schedule: str = "constant") -> dict:
    blk = dict(METHODS[method][0], lr=lr)
    if server_lr != 1.0:
        blk["server_lr"] = server_lr
    if schedule != "constant":
        blk["lr_schedule"] = schedule
    return blk


def reference(method: str, seq, lr: float, K: int, server_lr: float = 1.0, schedule: str = "constant"):
    grads, _ = ref.problem()
    eta = lr if schedule == "constant" else inv_sqrt(lr)
    return METHODS[method][1](grads, np.zeros(2), [list(s) for s in seq], eta, server_lr, K)

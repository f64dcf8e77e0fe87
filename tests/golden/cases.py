"""The golden scenarios (`make golden`): small, fixed runs across protocols, engines,
executors, device models and the paper families. Their run directories are hashed and
compared with `tests/golden/hashes.json`; any change to a number flemu writes shows up.

Each case is a scenario (a dict, or a shipped scenario file) plus `--set` overrides. Every
case runs on one torch thread (`executor.threads=1`): results do not then depend on the
machine's core count. Keep each case under a few seconds.
"""
from __future__ import annotations

import copy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAPERS = ROOT / "scenarios" / "papers"
TRACE = ROOT / "scenarios" / "studies" / "traces" / "availability_example.csv"

LINK = {"latency": 0.01, "up_mbps": 1, "down_mbps": 3, "jitter": 0.1}


def base(**over) -> dict:
    """logreg on scikit-learn digits, 8 clients in two device classes (fast constant, slow
    lognormal), jittered links: small and real."""
    sc = {
        "name": "golden",
        "seed": 1,
        "workload": {"dataset": {"name": "digits"}, "partition": {"name": "dirichlet", "alpha": 0.5},
                     "model": {"name": "logreg"}, "batch_size": 16},
        "clients": {"count": 8, "groups": [
            {"name": "fast", "count": 4, "compute": {"model": "constant", "step_time": 0.1}, "network": LINK},
            {"name": "slow", "count": 4, "compute": {"model": "lognormal", "mean_step_time": 0.2, "sigma": 0.5},
             "network": LINK}]},
        "protocol": {"name": "rounds", "select": {"model": "uniform", "k": 4}, "local_steps": 5},
        "algorithm": {"name": "fedavg", "lr": 0.1},
        "run": {"rounds": 4, "target_accuracy": 0.5},
    }
    for path, v in over.items():
        node = sc
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = v
    return sc


def avail(model: dict, **over) -> dict:
    sc = base(**over)
    for g in sc["clients"]["groups"]:
        g["availability"] = dict(model)
    return sc


def quad(algo: str, rounds: int = 6, **kw) -> dict:
    """per-client quadratics, float64, a Bernoulli fleet: the FedSUM family's closed forms."""
    return {
        "name": "golden_quad", "seed": 2,
        "workload": {"dataset": {"name": "client_quadratic", "dim": 5}, "model": {"name": "quadratic"},
                     "batch_size": "full"},
        "clients": {"count": 6, "groups": [
            {"name": "g", "fraction": 1.0, "compute": {"model": "constant", "step_time": 1.0},
             "network": "instant", "availability": {"model": "bernoulli", "p": 0.6}}]},
        "protocol": {"name": "rounds", "select": {"model": "all"}, "local_steps": 3},
        "algorithm": {"name": algo, "lr": 0.05, **kw},
        "run": {"rounds": rounds},
        "executor": {"name": "sequential", "dtype": "float64"},
    }


DEADLINE = {"mode": "deadline", "seconds": 1.2}
FIRST_K = {"mode": "first_k", "k": 2}
SERVER_LINK = {"server_link": {"up_mbps": 0.5, "down_mbps": 1.0, "latency": 0.005}}
TOPOLOGY = {"topology": {"nodes": ["s", "a", "b"], "server": "s",
                         "links": [{"a": "s", "b": "a", "mbps": 2.0, "latency": 0.01},
                                   {"a": "s", "b": "b", "mbps": 0.5, "latency": 0.02}],
                         "attach": {"fast": "a", "slow": "b"}}}


def _cases() -> dict:
    c: dict = {}
    # rounds: both engines under every wait mode, unicast and multicast
    for engine in ("process", "vector"):
        c[f"all_{engine}"] = (base(**{"protocol.engine": engine}), [])
        c[f"deadline_{engine}"] = (base(**{"protocol.engine": engine, "protocol.wait": DEADLINE}), [])
        c[f"first_k_{engine}"] = (base(**{"protocol.engine": engine, "protocol.wait": FIRST_K}), [])
        c[f"multicast_{engine}"] = (base(**{"protocol.engine": engine, "protocol.wait": DEADLINE,
                                            "protocol.broadcast": "multicast"}), [])
        c[f"budget_{engine}"] = (base(**{"protocol.engine": engine, "run.rounds": None,
                                         "run.virtual_time": 4.1}), [])
        stuck = base(**{"protocol.engine": engine, "protocol.select": {"model": "all"}})
        stuck["clients"]["groups"][1].update(count=1, compute={"model": "iterations", "fixed": 0})
        stuck["clients"]["count"] = 5
        c[f"stalled_{engine}"] = (stuck, [])
    # executors on the same rounds
    for ex in ("sequential", "batched", "auto"):
        c[f"executor_{ex}"] = (base(**{"executor": {"name": ex}, "protocol.local_steps": 3}), [])
    # availability models (per round and continuous time), events
    c["bernoulli"] = (avail({"model": "bernoulli", "p": 0.6}), [])
    c["markov"] = (avail({"model": "markov", "p_on_off": 0.3, "p_off_on": 0.4}), [])
    c["markov_time_events"] = (avail({"model": "markov_time", "mean_on": 2.0, "mean_off": 0.5},
                                     **{"protocol.wait": DEADLINE, "output.events": True}), [])
    c["sine"] = (avail({"model": "sine", "p": 0.6, "amplitude": 0.3, "period": 4}), [])
    c["diurnal"] = (avail({"model": "diurnal", "period": 20.0, "slot": 1.0}), [])
    c["trace"] = (avail({"model": "trace", "path": str(TRACE)}), [])
    c["selection_cyclic"] = (base(**{"protocol.select": {"model": "cyclic", "k": 3}}), [])
    c["selection_biased"] = (base(**{"protocol.select": {"model": "biased", "p": [0.9, 0.2, 0.5, 0.7, 0.4, 0.6, 0.3, 0.8]}}), [])
    # shared links
    c["server_link_unicast"] = (base(**{"network": SERVER_LINK}), [])
    c["server_link_multicast"] = (base(**{"network": SERVER_LINK, "protocol.broadcast": "multicast"}), [])
    c["topology"] = (base(**{"network": TOPOLOGY, "protocol.wait": DEADLINE}), [])
    c["participants_eval_seconds"] = (base(**{"output.clients_csv": "participants", "run.eval_every": 1,
                                              "run.eval_every_seconds": 2.0, "run.eval_train": True}), [])
    c["momentum_epochs"] = (base(**{"algorithm": {"name": "fedavg", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.001},
                                    "protocol.local_steps": None, "protocol.local_epochs": 1}), [])
    eo = base(**{"network.overhead_bytes": 100, "network.compression": {"up": 0.5}})
    for g in eo["clients"]["groups"]:
        g["energy"] = {"compute_watts": 2.0, "transmit_watts": 1.0, "idle_watts": 0.1}
    c["energy_overhead"] = (eo, [])
    # algorithms on rounds
    c["fedprox"] = (base(**{"algorithm": {"name": "fedprox", "lr": 0.1, "mu": 0.1}}), [])
    c["scaffold"] = (base(**{"algorithm": {"name": "scaffold", "lr": 0.1}}), [])
    # FedUMF: unfinished background work skipped, waited for, fused partially
    for mode in ("skip", "wait", "partial"):
        c[f"fedumf_{mode}"] = (base(**{"algorithm": {"name": "fedumf", "lr": 0.1, "unfinished": mode},
                                       "protocol.select": {"model": "uniform", "k": 3}}), [])
    c["fedumf_multicast"] = (base(**{"algorithm": {"name": "fedumf", "lr": 0.1, "unfinished": "wait"},
                                     "protocol.broadcast": "multicast", "protocol.select": {"model": "uniform", "k": 3}}), [])
    c["fedumf_server_link"] = (base(**{"algorithm": {"name": "fedumf", "lr": 0.1}, "network": SERVER_LINK,
                                       "protocol.select": {"model": "uniform", "k": 3}}), [])
    c["fedumf_partial_markov_events"] = (avail({"model": "markov_time", "mean_on": 2.0, "mean_off": 0.5},
                                               **{"algorithm": {"name": "fedumf", "lr": 0.1, "unfinished": "partial"},
                                                  "protocol.select": {"model": "uniform", "k": 3},
                                                  "output.events": True}), [])
    # FedSUM family on quadratics (float64)
    for algo in ("fedsum", "fedsum_b", "fedsum_cr", "mifa", "fedau", "fedawe", "fedvarp", "fedavg_active"):
        c[f"quad_{algo}"] = (quad(algo), [])
    c["paper_fedsum_quadratic"] = (PAPERS / "fedsum_quadratic.yaml", ["run.rounds=30"])
    # async: FedAsync, FedBuff, a budget
    c["async_fedasync"] = (base(**{"protocol": {"name": "async", "local_steps": 3},
                                   "algorithm": {"name": "fedasync", "lr": 0.1}, "run.rounds": 10}), [])
    c["async_fedbuff"] = (base(**{"protocol": {"name": "async", "local_steps": 3},
                                  "algorithm": {"name": "fedasync", "lr": 0.1, "buffer": 3, "buffer_mode": "delta"},
                                  "run.rounds": 4}), [])
    c["async_budget_markov"] = (avail({"model": "markov_time", "mean_on": 2.0, "mean_off": 0.5},
                                      **{"protocol": {"name": "async", "local_steps": 3},
                                         "algorithm": {"name": "fedasync", "lr": 0.1},
                                         "run.rounds": None, "run.virtual_time": 3.3}), [])
    # intervals: T-SFL papers, shrunk; Markov availability
    c["paper_tsfl_case1_dms"] = (PAPERS / "tsfl_case1_dms.yaml", ["run.rounds=3"])
    c["paper_tsfl_case3_fedasync"] = (PAPERS / "tsfl_case3_fedasync.yaml", ["run.rounds=3"])
    c["intervals_markov"] = (avail({"model": "markov", "p_on_off": 0.3, "p_off_on": 0.4},
                                   **{"protocol": {"name": "intervals", "interval": 1.5, "iteration": "batch"},
                                      "algorithm": {"name": "tsfl_optimal", "lr": 0.1}}), [])
    # multi-model
    c["paper_mmfl_quadratic"] = (PAPERS / "mmfl_quadratic.yaml", ["run.rounds=12"])
    mm = avail({"model": "markov", "p_on_off": 0.3, "p_off_on": 0.4},
               **{"protocol": {"name": "multi_model", "assignment": "mfa_rand", "local_steps": 3,
                               "wait": DEADLINE, "allow_unequal_groups": True}})
    mm["workloads"] = [mm.pop("workload"), {"dataset": {"name": "digits"}, "partition": {"name": "iid"},
                                            "model": {"name": "mlp", "hidden": 16}, "batch_size": 16}]
    c["multi_model_deadline_markov"] = (mm, [])
    # the quickstart (real MNIST, the CNN), shrunk
    c["quickstart"] = (ROOT / "scenarios" / "quickstart.yaml", ["run.rounds=3"])
    for name, (sc, over) in c.items():
        if isinstance(sc, dict):
            sc = copy.deepcopy(sc)
            sc["name"] = name
            if sc["run"].get("rounds") is None:
                sc["run"].pop("rounds", None)
            if sc["protocol"].get("local_steps", 0) is None:
                sc["protocol"].pop("local_steps")
            c[name] = (sc, over)
    return c


CASES = _cases()

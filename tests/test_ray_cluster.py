"""A real Ray cluster with a fault (issue 16): a head and a second worker node started as separate
processes on this machine (`ray start --head --block`, `ray start --address ... --block`, one CPU
each, their own free ports, a private temp dir and auth token), a sweep run with
`flemu sweep FILE --backend ray --address ...`, and the worker node killed (every process of
it, SIGKILL) while it runs one of the sweep's tasks.

The sweep must finish by itself with every run exactly once (Ray runs the lost task again on
the head: emulator/sweep/ray_pool.py NODE_LOSS_RETRIES), give the records the local backend
gives, leave nothing half-written, and the cluster is stopped afterwards (its processes, found
by process group and parent, are killed by id even when the test fails; `ray stop` is not used:
it stops every Ray process of the user on the machine, other sessions' included).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import tiny
from fuzz import checks

ROOT = Path(__file__).resolve().parent.parent
RAY = Path(sys.executable).parent / "ray"
RUNS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_ports() -> list:
    """Every port a node opens, free ones (the defaults would collide with any other Ray)."""
    out = []
    for opt in ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
                "--dashboard-agent-grpc-port", "--metrics-export-port", "--runtime-env-agent-port"):
        out += [opt, str(free_port())]
    return out


def processes() -> dict:
    """pid -> (ppid, pgid, state, command) of every process on the machine."""
    out = {}
    ps = subprocess.run(["ps", "-eo", "pid=,ppid=,pgid=,stat=,args="], capture_output=True, text=True).stdout
    for line in ps.splitlines():
        pid, ppid, pgid, stat, *cmd = line.split(None, 4)
        out[int(pid)] = (int(ppid), int(pgid), stat, cmd[0] if cmd else "")
    return out


def node_processes(leader: int) -> dict:
    """The processes of the node started by `ray start` process `leader`: its process group and
    every descendant (Ray's workers start their own sessions, so the group alone misses them)."""
    ps = processes()
    found = {p for p, (_, pgid, _, _) in ps.items() if pgid == leader or p == leader}
    while True:
        more = {p for p, (ppid, _, _, _) in ps.items() if ppid in found} - found
        if not more:
            break
        found |= more
    return {p: ps[p] for p in found if not ps[p][2].startswith("Z")}      # zombies are gone already


def kill(pids) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_for(path: Path, text: str, proc, timeout: float = 120.0) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"ray start ended early:\n{path.read_text(errors='replace')[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"no '{text}' in {path} after {timeout} s")


@pytest.mark.slow
def test_a_sweep_survives_losing_a_worker_node_mid_run(tmp_path):
    pytest.importorskip("ray")
    if not RAY.exists():
        pytest.skip("the ray command is not installed beside this Python")
    temp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))      # short: Ray's socket paths live under it
    port = free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    common = ["--block", "--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--disable-usage-stats",
              "--object-store-memory", str(80 * 2**20)]
    # a sweep of RUNS small runs; on the cluster two at a time (one CPU per node): one lands on the worker
    sweep = {"name": "fault", "base": tiny(**{"run.rounds": 10}), "seeds": RUNS}
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(yaml.safe_dump(sweep))
    sweep_cmd = [sys.executable, "-m", "emulator.cli", "sweep", str(sweep_file), "-q", "--threads", "1"]
    started, driver, local = [], None, None
    try:
        address = f"127.0.0.1:{port}"
        head = subprocess.Popen([str(RAY), "start", "--head", "--port", str(port), "--temp-dir", str(temp),
                                 "--include-dashboard", "false", "--dashboard-port", str(free_port()),
                                 *common, *node_ports()],
                                stdout=open(temp / "head.log", "w"), stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
        started.append(head)
        worker = subprocess.Popen([str(RAY), "start", "--address", address, *common, *node_ports()],
                                  stdout=open(temp / "worker.log", "w"), stderr=subprocess.STDOUT,
                                  start_new_session=True, env=env)    # it waits for the head's GCS
        started.append(worker)
        # the local backend's records of the same sweep, meanwhile
        local = subprocess.Popen([*sweep_cmd, "--out", str(tmp_path / "local"), "-j", "1"], cwd=tmp_path, env=env,
                                 stdout=open(tmp_path / "local.log", "w"), stderr=subprocess.STDOUT)
        wait_for(temp / "head.log", "Ray runtime started", head)
        wait_for(temp / "worker.log", "Ray runtime started", worker)
        driver = subprocess.Popen([*sweep_cmd, "--out", str(tmp_path / "ray"), "--backend", "ray",
                                   "--address", address, "-j", "2"], cwd=tmp_path, env=env,
                                  stdout=open(tmp_path / "driver.log", "w"), stderr=subprocess.STDOUT)
        killed = None
        t0 = time.monotonic()
        while driver.poll() is None:
            assert time.monotonic() - t0 < 300, "the sweep did not finish in 300 s"
            if killed is None:
                procs = node_processes(worker.pid)
                if any("ray::run_to_files" in cmd for _, _, _, cmd in procs.values()):
                    kill(procs)                        # the whole node, mid-task
                    killed = sorted(procs)
            time.sleep(0.05)
        log = (tmp_path / "driver.log").read_text()
        assert killed, "no task ever ran on the worker node: the fault was not exercised\n" + log
        assert not node_processes(worker.pid), "the worker node survived its kill"
        assert driver.returncode == 0, log

        # every run exactly once: complete, started once and completed once in the driver's journal
        out = tmp_path / "ray"
        index = pd.read_csv(out / "sweep.csv")
        assert len(index) == RUNS and (index["status"] == "complete").all(), index[["run", "status", "error"]]
        events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
        for rid in index["run"]:
            assert [e["event"] for e in events if e.get("run") == rid] == ["run", "complete"], rid
        # nothing half-written: no temporary names, no failure records, every run directory whole
        assert not [p for p in out.rglob("*") if ".tmp-" in p.name or ".old-" in p.name]
        assert not list((out / "failures").iterdir())
        for rid in index["run"]:
            names = {p.name for p in (out / "runs" / rid).iterdir()}
            assert {"config.yaml", "metrics.csv", "clients.csv", "partition.csv", "summary.json", "model.npy"} <= names

        # the records the local backend gives for the same sweep
        assert local.wait(timeout=300) == 0, (tmp_path / "local.log").read_text()
        for rid in index["run"]:
            diff = checks.compare(tmp_path / "local" / "runs" / rid, out / "runs" / rid)
            assert not diff, f"{rid}: ray != local\n" + "\n".join(diff)
    finally:
        for p in (driver, local):
            if p is not None and p.poll() is None:
                p.kill()
        for _ in range(10):      # again while a node still forks (a process spawned mid-kill on a busy machine)
            left = {}
            for p in started:
                left.update(node_processes(p.pid))
            if not left:
                break
            kill(left)
            time.sleep(0.5)
        for p in started:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(temp, ignore_errors=True)
    survivors = {p: v for p in started for p, v in node_processes(p.pid).items()}
    assert not survivors, f"cluster processes still running: {survivors}"
